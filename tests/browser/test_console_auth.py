"""The console on a cluster with `auth.required`: the pages are served to anyone (they hold
no data), the data is not: the console shows its login form, gets a token with the user's
password (POST /v1/tokens) and sends it as a bearer; a 401 brings the form back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import Watched
from tests.harness.auth import ADMIN, auth_cluster, basic
from tests.harness.processes import Cluster, http

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]
REFUSED = "status of 401"  # Chromium's console line for each refused call: expected here


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = auth_cluster(tmp_path_factory.mktemp("console-auth"), brokers=1)
    running.start()
    try:
        deadline = time.monotonic() + 30
        while http("GET", running.urls[1] + "/v1/cluster", headers=basic(*ADMIN))[0] == 401:
            assert time.monotonic() < deadline, "the bootstrap user never appeared"
            time.sleep(0.2)  # it appears once a controller is active
        yield running
    finally:
        running.stop()


def test_login_with_a_token_and_back_to_the_form_on_logout(
    cluster: Cluster, watched: Watched
) -> None:
    watched.allowed.append(REFUSED)
    page = watched.page
    challenges: list[str | None] = []

    def on_response(response: Any) -> None:
        if response.status == 401:
            challenges.append(response.headers.get("www-authenticate"))

    page.on("response", on_response)
    url = cluster.urls[1]
    assert http("GET", url + "/v1/cluster")[0] == 401  # the data needs credentials
    page.goto(url + "/ui/")
    form = page.locator("#login-form")
    form.wait_for()
    assert page.locator("#view tr").count() == 0
    # the console's calls are challenged with Bearer only: no browser Basic prompt
    assert challenges and all(c == 'Bearer realm="kraftlite"' for c in challenges), challenges

    page.fill("#login-form input[name=user]", ADMIN[0])
    page.fill("#login-form input[name=password]", "wrong-password")
    page.click("#login-form button[type=submit]")
    page.get_by_text("Wrong user or password.").wait_for()

    page.fill("#login-form input[name=password]", ADMIN[1])
    page.click("#login-form button[type=submit]")
    page.locator('tr[data-broker="1"]').wait_for()
    assert not form.is_visible()
    token = page.evaluate("() => sessionStorage.getItem('kraftlite.console.token')")
    assert (
        token
        and http("GET", url + "/v1/cluster", headers={"Authorization": f"Bearer {token}"})[0] == 200
    )

    page.goto(url + "/ui/#/topics")  # the token lasts across pages of the tab
    page.get_by_text("No topics yet").wait_for()
    page.click("#logout")
    form.wait_for()
    assert page.evaluate("() => sessionStorage.getItem('kraftlite.console.token')") is None

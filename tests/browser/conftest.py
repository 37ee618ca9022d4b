"""Headless Chromium for the console's tests: the system's /usr/bin/chromium driven by
Playwright (no browser download: never `playwright install`), one browser per module, a
fresh profile, and a page fixture that fails a test on any console error or uncaught
exception and saves a screenshot of the page under the test's tmp dir.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and not CHROMIUM.exists():
            item.add_marker(
                pytest.mark.skip(
                    reason=f"{CHROMIUM} is absent (Debian: apt-get install chromium; "
                    "scripts/test installs it where it may)"
                )
            )


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=ARGS,
            headless=True,
            viewport={"width": 1280, "height": 860},
        )
        try:
            yield context
        finally:
            context.close()


@dataclass
class Watched:
    """A page and what went wrong on it."""

    page: Any
    errors: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)  # substrings of expected console errors

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in self.allowed)]


@pytest.fixture
def watched(browser: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Watched]:
    page = browser.new_page()
    page.set_default_timeout(15_000)
    watched = Watched(page)
    page.on(
        "console",
        lambda m: (
            watched.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        ),
    )
    page.on("pageerror", lambda e: watched.errors.append(f"uncaught: {e}"))
    try:
        yield watched
        page.wait_for_timeout(300)  # a last refresh's errors
        assert watched.unexpected() == []
    finally:
        shots = tmp_path / "screenshots"
        shots.mkdir(exist_ok=True)
        page.screenshot(path=str(shots / f"{request.node.name}.png"), full_page=True)
        page.close()

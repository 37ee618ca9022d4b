"""Test hosts for the network tests: skipped, with the reason, where namespaces cannot be
made (not root, no iproute2 or nftables); scripts/_bootstrap.sh installs the tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness import hosts
from tests.harness.hosts import TestNet

NODES = [*(f"controller-{i}" for i in (1, 2, 3)), *(f"broker-{i}" for i in (1, 2, 3))]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    why = hosts.available()
    for item in items:
        if why is not None and item.get_closest_marker("network") is not None:
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture
def net() -> Iterator[TestNet]:
    """Six node hosts and a client host; the test runs inside "client"."""
    network = TestNet([*NODES, "client"])
    try:
        with network.inside("client"):
            yield network
    finally:
        network.close()

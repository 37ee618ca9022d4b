"""One in-process broker per test (tests/harness/inprocess.py), with a topic `orders` of
two partitions that it leads."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.harness.inprocess import InProcessBroker


@pytest.fixture
async def node() -> AsyncIterator[InProcessBroker]:
    async with InProcessBroker() as broker:
        broker.create_topic("orders", partitions=2)
        yield broker

"""Log lines: JSON off a terminal, bound to node id and role, stdlib loggers included."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from kraftlite.logs import configure_logging


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    handlers = logging.getLogger().handlers[:]
    yield
    logging.getLogger().handlers[:] = handlers
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def test_json_lines_carry_node_id_and_role() -> None:
    stream = io.StringIO()
    configure_logging(role="broker", node_id=3, log_format="auto", stream=stream)
    structlog.get_logger().info("partition_opened", partition="t-0")
    logging.getLogger("pysyncobj").warning("from the standard library")
    structlog.get_logger().debug("filtered out at info level")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["partition_opened", "from the standard library"]
    for line in lines:
        assert line["node_id"] == 3
        assert line["role"] == "broker"
        assert "timestamp" in line
    assert lines[0]["partition"] == "t-0"
    assert lines[1]["level"] == "warning"


def test_console_format_is_not_json() -> None:
    stream = io.StringIO()
    configure_logging(role="controller", node_id=1, log_format="console", stream=stream)
    structlog.get_logger().info("hello")
    line = stream.getvalue().strip()
    assert "hello" in line
    assert "node_id=1" in line
    assert not line.startswith("{")

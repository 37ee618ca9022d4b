"""kraftlite's error codes are Kafka's numbers (both edges answer them): each one below 1000
is checked against an independent client's table (kafka-python's `kafka.errors`)."""

from __future__ import annotations

import pytest

from kraftlite.errors import ErrorCode

pytestmark = [  # kafka-python 3.0.12 reads its schemas with a deprecated importlib call
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]

# kafka-python keeps some older names for the same numbers
_KAFKA_PYTHON_NAMES = {
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
    "GROUP_NOT_EMPTY": "NON_EMPTY_GROUP",
}


@pytest.mark.parametrize("code", [c for c in ErrorCode if c < 1000], ids=lambda c: c.name)
def test_each_code_is_kafkas_number_for_that_error(code: ErrorCode) -> None:
    from kafka import errors  # noqa: PLC0415 - a test-only client

    assert errors.for_code(int(code)).message == _KAFKA_PYTHON_NAMES.get(code.name, code.name)

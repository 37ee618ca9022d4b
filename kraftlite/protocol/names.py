"""Names clients choose (groups, members, client ids, users, ACL fields): one rule, stated
once and published in the OpenAPI document as the same pattern, so what the document allows
the server accepts. Pure.

A name has no C0 or C1 control characters (they would break log lines and terminals) and
is not empty; each kind has its own length and, for users, a few reserved characters.
Static group members' instance ids are Kafka's instead (`is_instance_id`): a topic name's
characters, which Kafka's clients check them against.
"""

from __future__ import annotations

import re
from typing import Final

# The lengths of the names clients choose, for both edges, the internal messages and the
# OpenAPI document: declared here and nowhere else.
MAX_TRANSACTIONAL_ID: Final = 1024  # characters (Kafka bounds it by the request's size only)
MAX_TOPIC_NAME: Final = 249  # Kafka's (and [a-zA-Z0-9._-] only: metadata/topics.py)
MAX_GROUP_NAME: Final = 249  # as a topic's: a group's offsets may be named after it
MAX_MEMBER_ID: Final = 64  # an HTTP client's own (a UUID, so a retried join is the same member)
MAX_CLIENT_ID: Final = 255  # printable; shown by describe and the CLI
MAX_SUBSCRIBED_TOPICS: Final = 1000  # topic names one group member subscribes to
MAX_INSTANCE_ID: Final = 249  # a static member's group.instance.id: Kafka's, as a topic name's

NO_CONTROLS: Final = "[^\\x00-\\x1f\\x7f-\\x9f]"
_NAME: Final = re.compile(f"{NO_CONTROLS}+")
# Kafka's JoinGroupRequest.validateGroupInstanceId (its Topic.validate): these characters,
# and neither "." nor ".."
_INSTANCE_ID: Final = re.compile(f"[a-zA-Z0-9._-]{{1,{MAX_INSTANCE_ID}}}")


def pattern(max_length: int, excluded: str = "") -> str:
    """The JSON-schema pattern of a name of 1 to `max_length` characters without controls
    (nor the `excluded` characters)."""
    allowed = NO_CONTROLS if not excluded else f"[^\\x00-\\x1f\\x7f-\\x9f{re.escape(excluded)}]"
    return f"^{allowed}{{1,{max_length}}}$"


def is_name(value: object, max_length: int, excluded: str = "") -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= max_length
        and _NAME.fullmatch(value) is not None
        and not any(c in excluded for c in value)
    )


def is_instance_id(value: object) -> bool:
    """A static group member's instance id (`group.instance.id`), as Kafka's clients check
    it: 1 to MAX_INSTANCE_ID of [a-zA-Z0-9._-], not "." or ".."."""
    return (
        isinstance(value, str)
        and _INSTANCE_ID.fullmatch(value) is not None
        and value not in {".", ".."}
    )


def decimal(text: str, max_digits: int = 18) -> int | None:
    """`text` as a non-negative integer written in ASCII digits, or None. `str.isdigit` is
    not enough: it takes "²" and other digits `int()` refuses (issue 24: a broker named
    "²" closed the connection)."""
    if not text or len(text) > max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)

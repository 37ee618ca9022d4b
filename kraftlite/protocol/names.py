"""Names clients choose (groups, members, client ids, users, ACL fields): one rule, stated
once and published in the OpenAPI document as the same pattern, so what the document allows
the server accepts. Pure.

A name has no C0 or C1 control characters (they would break log lines and terminals) and
is not empty; each kind has its own length and, for users, a few reserved characters.
"""

from __future__ import annotations

import re
from typing import Final

# The lengths of the names clients choose, for both edges, the internal messages and the
# OpenAPI document: declared here and nowhere else.
MAX_TOPIC_NAME: Final = 249  # Kafka's (and [a-zA-Z0-9._-] only: metadata/topics.py)
MAX_GROUP_NAME: Final = 249  # as a topic's: a group's offsets may be named after it
MAX_MEMBER_ID: Final = 64  # an HTTP client's own (a UUID, so a retried join is the same member)
MAX_CLIENT_ID: Final = 255  # printable; shown by describe and the CLI
MAX_SUBSCRIBED_TOPICS: Final = 1000  # topic names one group member subscribes to

NO_CONTROLS: Final = "[^\\x00-\\x1f\\x7f-\\x9f]"
_NAME: Final = re.compile(f"{NO_CONTROLS}+")


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


def decimal(text: str, max_digits: int = 18) -> int | None:
    """`text` as a non-negative integer written in ASCII digits, or None. `str.isdigit` is
    not enough: it takes "²" and other digits `int()` refuses (issue 24: a broker named
    "²" closed the connection)."""
    if not text or len(text) > max_digits or not text.isascii() or not text.isdigit():
        return None
    return int(text)

"""Topic names and topic configs: the rules of the contract, with Kafka's config names.

Pure validation; violations raise KraftliteError with the contract's error code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import names

_TOPIC_NAME = re.compile(rf"[a-zA-Z0-9._-]{{1,{names.MAX_TOPIC_NAME}}}")
_DECIMAL = re.compile(r"-?[0-9]{1,19}")  # as Java's Long.parseLong: no "1_0", " 1", "+1"
# a double as Java's Double.parseDouble reads one (0.5, 1, .5, 0., 5e-1), but no sign,
# NaN, Infinity or hex: a ratio is never one of those
_RATIO = re.compile(r"([0-9]{1,20}(\.[0-9]{0,20})?|\.[0-9]{1,20})([eE][-+]?[0-9]{1,3})?")
# created by brokers, not users: the groups' offsets and the transactions' state
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})


def is_internal_topic(name: str) -> bool:
    """Names reserved for the cluster ("__" and up): only brokers read, write or change them."""
    return name.startswith("__")


def validate_topic_name(name: object, *, internal: bool = False) -> str:
    """1-249 of [a-zA-Z0-9._-], not "." or "..", not starting with "__" unless internal."""
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in {".", ".."}:
        raise KraftliteError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic name {name!r} must be 1-249 of [a-zA-Z0-9._-], not '.' or '..'",
        )
    if name.startswith("__") and not internal:
        raise KraftliteError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"topic names starting with '__' are reserved: {name}",
        )
    return name


def parse_long(text: str) -> int | None:
    """`text` as a 64-bit decimal integer, or None (Python's int() also takes "1_0", " 1 ")."""
    if not _DECIMAL.fullmatch(text):
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def _long_at_least(minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        number = parse_long(value)
        if number is None:
            return "must be a 64-bit integer"
        return f"must be >= {minimum}" if number < minimum else None

    return check


def _one_of(*allowed: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in allowed else f"must be one of {', '.join(allowed)}"

    return check


CLEANUP_POLICIES: Final = ("delete", "compact")
LIST_CONFIGS: Final = frozenset({"cleanup.policy"})  # comma-separated lists, as Kafka's


def cleanup_policies(value: str) -> frozenset[str]:
    """The policies a `cleanup.policy` value lists (Kafka's: comma-separated, spaces
    around each ignored)."""
    return frozenset(part.strip() for part in value.split(",")) - {""}


def is_compacted(configs: Mapping[str, str]) -> bool:
    """Whether the log cleaner compacts this topic (`compact` or `compact,delete`)."""
    return "compact" in cleanup_policies(effective_config(configs, "cleanup.policy"))


def has_retention(configs: Mapping[str, str]) -> bool:
    """Whether retention deletes old records of this topic (`delete`, `compact,delete`)."""
    return "delete" in cleanup_policies(effective_config(configs, "cleanup.policy"))


def _cleanup_policy(value: str) -> str | None:
    """A list of `delete` and `compact`, each at most once; empty is neither (Kafka takes
    it: records are kept for ever)."""
    parts = [part.strip() for part in value.split(",")]
    if not value.strip():
        return None
    if any(part not in CLEANUP_POLICIES for part in parts):
        return "must be delete, compact, both (compact,delete), or empty (neither)"
    return "lists a policy twice" if len(set(parts)) != len(parts) else None


def _ratio(value: str) -> str | None:
    """A double in [0, 1], written as Java's Double.parseDouble takes it (no nan, inf)."""
    if not _RATIO.fullmatch(value.strip()):
        return "must be a number from 0 to 1"
    return None if 0.0 <= float(value) <= 1.0 else "must be a number from 0 to 1"


COMPRESSION_TYPES: Final = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TOPIC_CONFIGS: Final[Mapping[str, tuple[str, Callable[[str], str | None]]]] = {
    # name: (default, check)
    "retention.ms": ("604800000", _long_at_least(-1)),
    "retention.bytes": ("-1", _long_at_least(-1)),
    "min.insync.replicas": ("1", _long_at_least(1)),
    "max.message.bytes": ("1048588", _long_at_least(0)),
    "cleanup.policy": ("delete", _cleanup_policy),
    "unclean.leader.election.enable": ("false", _one_of("true", "false")),
    # the codec Kafka fetches carry the topic's batches in ("producer", the default, and
    # "uncompressed": as stored, uncompressed; ADR 0002)
    "compression.type": ("producer", _one_of(*COMPRESSION_TYPES)),
    # how long a compacted topic keeps a key's tombstone (Kafka's; read by the cleaner of
    # compacted topics only, as Kafka's: a delete-policy topic takes it and ignores it)
    "delete.retention.ms": ("86400000", _long_at_least(0)),
    # the log cleaner's, for compacted topics (storage/compaction.py): a record stays
    # uncleaned for at least the min lag, becomes cleanable after the max lag whatever the
    # dirty ratio, and a pass starts once the dirty part is this share of the log
    "min.compaction.lag.ms": ("0", _long_at_least(0)),
    "max.compaction.lag.ms": (str(2**63 - 1), _long_at_least(1)),
    "min.cleanable.dirty.ratio": ("0.5", _ratio),
}


# What each config takes, for the API document: the smallest integer, RATIO (a number
# from 0 to 1), or the strings.
RATIO: Final = "ratio"
CONFIG_VALUES: Final[Mapping[str, int | str | tuple[str, ...]]] = {
    "retention.ms": -1,
    "retention.bytes": -1,
    "min.insync.replicas": 1,
    "max.message.bytes": 0,
    "cleanup.policy": ("delete", "compact", "compact,delete", "delete,compact", ""),
    "unclean.leader.election.enable": ("true", "false"),
    "compression.type": COMPRESSION_TYPES,
    "delete.retention.ms": 0,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": 1,
    "min.cleanable.dirty.ratio": RATIO,
}


def normalize_config_value(name: str, value: object) -> str:
    """Kafka configs are strings; accept JSON numbers and booleans for convenience."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, float):  # a ratio (nan and inf stay refused)
        return repr(value)
    raise KraftliteError(
        ErrorCode.INVALID_CONFIG, f"config {name} = {value!r} must be a string or number"
    )


def validate_topic_configs(configs: object) -> dict[str, str | None]:
    """Checked, normalized configs ({name: value}; None resets a config to its default)."""
    if not isinstance(configs, Mapping):
        raise KraftliteError(ErrorCode.INVALID_CONFIG, "configs must be an object")
    result: dict[str, str | None] = {}
    for name, raw in configs.items():
        if name not in TOPIC_CONFIGS:
            known = ", ".join(sorted(TOPIC_CONFIGS))
            raise KraftliteError(
                ErrorCode.INVALID_CONFIG, f"unknown topic config {name!r} (known: {known})"
            )
        if raw is None:
            result[name] = None
            continue
        value = normalize_config_value(name, raw)
        complaint = TOPIC_CONFIGS[name][1](value)
        if complaint:
            raise KraftliteError(ErrorCode.INVALID_CONFIG, f"config {name} = {value!r} {complaint}")
        result[name] = value
    return result


def check_config_combination(configs: Mapping[str, str]) -> None:
    """What a topic's configs must be together (Kafka's LogConfig.validate): a compaction
    lag range that is not empty."""
    low = int(effective_config(configs, "min.compaction.lag.ms"))
    high = int(effective_config(configs, "max.compaction.lag.ms"))
    if high < low:
        raise KraftliteError(
            ErrorCode.INVALID_CONFIG,
            f"max.compaction.lag.ms ({high}) must not be below min.compaction.lag.ms ({low})",
        )


def effective_config(configs: Mapping[str, str], name: str) -> str:
    """A topic's value for `name`, or the default."""
    return configs.get(name, TOPIC_CONFIGS[name][0])

"""The OpenAPI 3.1 document of HTTP API v1 (the contract: shared design api-v1.md), served by
brokers at `GET /v1/openapi.json`.

Each operation is one `_operation(...)` call: its parameters, body, answers and the error codes
it can return. Error answers are derived from kraftlite.errors (each code's HTTP status and
retriability) and topic configs from kraftlite.metadata.topics, so the document follows the
code; the admin bodies' schemas are generated from the types the controllers decode them with
(protocol/admin.py and admin_bodies.py, with msgspec). tests/unit/test_openapi.py checks that
the document is valid OpenAPI 3.1, that it has every route the broker app registers, that it
names only real error codes, and that each admin body's schema is its type's. The consumer
group operations are in the contract but not served yet: they carry
`"x-kraftlite-status": "planned"`. Paths under /v1/internal are not public and not here.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import msgspec

from kraftlite import __version__
from kraftlite.controller.elastic import BROKER_CONFIGS, MAX_CONFIG_VALUE
from kraftlite.errors import ERROR_INFO, ErrorCode
from kraftlite.metadata.topics import CONFIG_VALUES, RATIO, TOPIC_CONFIGS
from kraftlite.protocol import admin, admin_bodies, names
from kraftlite.protocol.admin_bodies import USER_NAME_EXCLUDED

Json = dict[str, Any]

JSON: Final = "application/json"
PROBLEM_JSON: Final = "application/problem+json"  # as kraftlite.api.errors (which needs aiohttp)
BATCH_TYPE: Final = "application/vnd.kraftlite.batch"  # as kraftlite.api.broker_app
KAFKA_BATCHES_TYPE: Final = "application/vnd.kraftlite.kafka-batches"  # as protocol.headers
TRANSACTIONAL_ID: Final = "X-Kraftlite-Transactional-Id"  # as kraftlite.protocol.headers
METRICS_TYPE: Final = "text/plain"  # Prometheus text exposition format
STATUS_EXTENSION: Final = "x-kraftlite-status"
PLANNED: Final = "planned"


# ---------------------------------------------------------------------------- schema helpers


def _config_value(name: str) -> Json:
    """What a topic config takes: an integer from its minimum up (as a number or a decimal
    string), or one of its strings (booleans as JSON booleans too); null resets it."""
    allowed = CONFIG_VALUES[name]
    if allowed == RATIO:
        choices: list[Json] = [
            {"type": "number", "minimum": 0, "maximum": 1},
            {"type": "string", "pattern": r"^([01]|0?\.[0-9]{1,17}|1\.0{0,17})$"},  # and more
        ]
    elif isinstance(allowed, int):
        digits = "(0|[1-9][0-9]{0,18})"
        pattern = {-1: f"^(-1|{digits})$", 0: f"^{digits}$"}.get(allowed, "^[1-9][0-9]{0,18}$")
        choices = [
            {"type": "integer", "minimum": allowed, "maximum": 2**63 - 1},
            {"type": "string", "pattern": pattern},
        ]
    else:
        assert isinstance(allowed, tuple)
        choices = [{"enum": list(allowed)}]
        if set(allowed) == {"true", "false"}:
            choices.append({"type": "boolean"})
    return {"anyOf": [*choices, {"type": "null"}]}


def _ref(name: str, kind: str = "schemas") -> Json:
    return {"$ref": f"#/components/{kind}/{name}"}


def _scalar(kind: str, description: str = "", *, nullable: bool = False, **keywords: Any) -> Json:
    schema: Json = {"type": [kind, "null"] if nullable else kind, **keywords}
    if description:
        schema["description"] = description
    return schema


def _int(description: str = "", *, nullable: bool = False, **keywords: Any) -> Json:
    return _scalar("integer", description, nullable=nullable, **keywords)


def _long(description: str = "", *, nullable: bool = False, **keywords: Any) -> Json:
    """A 64-bit integer: offsets, timestamps in unix milliseconds."""
    return _scalar("integer", description, nullable=nullable, format="int64", **keywords)


def _str(description: str = "", *, nullable: bool = False, **keywords: Any) -> Json:
    return _scalar("string", description, nullable=nullable, **keywords)


def _bool(description: str = "", **keywords: Any) -> Json:
    return _scalar("boolean", description, **keywords)


def _array(items: Json, description: str = "", **keywords: Any) -> Json:
    schema: Json = {"type": "array", "items": items, **keywords}
    if description:
        schema["description"] = description
    return schema


def _object(
    properties: Json, required: Sequence[str] = (), description: str = "", **keywords: Any
) -> Json:
    schema: Json = {"type": "object", "properties": properties, **keywords}
    if required:
        schema["required"] = list(required)
    if description:
        schema["description"] = description
    return schema


def _map(values: Json, description: str = "") -> Json:
    """A JSON object with free names and values of one schema."""
    return _object({}, description=description, additionalProperties=values)


# ---------------------------------------------------------------------------- schemas

_ENCODING = _str(enum=["utf8", "base64"], default="utf8")
_BYTES = _str(
    "UTF-8 text, or base64 with the matching encoding; null for none (a null value is a tombstone)",
    nullable=True,
)
_PARTITION_INDEX = _int("partition index", minimum=0, maximum=2**31 - 1)
_OFFSET = _long("offset", minimum=0)
_BROKER_ID = _int("broker id; -1 for none")
_INT64: Final[Json] = {"minimum": -(2**63), "maximum": 2**63 - 1}


def _body_schemas() -> Json:
    """The admin bodies' schemas, generated from the types the controllers decode them with
    (protocol/admin.py, admin_bodies.py): the document cannot say other than the servers do.
    A rule about a whole body (admin_bodies.py rule 2) msgspec states where the body is
    referenced; it goes into the body's own schema here, so every reference has it."""
    wholes, schemas = msgspec.json.schema_components(
        admin_bodies.DOCUMENTED_BODIES, ref_template=admin.REF_TEMPLATE
    )
    for whole in wholes:
        name = whole.pop("$ref").removeprefix(admin.REF_TEMPLATE.format(name=""))
        schemas[name] = {**schemas[name], **whole}
    return schemas


BODY_SCHEMAS: Final = _body_schemas()
_QUOTA_FIELDS: Final[Json] = {
    name: schema
    for name, schema in BODY_SCHEMAS["QuotaRequest"]["properties"].items()
    if name != "principal"
}

_FETCHED_RECORD_FIELDS: Final[Json] = {
    "offset": _OFFSET,
    "timestamp": _long("unix milliseconds"),
    "key": _BYTES,
    "value": _BYTES,
    "headers": _map(
        _str(nullable=True),
        "values in the fetch encoding; null for a null value, as Kafka's (an empty "
        "one is the empty string)",
    ),
    "key_encoding": _str("set when utf8 was asked but the key is not UTF-8", const="base64"),
    "value_encoding": _str(
        "set when utf8 was asked but the value is not UTF-8 (headers follow it)",
        const="base64",
    ),
}


SCHEMAS: Final[Json] = {
    "User": _object(
        {
            "name": _str(),
            "credentials": _array(
                _object({"mechanism": _str(), "iterations": _int()}, required=["mechanism"])
            ),
        },
        required=["name", "credentials"],
    ),
    "Users": _object({"users": _array(_ref("User"))}, required=["users"]),
    "Acl": _object(
        {"id": _str(), **BODY_SCHEMAS["AclRequest"]["properties"]},
        required=["id", *BODY_SCHEMAS["AclRequest"]["properties"]],
    ),
    "Acls": _object({"acls": _array(_ref("Acl"))}, required=["acls"]),
    "AclsDeleted": _object({"deleted": _array(_ref("Acl"))}, required=["deleted"]),
    "Quota": _object({"principal": _str(), **_QUOTA_FIELDS}, required=["principal"]),
    "Quotas": _object({"quotas": _array(_ref("Quota"))}, required=["quotas"]),
    "TransactionalProducerRequest": _object(
        {
            "transaction_timeout_ms": _int(
                "an open transaction older than this is aborted by its coordinator; at most "
                "transaction.max.timeout.ms",
                minimum=1,
                default=60_000,
            ),
            "producer_id": _long("KIP-360: the id this producer had (with its epoch)", minimum=0),
            "producer_epoch": _int(
                "KIP-360: the epoch this producer had", minimum=0, maximum=32767
            ),
        },
        dependentRequired={"producer_id": ["producer_epoch"], "producer_epoch": ["producer_id"]},
    ),
    "TransactionPartitionsRequest": _object(
        {
            "producer_id": _long(minimum=0),
            "producer_epoch": _int(minimum=0, maximum=32767),
            "partitions": _array(
                _object(
                    {"topic": _ref("TopicName"), "partition": _PARTITION_INDEX},
                    required=["topic", "partition"],
                ),
                "each partition once",
                minItems=1,
                maxItems=10_000,
                uniqueItems=True,
            ),
        },
        required=["producer_id", "producer_epoch", "partitions"],
    ),
    "TransactionGroupRequest": _object(
        {
            "producer_id": _long(minimum=0),
            "producer_epoch": _int(minimum=0, maximum=32767),
            "group": _str("the consumer group", pattern=names.pattern(249)),
        },
        required=["producer_id", "producer_epoch", "group"],
    ),
    "EndTransactionRequest": _object(
        {
            "producer_id": _long(minimum=0),
            "producer_epoch": _int(minimum=0, maximum=32767),
            "commit": _bool("true: commit; false: abort"),
            "tag": _str(
                "a commit only: what it commits, kept with the decision and shown as "
                "commit_tag until a later commit carries another",
                pattern=names.pattern(256),
            ),
        },
        required=["producer_id", "producer_epoch", "commit"],
    ),
    "Transaction": _object(
        {
            "transactional_id": _str(),
            "state": _str(
                "Kafka's name of the state",
                enum=[
                    "Empty",
                    "Ongoing",
                    "PrepareCommit",
                    "PrepareAbort",
                    "CompleteCommit",
                    "CompleteAbort",
                    "Dead",
                    "PrepareEpochFence",
                ],
            ),
            "producer_id": _long(),
            "producer_epoch": _int(),
            "transaction_timeout_ms": _int(),
            "start_ms": _long("when the current or last transaction began", nullable=True),
            "partitions": _array(
                _object({"topic": _ref("TopicName"), "partition": _PARTITION_INDEX}),
                "in the transaction (those of topics the caller may describe)",
            ),
            "commit_tag": _str("the tag of the last commit that carried one", nullable=True),
        },
        required=["transactional_id", "state", "producer_id", "producer_epoch", "partitions"],
    ),
    "ProducerId": _object(
        {
            "producer_id": _long("put it, with the epoch and a sequence, on binary batches"),
            "producer_epoch": _int(),
        },
        required=["producer_id", "producer_epoch"],
    ),
    "Token": _object(
        {
            "token": _str("send as Authorization: Bearer <token>"),
            "expires_at": _long("unix milliseconds"),
            "principal": _str(),
        },
        required=["token", "expires_at", "principal"],
    ),
    "Problem": _object(
        {
            "error_code": _str(
                "the error's name, Kafka's where one fits; clients should expect new ones"
            ),
            "message": _str("what went wrong, for people"),
            "status": _int("the HTTP status"),
            "retriable": _bool("whether the same request may succeed later"),
        },
        required=["error_code", "message", "status", "retriable"],
        description="An error (application/problem+json); some codes add details.",
        additionalProperties=True,
    ),
    "Health": _object({"status": _str(const="ok")}, required=["status"]),
    "Readiness": _object(
        {
            "ready": _bool("registered, unfenced and caught up on metadata"),
            "broker_id": _int(),
            "broker_epoch": _long("-1 until registered"),
            "fenced": _bool(),
            "metadata_version": _long("version of the metadata image this broker has applied"),
            "boot_id": _str("names this start of the process: another after a restart"),
        },
        required=["ready", "broker_id", "broker_epoch", "fenced", "metadata_version", "boot_id"],
    ),
    "Restarting": _object(
        {
            "restarting": _bool(),
            "boot_id": _str("the boot id of the process that stops (GET /readyz)"),
        },
        required=["restarting", "boot_id"],
    ),
    "Broker": _object(
        {
            "id": _int(),
            "url": _str(format="uri"),
            "kafka": _str("its Kafka listener, host:port", nullable=True),
            "rack": _str(nullable=True),
            "fenced": _bool("fenced brokers lead no partition and are out of every ISR"),
            "in_controlled_shutdown": _bool(
                "shutting down: its leaderships are moving away; it joins no ISR"
            ),
            "broker_epoch": _long(),
        },
        required=["id", "url", "rack", "fenced", "broker_epoch"],
    ),
    "Cluster": _object(
        {
            "cluster_id": _str(),
            "controller": _object(
                {
                    "leader_id": _int("the active controller; null while electing", nullable=True),
                    "term": _long("Raft term"),
                },
                required=["leader_id", "term"],
            ),
            "brokers": _array(_ref("Broker")),
        },
        required=["cluster_id", "controller", "brokers"],
    ),
    "TopicSummary": _object(
        {
            "name": _ref("TopicName"),
            "partitions": _int("partition count"),
            "replication_factor": _int(),
        },
        required=["name", "partitions", "replication_factor"],
    ),
    "TopicList": _object(
        {
            "topics": _array(
                _ref("TopicSummary"),
                "by name; internal (__) topics left out; on a page (limit, after or contains "
                "given) each topic has its configs too",
            ),
            "total": _int("on a page: how many topics match (every page)", minimum=0),
            "next": _str("on a page: `after` for the next page; null on the last", nullable=True),
        },
        required=["topics"],
    ),
    "PartitionPage": _object(
        {
            "name": _ref("TopicName"),
            "topic_id": _str(),
            "configs": _ref("TopicConfigs"),
            "partition_count": _int(minimum=0),
            "replication_factor": _int(minimum=0),
            "under_replicated": _int("partitions whose ISR is smaller than the replicas"),
            "offline": _int("partitions without a leader"),
            "total": _int("how many partitions match (every page)", minimum=0),
            "next": _int("`after` for the next page; null on the last", nullable=True),
            "partitions": _array(_ref("PartitionInfo"), "by index"),
        },
        required=[
            "name",
            "configs",
            "partition_count",
            "under_replicated",
            "offline",
            "total",
            "next",
            "partitions",
        ],
    ),
    "Rates": _object(
        {
            name: {"type": "number", "minimum": 0, "description": f"{what} per second"}
            for name, what in (
                ("produce_bytes", "batch bytes appended as leader"),
                ("produce_records", "records appended as leader"),
                ("fetch_bytes", "batch bytes served to consumers"),
                ("fetch_records", "records served as JSON to consumers"),
            )
        },
        required=["produce_bytes", "produce_records", "fetch_bytes", "fetch_records"],
        description="over about the last 10 s, sampled when asked; null until two samples "
        "a second apart exist",
    ),
    "ClusterStats": _object(
        {
            "under_replicated_partitions": _int("ISR smaller than the replicas", minimum=0),
            "offline_partitions": _int("no leader", minimum=0),
            "rates": {"anyOf": [_ref("Rates"), {"type": "null"}]},
            "brokers": _array(
                _object(
                    {
                        "id": _int(),
                        "answered": _bool("false: fenced, or no answer within 2 s"),
                        "leaders": _int("partitions it leads"),
                        "replicas": _int("replicas it holds"),
                        "disk_bytes": _long("bytes of every replica it holds"),
                        "rates": {"anyOf": [_ref("Rates"), {"type": "null"}]},
                    },
                    required=["id", "answered"],
                ),
                "every registered broker (none on a controller)",
            ),
            "topics": _map(
                _object(
                    {
                        "size_bytes": _long("bytes of its partitions' leaders' logs"),
                        "partitions": _map(_long(), "bytes of each partition's leader's log"),
                        "rates": {"anyOf": [_ref("Rates"), {"type": "null"}]},
                        "compaction": _map(
                            _object(
                                {
                                    "dirty_ratio": {
                                        "type": "number",
                                        "minimum": 0,
                                        "maximum": 1,
                                        "description": "dirty bytes over the cleanable range's",
                                    },
                                    "lag_ms": _long("how long the oldest dirty record waited"),
                                    "since_pass_ms": _long(
                                        "time since the last pass (null: none yet)",
                                        nullable=True,
                                    ),
                                },
                                required=["dirty_ratio", "lag_ms", "since_pass_ms"],
                            ),
                            "a compacted topic's cleaner, by partition, as its leader last "
                            "saw it (empty for other topics)",
                        ),
                    },
                    required=["size_bytes", "partitions", "rates"],
                ),
                "the topics named in `topics` that the caller may DESCRIBE",
            ),
        },
        required=["under_replicated_partitions", "offline_partitions", "rates", "brokers"],
    ),
    "TopicName": _str(
        "1-249 of [a-zA-Z0-9._-], not . or ..; names starting with __ are reserved",
        pattern=r"^[a-zA-Z0-9._-]{1,249}$",
    ),
    "TopicConfigs": _object(
        {name: _str(default=default) for name, (default, _) in TOPIC_CONFIGS.items()},
        description="Configs set on the topic (Kafka's names and string values); "
        "a config not listed has its default.",
    ),
    "TopicConfigsUpdate": _object(
        {
            name: {**_config_value(name), "description": f"default {default}"}
            for name, (default, _) in TOPIC_CONFIGS.items()
        },
        description="Config values as strings (numbers and booleans are accepted); null resets "
        "a config to its default. Unknown names and bad values: INVALID_CONFIG, as is a "
        "max.compaction.lag.ms below min.compaction.lag.ms (the topic's configs as they would "
        "become, Kafka's check).",
        additionalProperties=False,
    ),
    "PartitionInfo": _object(
        {
            "partition": _PARTITION_INDEX,
            "leader": _BROKER_ID,
            "leader_epoch": _int(),
            "partition_epoch": _int(),
            "replicas": _array(_int(), "broker ids"),
            "isr": _array(_int(), "in-sync replicas, broker ids"),
            "adding_replicas": _array(_int(), "joining in a reassignment"),
            "removing_replicas": _array(_int(), "leaving in a reassignment"),
            "log_start_offset": _long(
                "from the partition's leader; only in GET /v1/topics/{topic}, null when the "
                "leader did not answer",
                nullable=True,
            ),
            "high_watermark": _long("as log_start_offset", nullable=True),
            "last_stable_offset": _long(
                "with isolation=read_committed only: where a read_committed read ends (the "
                "first offset of the oldest open transaction, else the high watermark)",
                nullable=True,
            ),
        },
        required=["partition", "leader", "leader_epoch", "replicas", "isr"],
    ),
    "Topic": _object(
        {
            "name": _ref("TopicName"),
            "topic_id": _str(),
            "configs": _ref("TopicConfigs"),
            "partitions": _array(_ref("PartitionInfo")),
        },
        required=["name", "topic_id", "configs", "partitions"],
    ),
    "BrokerState": _object(
        {
            "id": _int(),
            "url": _str(),
            "kafka": _str("its Kafka listener, host:port", nullable=True),
            "rack": _str(nullable=True),
            "state": {"enum": ["active", "fenced", "draining", "drained"]},
            "replicas": _int("replicas it holds"),
            "leaders": _int("partitions it leads"),
            "fenced": _bool(),
            "draining": _bool(),
            "in_controlled_shutdown": _bool(),
            "broker_epoch": _int(),
        },
        required=["id", "url", "rack", "state", "replicas", "leaders"],
    ),
    "Quorum": _object(
        {
            "leader_id": _int(nullable=True),
            "term": _int(),
            "commit_index": _int(),
            "metadata_offset": _int(),
            "voters": _array(
                _object(
                    {
                        "id": _int(),
                        "address": _str("its Raft address"),
                        "state": _str(),
                        "url": _str(nullable=True),
                        "lag": _int(
                            "committed Raft entries the voter lacks, as the leader knows "
                            "(null when the controller answering is not the leader)",
                            nullable=True,
                        ),
                    },
                    required=["id", "address", "state"],
                )
            ),
            "observers": _array(
                _object(
                    {
                        "id": _int("a broker's id"),
                        "metadata_offset": _int("the metadata offset its last heartbeat gave"),
                        "lag": _int("metadata batches it lacks"),
                    },
                    required=["id", "metadata_offset", "lag"],
                ),
                description="the brokers following the metadata: only in the active "
                "controller's answer",
            ),
        },
        required=["leader_id", "term", "commit_index", "metadata_offset", "voters"],
    ),
    "BrokerConfigsUpdate": _object(
        {
            name: {
                "anyOf": [
                    {"type": "integer", "minimum": minimum, "maximum": MAX_CONFIG_VALUE},
                    {"type": "string", "pattern": "^[1-9][0-9]{0,18}$"},
                    {"type": "null"},
                ]
            }
            for name, minimum in BROKER_CONFIGS.items()
        },
        description="Dynamic broker config values (integers, as numbers or decimal strings); "
        "null resets one to the broker's static config. Unknown names and bad values: "
        "INVALID_CONFIG.",
        minProperties=1,
        additionalProperties=False,
    ),
    "BrokerConfigs": _object(
        {"id": _int(), "configs": _map(_str(), "name -> value")}, required=["id", "configs"]
    ),
    "Brokers": _object({"brokers": _array(_ref("BrokerState"))}, required=["brokers"]),
    "Moves": _object(
        {
            "moves": _array(
                _object(
                    {
                        "topic": _str(),
                        "partition": _int(),
                        "from": _array(_int()),
                        "to": _array(_int()),
                    },
                    required=["topic", "partition", "from", "to"],
                )
            )
        },
        required=["moves"],
    ),
    "Elections": _object(
        {
            "elections": _array(
                _object(
                    {
                        "topic": _str(),
                        "partition": _int(),
                        "leader": _BROKER_ID,
                        "error_code": _str(),
                        "message": _str(),
                    },
                    required=["topic", "partition", "leader"],
                )
            )
        },
        required=["elections"],
    ),
    "Reassignment": _object(
        {
            "topic": _str(),
            "partition": _PARTITION_INDEX,
            "replicas": _array(_int(), "the target, then the replicas leaving"),
            "adding": _array(_int(), "target replicas still joining"),
            "removing": _array(_int(), "replicas that leave once every target is in sync"),
            "isr": _array(_int()),
            "leader": _BROKER_ID,
        },
        required=["topic", "partition", "replicas", "adding", "removing", "isr"],
    ),
    "Reassignments": _object(
        {
            "reassignments": _array(
                {
                    "anyOf": [
                        _ref("Reassignment"),
                        _object(
                            {
                                "topic": _str(),
                                "partition": _int(),
                                "error_code": _str(),
                                "message": _str(),
                            },
                            required=["topic", "partition", "error_code", "message"],
                        ),
                    ]
                }
            )
        },
        required=["reassignments"],
    ),
    "ValidatedTopic": _object(
        {
            "name": _str(),
            "topic_id": _str("empty: validate_only created nothing", const=""),
            "configs": _map(_str()),
            "partitions": _array(
                _object(
                    {
                        "partition": _PARTITION_INDEX,
                        "leader": _BROKER_ID,
                        "replicas": _array(_BROKER_ID),
                        "isr": _array(_BROKER_ID),
                    },
                    required=["partition", "leader", "replicas", "isr"],
                )
            ),
        },
        required=["name", "topic_id", "configs", "partitions"],
        description="The topic a create would make (validate_only): nothing was created.",
    ),
    "CreateTopicsAnswer": _object(
        {
            "topics": {
                "type": "array",
                "items": {
                    "anyOf": [
                        _ref("Topic"),
                        _ref("ValidatedTopic"),
                        _object(
                            {"name": _str(), "error_code": _str(), "message": _str()},
                            required=["name", "error_code", "message"],
                        ),
                    ]
                },
            }
        },
        required=["topics"],
        description="One entry per topic asked for, in order: the topic, or why it was not "
        "created (the others are created all the same).",
    ),
    "ProduceRecord": _object(
        {
            "key": _BYTES,
            "value": _BYTES,
            "headers": {
                "description": "values in the value encoding, null for a null value (kept "
                "null, not empty, as Kafka's); an object or [name, value] pairs",
                "anyOf": [
                    _map(_str(nullable=True)),
                    _array(
                        {
                            "type": "array",
                            "prefixItems": [_str(), _str(nullable=True)],
                            "items": False,
                            "minItems": 2,
                        }
                    ),
                ],
            },
            "partition": _int(
                "the partition; else murmur2 of the key (Kafka's default partitioner), "
                "else one partition per request",
                minimum=0,
                maximum=2**31 - 1,
            ),
            "timestamp": _long("unix milliseconds; default the broker's clock", minimum=0),
        },
    ),
    "ProduceRequest": _object(
        {
            "records": _array(_ref("ProduceRecord"), minItems=1),
            "key_encoding": _ENCODING,
            "value_encoding": _ENCODING,
        },
        required=["records"],
    ),
    "ProduceResult": {
        "oneOf": [
            _object(
                {
                    "partition": _PARTITION_INDEX,
                    "offset": _long("null with acks=0", nullable=True),
                },
                required=["partition", "offset"],
            ),
            _object(
                {"partition": _PARTITION_INDEX, "error_code": _str()},
                required=["partition", "error_code"],
                description="This record's partition failed (produce to a topic only); "
                "`errors` says why, once per partition.",
            ),
        ]
    },
    "ProduceResponse": _object(
        {
            "offsets": _array(_ref("ProduceResult"), "one entry per record, in order"),
            "errors": _array(
                _object(
                    {"partition": _PARTITION_INDEX, "error_code": _str(), "message": _str()},
                    required=["partition", "error_code", "message"],
                ),
                "each partition that failed, once (only when some did)",
            ),
        },
        required=["offsets"],
    ),
    "FetchedRecord": _object(
        _FETCHED_RECORD_FIELDS,
        required=["offset", "timestamp", "key", "value", "headers"],
    ),
    "KeyedRecord": _object(
        {"partition": _PARTITION_INDEX, **_FETCHED_RECORD_FIELDS},
        required=["partition", "offset", "timestamp", "key", "value", "headers"],
    ),
    "TablePage": _object(
        {
            "rows": _array(
                _ref("KeyedRecord"),
                "each live key's latest record, in key order (keys sort by their bytes; keys "
                "over 400 bytes after every shorter one, by their SHA-256)",
            ),
            "next": _str(
                "the cursor for the next page (pass it as after); null: the table has no more rows",
                nullable=True,
            ),
        },
        required=["rows", "next"],
    ),
    "FetchResponse": _object(
        {
            "records": _array(
                _ref("FetchedRecord"),
                "only records below the high watermark (read_committed: below the last "
                "stable offset, and none of an aborted transaction); never a transaction's "
                "markers",
            ),
            "next_offset": _long(
                "where the next fetch goes on: past every record returned, and past the "
                "markers and aborted records read with them",
                minimum=0,
            ),
            "high_watermark": _OFFSET,
            "log_start_offset": _OFFSET,
            "last_stable_offset": _long(
                "the first offset of the earliest transaction not yet decided (else the "
                "high watermark): read_committed readers read below it",
                minimum=0,
            ),
        },
        required=["records", "next_offset", "high_watermark", "log_start_offset"],
    ),
    "OffsetResponse": _object(
        {
            "offset": _OFFSET,
            "timestamp": _long(
                "with at=<unix ms>: the record's timestamp, null when no record is at or after "
                "the time yet (offset is then the high watermark)",
                nullable=True,
            ),
        },
        required=["offset"],
    ),
    "DeleteRecordsRequest": _object(
        {
            "offset": _long(
                "the new log start: records below it are deleted; -1: the high watermark. "
                "Above the high watermark: OFFSET_OUT_OF_RANGE",
                minimum=-1,
            )
        },
        required=["offset"],
    ),
    "DeletedRecords": _object(
        {
            "topic": _str(),
            "partition": _PARTITION_INDEX,
            "low_watermark": _long(
                "the smallest log start over the replicas that could lead", minimum=0
            ),
        },
        required=["topic", "partition", "low_watermark"],
    ),
    # Consumer groups.
    "TopicPartitions": _object(
        {"topic": _ref("TopicName"), "partitions": _array(_PARTITION_INDEX)},
        required=["topic", "partitions"],
    ),
    "JoinGroupRequest": _object(
        {
            "topics": _array(_ref("TopicName"), minItems=1, maxItems=1000),
            "client_id": {"anyOf": [_str(const=""), _str(pattern=names.pattern(255))]},
            "member_id": _str(
                "chosen by the client (a retried join is the same member)",
                pattern=names.pattern(64),
            ),
            "session_timeout_ms": {
                "anyOf": [
                    _int(
                        "within group.consumer.min/max.session.timeout.ms (defaults shown)",
                        minimum=1000,
                        maximum=30_000,
                    ),
                    {"type": "null"},
                ]
            },
        },
        required=["topics"],
    ),
    "HeartbeatRequest": _object(
        {"member_epoch": _int("the epoch of the last answer", **_INT64)},
        required=["member_epoch"],
    ),
    "MemberResponse": _object(
        {
            "member_id": _str(),
            "member_epoch": _int(),
            "heartbeat_interval_ms": _int(),
            "assignment": _array(_ref("TopicPartitions")),
        },
        required=["member_id", "member_epoch", "heartbeat_interval_ms", "assignment"],
    ),
    "CommitOffsetsRequest": _object(
        {
            "member_id": _str("absent only for a group with no members"),
            "member_epoch": _int("required with member_id", **_INT64),
            "producer_id": _long(
                "with X-Kraftlite-Transactional-Id only: the transactional producer whose "
                "transaction the offsets go with (Kafka's TxnOffsetCommit)",
                minimum=0,
            ),
            "producer_epoch": _int("with producer_id", minimum=0, maximum=32767),
            "offsets": _array(
                _object(
                    {
                        "topic": _ref("TopicName"),
                        "partition": _PARTITION_INDEX,
                        "offset": _long("any, as Kafka takes it: even past the end", minimum=0),
                        "metadata": _str("at most offset.metadata.max.bytes (4096) of UTF-8"),
                    },
                    required=["topic", "partition", "offset"],
                ),
                minItems=1,
                maxItems=10_000,
            ),
        },
        required=["offsets"],
    ),
    "DeleteOffsetsRequest": _object(
        {
            "partitions": _array(
                _object(
                    {"topic": _ref("TopicName"), "partition": _PARTITION_INDEX},
                    required=["topic", "partition"],
                ),
                minItems=1,
                maxItems=10_000,
            )
        },
        required=["partitions"],
    ),
    "DeletedOffsets": _object(
        {
            "group": _str(),
            "partitions": _array(
                _object(
                    {
                        "topic": _ref("TopicName"),
                        "partition": _PARTITION_INDEX,
                        "error_code": _str(
                            "absent when the offset is deleted (or there was none)",
                            enum=[
                                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION.name,
                                ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC.name,
                            ],
                        ),
                        "message": _str(),
                    },
                    required=["topic", "partition"],
                ),
                description="each partition asked, in order",
            ),
        },
        required=["group", "partitions"],
    ),
    "GroupOffsets": _object(
        {
            "offsets": _array(
                _object(
                    {
                        "topic": _ref("TopicName"),
                        "partition": _PARTITION_INDEX,
                        "offset": _OFFSET,
                        "high_watermark": _OFFSET,
                        "lag": _long(minimum=0),
                    },
                    required=["topic", "partition", "offset", "high_watermark", "lag"],
                )
            )
        },
        required=["offsets"],
    ),
    "GroupList": _object(
        {
            "groups": _array(
                _object({"group": _str(), "state": _str()}, required=["group", "state"])
            )
        },
        required=["groups"],
    ),
    "Group": _object(
        {
            "group": _str(),
            "state": _str(),
            "members": _array(
                _object(
                    {
                        "member_id": _str(),
                        "client_id": _str(nullable=True),
                        "member_epoch": _int(),
                        "assignment": _array(_ref("TopicPartitions")),
                    },
                    required=["member_id", "member_epoch", "assignment"],
                )
            ),
        },
        required=["group", "state", "members"],
    ),
    **BODY_SCHEMAS,
}

# ---------------------------------------------------------------------------- errors

# Codes whose problem+json carries details beyond the common fields.
_DETAILS: Final[dict[ErrorCode, tuple[Json, list[str]]]] = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: (
        {
            "leader_id": _int("the partition's leader; -1 for none"),
            "leader_url": _str("where to send the request instead", nullable=True),
        },
        [],
    ),
    ErrorCode.OFFSET_OUT_OF_RANGE: (
        {"log_start_offset": _OFFSET, "high_watermark": _OFFSET},
        ["log_start_offset", "high_watermark"],
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        {"isr": _array(_int()), "min_insync_replicas": _int()},
        ["isr", "min_insync_replicas"],
    ),
}
_EXAMPLE_DETAILS: Final[dict[ErrorCode, Json]] = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: {"leader_id": 2, "leader_url": "http://127.0.0.1:9093"},
    ErrorCode.OFFSET_OUT_OF_RANGE: {"log_start_offset": 0, "high_watermark": 42},
    ErrorCode.NOT_ENOUGH_REPLICAS: {"isr": [1], "min_insync_replicas": 2},
}


def _problem_schema(code: ErrorCode) -> Json:
    properties, required = _DETAILS.get(code, ({}, []))
    specific = _object(
        {"error_code": {"const": code.name}, "status": {"const": ERROR_INFO[code].http_status}}
        | properties,
        required,
    )
    return {"allOf": [_ref("Problem"), specific]}


def _problem_example(code: ErrorCode) -> Json:
    info = ERROR_INFO[code]
    value = {
        "error_code": code.name,
        "message": info.message,
        "status": info.http_status,
        "retriable": info.retriable,
    }
    return {"summary": info.message, "value": value | _EXAMPLE_DETAILS.get(code, {})}


def _error_responses(codes: Iterable[ErrorCode]) -> Json:
    """One application/problem+json response per HTTP status, listing its codes."""
    by_status: dict[int, list[ErrorCode]] = {}
    for code in dict.fromkeys(codes):
        by_status.setdefault(ERROR_INFO[code].http_status, []).append(code)
    responses: Json = {}
    for status, group in sorted(by_status.items()):
        schemas = [_problem_schema(code) for code in group]
        responses[str(status)] = {
            "description": "; ".join(f"{c.name}: {ERROR_INFO[c].message}" for c in group),
            "content": {
                PROBLEM_JSON: {
                    "schema": schemas[0] if len(schemas) == 1 else {"oneOf": schemas},
                    "examples": {c.name: _problem_example(c) for c in group},
                }
            },
        }
    return responses


_AUTHORIZATION_ERRORS = (
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
)

# Error codes shared by families of operations.
_BODY = (ErrorCode.INVALID_REQUEST, ErrorCode.RECORD_LIST_TOO_LARGE)
_UNKNOWN = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,)
_CONTROLLER = (ErrorCode.NOT_CONTROLLER, ErrorCode.REQUEST_TIMED_OUT)
_LEADER = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER)
_COORDINATOR = (
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_MEMBER_ID,
    ErrorCode.FENCED_MEMBER_EPOCH,
    ErrorCode.REQUEST_TIMED_OUT,
)


_TRANSACTION = (
    ErrorCode.INVALID_REQUEST,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.REQUEST_TIMED_OUT,
)
_PRODUCER = (
    ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    ErrorCode.PRODUCER_FENCED,
)

# ---------------------------------------------------------------------------- parameters


def _query(name: str, description: str, schema: Json, *, required: bool = False) -> Json:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "required": required,
        "schema": schema,
    }


def _path(name: str, description: str, schema: Json) -> Json:
    return {
        "name": name,
        "in": "path",
        "description": description,
        "required": True,
        "schema": schema,
    }


PARAMETERS: Final[Json] = {
    "topic": _path("topic", "topic name", _ref("TopicName")),
    "partition": _path("partition", "partition index", _PARTITION_INDEX),
    "group": _path("group", "consumer group id", _str(pattern=names.pattern(249))),
    "member_id": _path(
        "member_id", "member id from the join answer", _str(pattern=names.pattern(64))
    ),
    "acks": _query(
        "acks",
        "all (or -1): answer once every record is below the high watermark and the ISR has at "
        "least min.insync.replicas members (else NOT_ENOUGH_REPLICAS, nothing appended); "
        "1: once the leader has appended; 0: 202 at once, offsets null",
        _str(enum=["all", "-1", "1", "0"], default="all"),
    ),
    "timeout_ms": _query(
        "timeout_ms",
        "how long to wait for acks before REQUEST_TIMED_OUT",
        _int(minimum=0, maximum=300_000, default=30_000),
    ),
    "offset": _query("offset", "the first offset to return", _long(), required=True),
    "max_records": _query("max_records", "at most this many records", _int(minimum=1, default=500)),
    "max_bytes": _query(
        "max_bytes",
        "about this many bytes of batches (at least one batch is returned)",
        _int(minimum=1, default=1 << 20),
    ),
    "max_wait_ms": _query(
        "max_wait_ms",
        "with nothing to return, wait this long for new records (long-poll, at most 30000)",
        _int(minimum=0, default=0),
    ),
    "encoding": _query(
        "encoding", "how keys, values and header values are written in JSON", _ENCODING
    ),
    "isolation": _query(
        "isolation",
        "read_committed: only records of committed transactions (and records outside any), "
        "below the last stable offset; read_uncommitted: everything below the high watermark "
        "(Kafka's isolation.level)",
        _str(enum=["read_uncommitted", "read_committed"], default="read_uncommitted"),
    ),
    "key": _path(
        "key",
        "a record key: UTF-8 text, or with key_encoding=base64 any bytes in base64url "
        "(RFC 4648 section 5; a path segment holds no '/')",
        _str(),
    ),
    "key_encoding": _query("key_encoding", "how the key in the path is written", _ENCODING),
    "after": _query(
        "after",
        "the cursor a table page answered as next: this page starts after it",
        _str(pattern="^[A-Za-z0-9_-]{1,540}$"),
    ),
    "limit": _query("limit", "at most this many rows", _int(minimum=1, maximum=1000, default=100)),
    "at": _query(
        "at",
        "earliest = the log start, latest = the high watermark, a unix time in milliseconds = "
        "the first offset whose timestamp is at or after it (Kafka's ListOffsets)",
        {
            "anyOf": [_str(enum=["earliest", "latest"]), _str(pattern="^[0-9]{1,19}$")],
            "default": "latest",
        },
    ),
    "transactional_id": _path(
        "transactional_id",
        "a transactional id (Kafka's transactional.id)",
        _str(pattern=names.pattern(1024)),
    ),
    "transactional_id_header": {
        "name": TRANSACTIONAL_ID,
        "in": "header",
        "description": "A transactional producer's call: its transactional id (WRITE on it "
        "too). On a produce, the body is one binary batch (or Kafka batch) that says it is "
        "transactional, "
        "with the producer id and epoch of POST /v1/transactions/{transactional_id}/producer "
        "and the partition's next sequence, the partition in the transaction (POST "
        ".../partitions); on an offset commit, the body names the producer (producer_id, "
        "producer_epoch) and the group is in the transaction (POST .../groups).",
        "required": False,
        "schema": _str(pattern=names.pattern(1024)),
    },
    "no_forward": {
        "name": "X-Kraftlite-No-Forward",
        "in": "header",
        "description": "Any value: answer 421 NOT_LEADER_OR_FOLLOWER with leader_id and "
        "leader_url instead of forwarding to the partition's leader (for clients that route "
        "by metadata).",
        "required": False,
        "schema": _str(examples=["1"]),
    },
}


def _params(*names: str) -> list[Json]:
    return [_ref(name, "parameters") for name in names]


_PARTITION_PARAMS = ("topic", "partition", "no_forward")


def _table_page(operation_id: str, summary: str, answer: str, where: str) -> Json:
    """A table route's GET (the topic's, or one partition's): same bounds, answer, errors."""
    return _operation(
        operation_id,
        "fetch",
        summary,
        {"200": _answer(answer, _ref("TablePage"))},
        description=f"{_TABLE_DOC} {where}",
        parameters=_params("after", "limit", "max_bytes", "encoding"),
        errors=[ErrorCode.INVALID_REQUEST, ErrorCode.OFFSET_NOT_AVAILABLE, *_LEADER],
    )


_TABLE_DOC = (
    "The latest record of each live key (never a value not yet committed, as a key's read), "
    "a page at a time: `rows` in key order, and `next` to pass as `after` for the next page "
    "(null at the end). A page holds at most `limit` rows and about `max_bytes` of keys and "
    "values (at least one row). INVALID_REQUEST: the topic is not compacted, or a bad "
    "cursor. OFFSET_NOT_AVAILABLE (retriable): an index is still catching up with its high "
    "watermark."
)
_BROKER_PARAM: Final[Json] = {
    "name": "broker_id",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
}
_BAD_ID = (ErrorCode.INVALID_REQUEST, ErrorCode.BROKER_ID_NOT_REGISTERED)

# ---------------------------------------------------------------------------- operations


def _answer(description: str, schema: Json | None = None, media_type: str = JSON) -> Json:
    response: Json = {"description": description}
    if schema is not None:
        response["content"] = {media_type: {"schema": schema}}
    return response


def _json_body(schema_name: str, description: str = "") -> Json:
    body: Json = {"required": True, "content": {JSON: {"schema": _ref(schema_name)}}}
    if description:
        body["description"] = description
    return body


def _operation(
    operation_id: str,
    tag: str,
    summary: str,
    answers: Json,
    *,
    description: str = "",
    parameters: Sequence[Json] = (),
    body: Json | None = None,
    errors: Iterable[ErrorCode] = (),
    planned: bool = False,
) -> Json:
    operation: Json = {"operationId": operation_id, "tags": [tag], "summary": summary}
    if description:
        operation["description"] = description
    if parameters:
        operation["parameters"] = list(parameters)
    if body is not None:
        operation["requestBody"] = body
    operation["responses"] = answers | _error_responses([*errors, ErrorCode.UNKNOWN_SERVER_ERROR])
    if planned:
        operation[STATUS_EXTENSION] = PLANNED
        operation["description"] = f"Planned: not served yet. {description}".strip()
    return operation


_PRODUCE_ANSWERS = {
    "200": _answer("the records' offsets (acks all or 1)", _ref("ProduceResponse")),
    "202": _answer("accepted (acks=0): offsets are null", _ref("ProduceResponse")),
}
_TOPIC_ANSWER = _answer("the topic", _ref("Topic"))

PATHS: Final[Json] = {
    "/healthz": {
        "get": _operation(
            "healthz",
            "operations",
            "The process is alive",
            {"200": _answer("alive", _ref("Health"))},
        )
    },
    "/readyz": {
        "get": _operation(
            "readyz",
            "operations",
            "Registered, unfenced and caught up on metadata",
            {
                "200": _answer("ready", _ref("Readiness")),
                "503": _answer("not ready", _ref("Readiness")),
            },
        )
    },
    "/metrics": {
        "get": _operation(
            "metrics",
            "operations",
            "Metrics in the Prometheus text format",
            {"200": _answer("metrics", _str(), METRICS_TYPE)},
        )
    },
    "/v1/openapi.json": {
        "get": _operation(
            "openapi",
            "operations",
            "This document",
            {"200": _answer("the OpenAPI 3.1 document", {"type": "object"})},
        )
    },
    "/v1/cluster": {
        "get": _operation(
            "cluster",
            "cluster",
            "The cluster: its id, the active controller, the brokers",
            {"200": _answer("the cluster", _ref("Cluster"))},
            errors=_CONTROLLER,
        )
    },
    "/v1/topics": {
        "get": _operation(
            "list_topics",
            "topics",
            "List topics",
            {"200": _answer("the topics", _ref("TopicList"))},
            description="Without a query, every topic the caller may DESCRIBE. With `limit`, "
            "`after` or `contains`, one page of them, paged and filtered on the server (the "
            "web console's topic list; docs/console.md).",
            parameters=[
                _query(
                    "limit",
                    "a page: at most this many topics (default 100)",
                    _int(minimum=1, maximum=500),
                ),
                _query(
                    "after",
                    "a page: the topics whose names sort after this (the previous page's `next`)",
                    _str(pattern=names.pattern(249)),
                ),
                _query(
                    "contains",
                    "a page: only topics whose name holds this text (any case)",
                    _str(pattern=names.pattern(249)),
                ),
            ],
        ),
        "post": _operation(
            "create_topic",
            "topics",
            "Create a topic",
            {
                "201": _answer(
                    "created: the topic as GET /v1/topics/{topic} returns it", _ref("Topic")
                ),
                "200": _answer(
                    "the batch form: each topic's outcome; or, validate_only, the topic it "
                    "would be",
                    {"oneOf": [_ref("CreateTopicsAnswer"), _ref("ValidatedTopic")]},
                ),
            },
            description="Forwarded to the active controller. Replicas are placed on live "
            'brokers, rack-aware. The batch form (`{"topics": [...]}`) creates many '
            "topics in one decision and one metadata batch and answers 200 with an outcome "
            "per topic; without CREATE on the cluster it needs CREATE on every topic named.",
            body={
                "required": True,
                "content": {
                    JSON: {
                        "schema": {
                            "oneOf": [_ref("CreateTopicRequest"), _ref("CreateTopicsRequest")]
                        }
                    }
                },
            },
            errors=[
                *_BODY,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                ErrorCode.INVALID_PARTITIONS,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                ErrorCode.INVALID_CONFIG,
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                ErrorCode.TOPIC_ALREADY_EXISTS,
                *_CONTROLLER,
            ],
        ),
    },
    "/v1/topics/{topic}": {
        "parameters": _params("topic"),
        "get": _operation(
            "describe_topic",
            "topics",
            "Describe a topic: configs, partitions, their leaders, ISRs and offsets",
            {"200": _TOPIC_ANSWER},
            parameters=_params("isolation"),
            errors=[*_UNKNOWN, ErrorCode.INVALID_REQUEST],
        ),
        "delete": _operation(
            "delete_topic",
            "topics",
            "Delete a topic",
            {"204": _answer("deleted")},
            description="Forwarded to the active controller.",
            errors=[*_UNKNOWN, *_CONTROLLER],
        ),
        "patch": _operation(
            "alter_topic",
            "topics",
            "Change a topic's replication factor",
            {"202": _answer("the reassignments started", _ref("Moves"))},
            description="Needs ALTER on the cluster (it moves replicas between brokers). "
            "Each partition is reassigned: new replicas on the least loaded live brokers, "
            "rack-aware; replicas out of sync leave first.",
            body=_json_body("AlterTopicRequest"),
            errors=[*_BODY, *_UNKNOWN, ErrorCode.INVALID_REPLICATION_FACTOR, *_CONTROLLER],
        ),
    },
    "/v1/topics/{topic}/partitions": {
        "parameters": _params("topic"),
        "get": _operation(
            "list_partitions",
            "topics",
            "A page of a topic's partitions, with log offsets",
            {"200": _answer("the topic and a page of its partitions", _ref("PartitionPage"))},
            description="Needs DESCRIBE on the topic. Paged and filtered on the server (the web "
            "console's topic page; docs/console.md). A broker asks each listed partition's "
            "leader for its log start and high watermark (null when it did not answer); a "
            "controller answers from its metadata, without them.",
            parameters=[
                _query(
                    "limit",
                    "at most this many partitions (default 100)",
                    _int(minimum=1, maximum=1000),
                ),
                _query(
                    "after",
                    "the partitions after this index (the previous page's `next`)",
                    _int(minimum=0, maximum=2**31 - 1),
                ),
                _query(
                    "under_replicated",
                    "only the partitions whose ISR is smaller than their replicas",
                    _str(enum=["true", "false"], default="false"),
                ),
            ],
            errors=_UNKNOWN,
        ),
        "post": _operation(
            "create_partitions",
            "topics",
            "Grow a topic to `count` partitions (never shrinks)",
            {"200": _TOPIC_ANSWER},
            description="Forwarded to the active controller. Keys may map to other partitions "
            "afterwards, as in Kafka.",
            body=_json_body("CreatePartitionsBody"),
            errors=[
                *_BODY,
                *_UNKNOWN,
                ErrorCode.INVALID_PARTITIONS,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                *_CONTROLLER,
            ],
        ),
    },
    "/v1/topics/{topic}/configs": {
        "parameters": _params("topic"),
        "put": _operation(
            "alter_configs",
            "topics",
            "Set or reset topic configs",
            {"200": _TOPIC_ANSWER},
            description="Forwarded to the active controller.",
            body=_json_body("AlterConfigsBody"),
            errors=[*_BODY, *_UNKNOWN, ErrorCode.INVALID_CONFIG, *_CONTROLLER],
        ),
    },
    "/v1/topics/{topic}/records": {
        "parameters": _params("topic"),
        "post": _operation(
            "produce_to_topic",
            "produce",
            "Produce records to a topic",
            _PRODUCE_ANSWERS,
            description="Any broker. Each record goes to its `partition` if given, else to "
            "murmur2(key) modulo the partition count (bit-for-bit Kafka's default partitioner), "
            "else to one partition per request. Each partition's records are produced on its "
            "leader (forwarded, one hop). A partition that fails is named once in `errors` "
            "(`partition`, `error_code`, `message`) and its records' entries carry its "
            "`error_code`; when every partition failed, the answer is that error with its "
            "own status. JSON bodies over json.request.max.bytes are refused before parsing.",
            parameters=_params("acks", "timeout_ms"),
            body=_json_body("ProduceRequest"),
            errors=[
                *_BODY,
                *_UNKNOWN,
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                # when every partition failed: that error (a record's timestamp, its size)
                ErrorCode.INVALID_TIMESTAMP,
                ErrorCode.MESSAGE_TOO_LARGE,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.REQUEST_TIMED_OUT,
            ],
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/records": {
        "parameters": _params(*_PARTITION_PARAMS),
        "post": _operation(
            "produce_to_partition",
            "produce",
            "Produce records to one partition",
            {
                code: {
                    **answer,
                    "headers": {
                        "X-Kraftlite-Produced-Bytes": {
                            "description": f"{KAFKA_BATCHES_TYPE} bodies only (errors "
                            "too): what the batch's records decompressed to, as the quota "
                            "charges it",
                            "schema": {"type": "integer", "minimum": 0},
                        }
                    },
                }
                for code, answer in _PRODUCE_ANSWERS.items()
            },
            description="Forwarded to the partition's leader unless X-Kraftlite-No-Forward "
            "is sent. A JSON body's records must not name another partition.",
            parameters=_params("acks", "timeout_ms", "transactional_id_header"),
            body={
                "required": True,
                "description": f"JSON records, or exactly one binary batch ({BATCH_TYPE}, "
                f"format in docs/batch-format.md), or exactly one Kafka record batch "
                f"({KAFKA_BATCHES_TYPE}: magic 2, compressed or not, as a Kafka producer "
                "sends a partition's; kept as sent where it can be, docs/batch-format.md \""
                'Format 3"). Its records may decompress to 64 MiB at most (else '
                "CORRUPT_MESSAGE); more than one batch is INVALID_RECORD.",
                "content": {
                    JSON: {"schema": _ref("ProduceRequest")},
                    BATCH_TYPE: {},
                    KAFKA_BATCHES_TYPE: {},
                },
            },
            errors=[
                *_BODY,
                ErrorCode.CORRUPT_MESSAGE,
                *_LEADER,
                ErrorCode.INVALID_TIMESTAMP,
                ErrorCode.MESSAGE_TOO_LARGE,
                ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.REQUEST_TIMED_OUT,
                # an idempotent or transactional producer's batch
                ErrorCode.INVALID_RECORD,
                ErrorCode.UNKNOWN_PRODUCER_ID,
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                ErrorCode.INVALID_PRODUCER_EPOCH,
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                *_PRODUCER,
                ErrorCode.INVALID_TXN_STATE,
                ErrorCode.TRANSACTION_ABORTABLE,
                ErrorCode.CONCURRENT_TRANSACTIONS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
            ],
        ),
        "get": _operation(
            "fetch",
            "fetch",
            "Fetch records from one partition",
            {
                "200": {
                    "description": "Records below the high watermark from `offset` on (none "
                    f"after max_wait_ms). With Accept: {BATCH_TYPE}, the stored batches back "
                    "to back (the first may start before `offset`), a Kafka batch kept as "
                    "sent converted to format 1 or 2; with Accept: "
                    f"{BATCH_TYPE}; format=3, every stored batch as it is, format 3 (a Kafka "
                    'batch, compressed, docs/batch-format.md "Format 3") included.',
                    "headers": {
                        "X-Kraftlite-High-Watermark": {
                            "description": "binary answers only",
                            "schema": _OFFSET,
                        },
                        "X-Kraftlite-Log-Start-Offset": {
                            "description": "binary answers only",
                            "schema": _OFFSET,
                        },
                        "X-Kraftlite-Last-Stable-Offset": {
                            "description": "binary answers only: read_committed readers read "
                            "below it",
                            "schema": _OFFSET,
                        },
                        "X-Kraftlite-Next-Offset": {
                            "description": "binary answers only: where the next fetch goes "
                            "on (past the markers and aborted batches left out)",
                            "schema": _OFFSET,
                        },
                    },
                    "content": {JSON: {"schema": _ref("FetchResponse")}, BATCH_TYPE: {}},
                }
            },
            description="Forwarded to the partition's leader unless X-Kraftlite-No-Forward "
            "is sent. An offset below the log start or above the high watermark: "
            "OFFSET_OUT_OF_RANGE.",
            parameters=_params(
                "offset", "max_records", "max_bytes", "max_wait_ms", "encoding", "isolation"
            ),
            errors=[ErrorCode.INVALID_REQUEST, *_LEADER, ErrorCode.OFFSET_OUT_OF_RANGE],
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/offsets": {
        "parameters": _params(*_PARTITION_PARAMS),
        "get": _operation(
            "list_offsets",
            "fetch",
            "Look up an offset by position or time",
            {"200": _answer("the offset", _ref("OffsetResponse"))},
            description="With isolation=read_committed, latest is the last stable offset "
            "and a time is looked up below it (Kafka's ListOffsets for read_committed).",
            parameters=_params("at", "isolation"),
            errors=[ErrorCode.INVALID_REQUEST, *_LEADER],
        ),
    },
    "/v1/topics/{topic}/keys/{key}": {
        "parameters": _params("topic", "key"),
        "get": _operation(
            "latest_of_key",
            "fetch",
            "Read a compacted topic as a table: a key's latest value",
            {"200": _answer("the key's latest record", _ref("KeyedRecord"))},
            description="From the leader of the partition the key's records go to (Kafka's "
            "default partitioner; relayed there), through its key index, once the index has "
            "caught up with the high watermark: never a value not yet committed. 404 "
            "RESOURCE_NOT_FOUND: the key has no value (never written, or its latest record "
            "is a tombstone). INVALID_REQUEST: the topic is not compacted. "
            "OFFSET_NOT_AVAILABLE (retriable): the index of a new leader, or of a topic just "
            "made compacted, is still catching up.",
            parameters=[
                *_params("key_encoding", "encoding"),
                _query(
                    "partition",
                    "the partition to read (default: the one Kafka's default partitioner, "
                    "the Java client's murmur2, sends the key to; librdkafka's default is "
                    "crc32: its producers set partitioner=murmur2_random to match)",
                    _PARTITION_INDEX,
                ),
            ],
            errors=[
                ErrorCode.INVALID_REQUEST,
                ErrorCode.RESOURCE_NOT_FOUND,
                ErrorCode.OFFSET_NOT_AVAILABLE,
                *_LEADER,
            ],
        ),
    },
    "/v1/topics/{topic}/table": {
        "parameters": _params("topic"),
        "get": _table_page(
            "topic_table",
            "Read a compacted topic as a table: its live keys, a page at a time",
            "a page of the table",
            "Each partition's page is read from its leader's key index (relayed there); a "
            "key written to several partitions is a row of each. Topics of more than 256 "
            "partitions are read by partition (INVALID_REQUEST).",
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/table": {
        "parameters": _params(*_PARTITION_PARAMS),
        "get": _table_page(
            "partition_table",
            "Read one partition of a compacted topic as a table, a page at a time",
            "a page of the partition's table",
            "From the partition's leader (relayed there).",
        ),
    },
    "/v1/topics/{topic}/partitions/{partition}/delete-records": {
        "parameters": _params(*_PARTITION_PARAMS),
        "post": _operation(
            "delete_records",
            "topics",
            "Delete the records below an offset (Kafka's DeleteRecords)",
            {"200": _answer("every replica that could lead deleted them", _ref("DeletedRecords"))},
            description="Moves the partition's log start to `offset` (-1: the high watermark) "
            "on the leader at once, and answers once every replica that could lead (the ISR "
            "and the live replicas) has moved its own there; after that no replica serves a "
            "record below it. Forwarded to the partition's leader unless "
            "X-Kraftlite-No-Forward is sent. REQUEST_TIMED_OUT: the leader's log start has "
            "moved, and its followers follow it as they fetch.",
            parameters=_params("timeout_ms"),
            body=_json_body("DeleteRecordsRequest"),
            errors=[
                *_BODY,
                *_LEADER,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                ErrorCode.REQUEST_TIMED_OUT,
            ],
        ),
    },
    # Consumer groups: any broker, forwarded to the group's coordinator.
    "/v1/groups": {
        "get": _operation(
            "list_groups",
            "groups",
            "List consumer groups",
            {"200": _answer("the groups", _ref("GroupList"))},
            errors=_COORDINATOR,
        )
    },
    "/v1/groups/{group}": {
        "parameters": _params("group"),
        "get": _operation(
            "describe_group",
            "groups",
            "Describe a group: its state, members and their assignments",
            {"200": _answer("the group", _ref("Group"))},
            errors=[ErrorCode.GROUP_ID_NOT_FOUND, *_COORDINATOR],
        ),
    },
    "/v1/groups/{group}/members": {
        "parameters": _params("group"),
        "post": _operation(
            "join_group",
            "groups",
            "Join a group",
            {"200": _answer("the new member and its assignment", _ref("MemberResponse"))},
            description="Forwarded to the group's coordinator.",
            body=_json_body("JoinGroupRequest"),
            errors=[
                *_BODY,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                *_COORDINATOR,
            ],
        ),
    },
    "/v1/groups/{group}/members/{member_id}/heartbeat": {
        "parameters": _params("group", "member_id"),
        "post": _operation(
            "heartbeat",
            "groups",
            "Heartbeat; the answer may change the assignment",
            {"200": _answer("the member and its assignment", _ref("MemberResponse"))},
            description="A heartbeat with the epoch of the last answer confirms that the member "
            "holds exactly that assignment and has released everything else. A member silent "
            "past its session timeout is removed and its partitions reassigned.",
            body=_json_body("HeartbeatRequest"),
            errors=[*_BODY, *_COORDINATOR],
        ),
    },
    "/v1/groups/{group}/members/{member_id}": {
        "parameters": _params("group", "member_id"),
        "delete": _operation(
            "leave_group",
            "groups",
            "Leave a group; its partitions are reassigned",
            {"204": _answer("left")},
            errors=_COORDINATOR,
        ),
    },
    "/v1/groups/{group}/offsets": {
        "parameters": _params("group"),
        "post": _operation(
            "commit_offsets",
            "groups",
            "Commit offsets",
            {"204": _answer("committed")},
            description="KIP-848's rules: an unknown member (or no member_id while the group "
            "has members) is UNKNOWN_MEMBER_ID; a newer epoch than the member's, or a partition "
            "it does not own, FENCED_MEMBER_EPOCH; an epoch older than the one the partition "
            "was assigned at, STALE_MEMBER_EPOCH. Offsets are 0 to 2^63-1, as Kafka takes them "
            "(past the log's end, the consumer resets at its fetch); all or nothing. With "
            "X-Kraftlite-Transactional-Id (WRITE on it too) and producer_id/producer_epoch: "
            "Kafka's TxnOffsetCommit, pending until the transaction ends (the group's "
            "offsets partition added first: POST /v1/transactions/{id}/groups); a "
            "read_committed consumer's OffsetFetch waits for it (UNSTABLE_OFFSET_COMMIT).",
            parameters=_params("transactional_id_header"),
            body=_json_body("CommitOffsetsRequest"),
            errors=[
                *_BODY,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                *_UNKNOWN,
                ErrorCode.OFFSET_METADATA_TOO_LARGE,
                ErrorCode.OFFSET_OUT_OF_RANGE,
                ErrorCode.STALE_MEMBER_EPOCH,
                *_COORDINATOR,
                # in a transaction (TxnOffsetCommit)
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                *_PRODUCER,
                ErrorCode.INVALID_PRODUCER_EPOCH,
                ErrorCode.INVALID_TXN_STATE,
                ErrorCode.TRANSACTION_ABORTABLE,
                ErrorCode.CONCURRENT_TRANSACTIONS,
                ErrorCode.ILLEGAL_GENERATION,
            ],
        ),
        "get": _operation(
            "group_offsets",
            "groups",
            "The group's committed offsets and lag",
            {"200": _answer("the offsets", _ref("GroupOffsets"))},
            errors=_COORDINATOR,
        ),
        "delete": _operation(
            "delete_group_offsets",
            "groups",
            "Delete committed offsets (Kafka's OffsetDelete)",
            {"200": _answer("each partition's outcome", _ref("DeletedOffsets"))},
            description="Needs DELETE on the group and READ on every topic named. The "
            "group must exist (GROUP_ID_NOT_FOUND; a classic group of members that are not "
            "consumers: GROUP_NOT_EMPTY). Each partition is then deleted, or answered "
            "UNKNOWN_TOPIC_OR_PARTITION, or GROUP_SUBSCRIBED_TO_TOPIC while the group's "
            "members consume its topic. The deletion is a tombstone per offset in "
            "__consumer_offsets, acknowledged by its ISR: it survives a coordinator move. "
            "Forwarded to the group's coordinator.",
            body=_json_body("DeleteOffsetsRequest"),
            errors=[
                *_BODY,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                ErrorCode.GROUP_ID_NOT_FOUND,
                ErrorCode.GROUP_NOT_EMPTY,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
                ErrorCode.NOT_COORDINATOR,
                ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.REQUEST_TIMED_OUT,
            ],
        ),
    },
    "/v1/producer-ids": {
        "post": _operation(
            "new_producer_id",
            "produce",
            "An idempotent producer's id (Kafka's InitProducerId)",
            {"201": _answer("the id, epoch 0", _ref("ProducerId"))},
            description="Any broker. A binary batch (format v2, docs/batch-format.md) that "
            "carries the id, its epoch and the partition's next sequence number is written "
            "once however often it is sent; a gap answers OUT_OF_ORDER_SEQUENCE_NUMBER. "
            "Needs IdempotentWrite on the cluster or Write on some topic (as Kafka's "
            "InitProducerId); the id is random and bound to the caller: a batch that names "
            "it for another principal answers UNKNOWN_PRODUCER_ID.",
        )
    },
    "/v1/transactions/{transactional_id}": {
        "parameters": _params("transactional_id"),
        "get": _operation(
            "describe_transaction",
            "transactions",
            "A transactional id's state (Kafka's DescribeTransactions), and its last commit's tag",
            {"200": _answer("the transaction", _ref("Transaction"))},
            description="Needs DESCRIBE on the transactional id. Forwarded to the id's "
            "coordinator (docs/transactions.md).",
            errors=[*_TRANSACTION, ErrorCode.TRANSACTIONAL_ID_NOT_FOUND],
        ),
    },
    "/v1/transactions/{transactional_id}/producer": {
        "parameters": _params("transactional_id"),
        "post": _operation(
            "init_transactional_producer",
            "transactions",
            "A transactional producer's id and epoch (Kafka's InitProducerId)",
            {"200": _answer("the producer", _ref("ProducerId"))},
            description="Fences every earlier producer of the id: a transaction it left "
            "open is aborted (CONCURRENT_TRANSACTIONS until that is done: ask again). Needs "
            "WRITE on the transactional id.",
            body={
                "required": False,
                "description": "absent: the defaults",
                "content": {JSON: {"schema": _ref("TransactionalProducerRequest")}},
            },
            errors=[*_TRANSACTION, *_PRODUCER, ErrorCode.INVALID_TRANSACTION_TIMEOUT],
        ),
    },
    "/v1/transactions/{transactional_id}/partitions": {
        "parameters": _params("transactional_id"),
        "post": _operation(
            "add_partitions_to_transaction",
            "transactions",
            "Add partitions to the producer's transaction (Kafka's AddPartitionsToTxn)",
            {"204": _answer("added (the transaction begins with its first partitions)")},
            description="Needs WRITE on the transactional id and on every topic; internal "
            "topics are refused. All or nothing: a partition that does not exist adds none.",
            body=_json_body("TransactionPartitionsRequest"),
            errors=[
                *_TRANSACTION,
                *_PRODUCER,
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                ErrorCode.RECORD_LIST_TOO_LARGE,
            ],
        ),
    },
    "/v1/transactions/{transactional_id}/groups": {
        "parameters": _params("transactional_id"),
        "post": _operation(
            "add_offsets_to_transaction",
            "transactions",
            "Let the transaction commit a group's offsets (Kafka's AddOffsetsToTxn)",
            {"204": _answer("added")},
            description="Then POST /v1/groups/{group}/offsets with the transactional id "
            "header and the producer's id and epoch: the offsets are the group's when the "
            "transaction commits, never if it aborts. Needs WRITE on the transactional id "
            "and READ on the group.",
            body=_json_body("TransactionGroupRequest"),
            errors=[*_TRANSACTION, *_PRODUCER, ErrorCode.GROUP_AUTHORIZATION_FAILED],
        ),
    },
    "/v1/transactions/{transactional_id}/end": {
        "parameters": _params("transactional_id"),
        "post": _operation(
            "end_transaction",
            "transactions",
            "Commit or abort the producer's transaction (Kafka's EndTxn)",
            {"204": _answer("decided: every partition gets its marker")},
            description="Answered once the outcome is written; a retry of a decided one "
            "is answered the same. Needs WRITE on the transactional id.",
            body=_json_body("EndTransactionRequest"),
            errors=[*_TRANSACTION, *_PRODUCER, ErrorCode.INVALID_TXN_STATE],
        ),
    },
    "/v1/tokens": {
        "post": _operation(
            "issue_token",
            "security",
            "A bearer token for the authenticated user",
            {"201": _answer("the token", _ref("Token"))},
            description="Any node. Authenticate with Basic (a SCRAM user); the token works "
            "on every node until it expires or the user's password changes or the user is "
            "deleted.",
        )
    },
    "/v1/users": {
        "get": _operation(
            "list_users",
            "security",
            "Users and their SCRAM mechanisms (never passwords)",
            {"200": _answer("the users", _ref("Users"))},
        ),
        "post": _operation(
            "create_user",
            "security",
            "Create a user or change its password",
            {"201": _answer("the user", _ref("User"))},
            description="Forwarded to the active controller, which keeps a salted SCRAM "
            "credential (RFC 5802) as a metadata record. Send it over TLS. Instead of a "
            "password, a credential computed elsewhere (salt, stored_key and server_key, as "
            "Kafka's kafka-configs takes them): the password then never reaches the cluster.",
            body=_json_body("UserRequest"),
            errors=[*_BODY, *_CONTROLLER],
        ),
    },
    "/v1/users/{name}": {
        "parameters": [
            _path("name", "user name", _str(pattern=names.pattern(255, USER_NAME_EXCLUDED)))
        ],
        "delete": _operation(
            "delete_user",
            "security",
            "Delete a user, or one of its credentials; its tokens stop working",
            {"204": _answer("deleted")},
            parameters=[
                _query(
                    "mechanism",
                    "only the user's credential for this mechanism (the user goes with its "
                    "last one); RESOURCE_NOT_FOUND when it has none",
                    {"enum": BODY_SCHEMAS["UserRequest"]["properties"]["mechanism"]["enum"]},
                )
            ],
            errors=[ErrorCode.RESOURCE_NOT_FOUND, ErrorCode.INVALID_REQUEST, *_CONTROLLER],
        ),
    },
    "/v1/acls": {
        "get": _operation(
            "list_acls",
            "security",
            "ACLs matching the query's fields",
            {"200": _answer("the ACLs", _ref("Acls"))},
            parameters=[
                _query(name, "only ACLs with this value", schema)
                for name, schema in BODY_SCHEMAS["AclFilter"]["properties"].items()
            ],
        ),
        "post": _operation(
            "create_acl",
            "security",
            "Add an ACL (Kafka's StandardAuthorizer semantics: deny wins, no match = deny)",
            {"201": _answer("the ACL as stored (an equal one is not added twice)", _ref("Acl"))},
            body=_json_body("AclRequest"),
            errors=[*_BODY, ErrorCode.POLICY_VIOLATION, *_CONTROLLER],
        ),
        "delete": _operation(
            "delete_acls",
            "security",
            "Delete every ACL matching a filter",
            {"200": _answer("what was deleted", _ref("AclsDeleted"))},
            body=_json_body("AclFilter"),
            errors=[*_BODY, *_CONTROLLER],
        ),
    },
    "/v1/cluster/stats": {
        "get": _operation(
            "cluster_stats",
            "cluster",
            "The brokers' figures: leaders, replicas, disk, rates; topic sizes and rates",
            {"200": _answer("the figures", _ref("ClusterStats"))},
            description="Needs DESCRIBE on the cluster. A broker asks every live broker "
            "(each for itself, within 2 s) and sums; a controller answers only the "
            "partition counts of its metadata. Topic figures only for the topics named "
            "that the caller may DESCRIBE (docs/console.md).",
            parameters=[
                _query(
                    "topics",
                    "topic names separated by commas (at most 100)",
                    _str(pattern=r"^[a-zA-Z0-9._-]{1,249}(,[a-zA-Z0-9._-]{1,249}){0,99}$"),
                ),
            ],
        )
    },
    "/v1/quorum": {
        "get": _operation(
            "quorum",
            "cluster",
            "The controller quorum: leader, term, commit index and voters",
            {"200": _answer("the quorum", _ref("Quorum"))},
            description="Needs DESCRIBE on the cluster; a broker passes it to a controller. "
            "The answer is that controller's view; with leader=true, the active "
            "controller's (forwarded there), which alone knows the voters' lags and the "
            "brokers' metadata offsets.",
            parameters=[
                _query(
                    "leader",
                    "the active controller's view",
                    {"enum": ["true", "false"], "default": "false"},
                )
            ],
            errors=[ErrorCode.INVALID_REQUEST, *_CONTROLLER],
        )
    },
    "/v1/quorum/voters": {
        "post": _operation(
            "add_voter",
            "cluster",
            "Add a controller to the quorum (start it with --join)",
            {"200": _answer("the quorum with the new voter", _ref("Quorum"))},
            description="Needs ALTER on the cluster. One voter at a time (Raft's "
            "single-server changes, as KIP-853): refused unless the new voter answers at "
            "its url as that node on that Raft address, and while the voters that are live "
            "now would not be a majority of the larger quorum.",
            body=_json_body("AddVoterRequest"),
            errors=[
                *_BODY,
                ErrorCode.DUPLICATE_VOTER,
                ErrorCode.VOTER_NOT_FOUND,
                ErrorCode.QUORUM_AT_RISK,
                ErrorCode.POLICY_VIOLATION,
                *_CONTROLLER,
            ],
        )
    },
    "/v1/quorum/voters/{node_id}": {
        "delete": _operation(
            "remove_voter",
            "cluster",
            "Remove a controller from the quorum",
            {"204": _answer("removed")},
            description="Needs ALTER on the cluster. Refused if the voters left would have no "
            "live majority. Removing the active controller hands leadership over first "
            "(NOT_CONTROLLER: ask again).",
            parameters=[
                {
                    "name": "node_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
                }
            ],
            errors=[
                ErrorCode.INVALID_REQUEST,
                ErrorCode.VOTER_NOT_FOUND,
                ErrorCode.QUORUM_AT_RISK,
                ErrorCode.POLICY_VIOLATION,
                *_CONTROLLER,
            ],
        )
    },
    "/v1/brokers": {
        "get": _operation(
            "list_brokers",
            "cluster",
            "Registered brokers: state, replicas and leaders held",
            {"200": _answer("the brokers", _ref("Brokers"))},
            errors=_CONTROLLER,
        )
    },
    "/v1/brokers/{broker_id}": {
        "get": _operation(
            "describe_broker",
            "cluster",
            "One broker",
            {"200": _answer("the broker", _ref("BrokerState"))},
            parameters=[_BROKER_PARAM],
            errors=[*_BAD_ID, *_CONTROLLER],
        ),
        "delete": _operation(
            "remove_broker",
            "cluster",
            "Remove (unregister) a broker that holds no replicas",
            {"204": _answer("removed")},
            description="Needs ALTER on the cluster. A broker still holding replicas is "
            "refused (BROKER_IN_USE: drain it first), unless it is dead (fenced) and "
            "force=true: then each of its replicas is replaced at once by a new one on a "
            "live broker, which catches up from the partition's leader.",
            parameters=[
                _BROKER_PARAM,
                {
                    "name": "force",
                    "in": "query",
                    "required": False,
                    "schema": {"enum": ["true", "false"], "default": "false"},
                },
            ],
            errors=[
                ErrorCode.INVALID_REQUEST,
                *_BAD_ID,
                ErrorCode.BROKER_IN_USE,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                *_CONTROLLER,
            ],
        ),
    },
    "/v1/brokers/{broker_id}/configs": {
        "get": _operation(
            "describe_broker_configs",
            "cluster",
            "A broker's dynamic configs",
            {"200": _answer("its dynamic configs", _ref("BrokerConfigs"))},
            description="Needs the describe-configs operation on the cluster.",
            parameters=[_BROKER_PARAM],
            errors=[*_BAD_ID, *_CONTROLLER],
        ),
        "put": _operation(
            "alter_broker_configs",
            "cluster",
            "Set (or with null reset) a broker's dynamic configs",
            {"200": _answer("its dynamic configs after", _ref("BrokerConfigs"))},
            description="Needs the alter-configs operation on the cluster. "
            "`replication.throttled.rate` "
            "(bytes/s, at least 1): what the broker, as leader, sends replicas catching up "
            "in a reassignment; unset: the broker's static config (unthrottled by default).",
            parameters=[_BROKER_PARAM],
            body=_json_body("AlterBrokerConfigsBody"),
            errors=[
                *_BODY,
                ErrorCode.INVALID_CONFIG,
                *_BAD_ID,
                *_CONTROLLER,
            ],
        ),
    },
    "/v1/brokers/{broker_id}/drain": {
        "delete": _operation(
            "stop_draining",
            "cluster",
            "Undo a drain: the broker is live again",
            {"204": _answer("no longer draining")},
            description="Needs ALTER on the cluster. Moves already started go on.",
            parameters=[_BROKER_PARAM],
            errors=[*_BAD_ID, *_CONTROLLER],
        ),
        "post": _operation(
            "drain_broker",
            "cluster",
            "Drain a broker: leaders first, then every replica moves off it",
            {"202": _answer("the moves started", _ref("Moves"))},
            description="Needs ALTER on the cluster. The broker leads nothing and receives "
            "nothing from here on (across restarts too); its replicas are reassigned to "
            "live brokers. Refused when they have nowhere to go.",
            parameters=[_BROKER_PARAM],
            errors=[
                *_BAD_ID,
                ErrorCode.INVALID_REPLICATION_FACTOR,
                *_CONTROLLER,
            ],
        ),
    },
    "/v1/node/restart": {
        "post": _operation(
            "restart_node",
            "cluster",
            "Restart this node in place",
            {"202": _answer("it stops after this answer", _ref("Restarting"))},
            description="Needs ALTER on the cluster. The node stops as on SIGTERM (a broker's "
            "controlled shutdown moves its leaderships and group coordinators to other "
            "in-sync replicas first), then the same process starts again on the same command "
            "line with the code installed now. Never forwarded: ask the node itself. "
            "`kraftlite cluster roll` restarts a cluster so, node by node.",
        )
    },
    "/v1/cluster/rebalance": {
        "post": _operation(
            "rebalance_cluster",
            "cluster",
            "Even out replicas and leaders across the live brokers",
            {
                "200": _answer("the plan (dry run)", _ref("Moves")),
                "202": _answer("the moves started", _ref("Moves")),
            },
            description="Needs ALTER on the cluster. Rack-aware, fewest replica moves; each "
            "move is a reassignment (GET /v1/reassignments follows them).",
            body={"required": False, "content": {JSON: {"schema": _ref("RebalanceRequest")}}},
            errors=[*_BODY, ErrorCode.INVALID_REPLICATION_FACTOR, *_CONTROLLER],
        )
    },
    "/v1/elections": {
        "post": _operation(
            "elect_leaders",
            "cluster",
            "Preferred or unclean leader election",
            {"200": _answer("each partition's leader, or why it did not move", _ref("Elections"))},
            description="Needs ALTER on the cluster. Preferred: leadership moves to each "
            "partition's first replica where it is live and in sync. Unclean (Kafka's "
            "UNCLEAN election): a partition without a leader gets one, from outside the ISR "
            "if no in-sync replica is live, whatever unclean.leader.election.enable says; "
            "records only the lost in-sync replicas held are lost.",
            body={"required": False, "content": {JSON: {"schema": _ref("ElectionsRequest")}}},
            errors=[*_BODY, *_UNKNOWN, *_CONTROLLER],
        )
    },
    "/v1/reassignments": {
        "get": _operation(
            "list_reassignments",
            "cluster",
            "Partitions being moved to other brokers",
            {"200": _answer("every ongoing reassignment; empty when none", _ref("Reassignments"))},
            description="Needs DESCRIBE on the cluster.",
            errors=_CONTROLLER,
        ),
        "post": _operation(
            "alter_reassignments",
            "cluster",
            "Move partitions to new replica lists, or cancel their moves",
            {"202": _answer("each partition's move as committed", _ref("Reassignments"))},
            description="Kafka's AlterPartitionReassignments (KIP-455), forwarded to the "
            "active controller; needs ALTER on the cluster. New replicas fetch from the "
            "leader and join the ISR once caught up; once every target replica is in the "
            "ISR the final list commits (leadership first moving off a leaving leader) and "
            "the removed replicas delete their logs. The whole request is refused if any "
            "item is wrong (an unknown partition, repeated, unregistered or non-live new "
            "brokers); cancelling a partition that is not moving is reported for it alone "
            "(NO_REASSIGNMENT_IN_PROGRESS).",
            body=_json_body("ReassignmentsRequest"),
            errors=[
                *_BODY,
                *_UNKNOWN,
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                *_CONTROLLER,
            ],
        ),
    },
    "/v1/quotas": {
        "get": _operation(
            "list_quotas",
            "security",
            "Quotas per principal",
            {"200": _answer("the quotas", _ref("Quotas"))},
        ),
        "post": _operation(
            "alter_quotas",
            "security",
            "Set (or with null remove) a principal's quotas",
            {"200": _answer("the principal's quotas", _ref("Quota"))},
            body=_json_body("QuotaRequest"),
            errors=[*_BODY, *_CONTROLLER],
        ),
    },
}


def _merge_errors(responses: Json, codes: list[ErrorCode]) -> Json:
    """`responses` with `codes` added, each status's codes in one oneOf (no code twice)."""
    known = {
        example
        for answer in responses.values()
        for example in answer.get("content", {}).get(PROBLEM_JSON, {}).get("examples", {})
    }
    wanted = [c for c in dict.fromkeys(codes) if c.name not in known]
    merged = dict(responses)
    for status, answer in _error_responses(wanted).items():
        if status not in merged or PROBLEM_JSON not in merged[status].get("content", {}):
            merged.setdefault(status, answer)
            continue
        old = merged[status]["content"][PROBLEM_JSON]
        new = answer["content"][PROBLEM_JSON]
        schemas = old["schema"].get("oneOf", [old["schema"]])
        schemas = schemas + new["schema"].get("oneOf", [new["schema"]])
        merged[status] = {
            "description": f"{merged[status]['description']}; {answer['description']}",
            "content": {
                PROBLEM_JSON: {
                    "schema": {"oneOf": schemas},
                    "examples": old["examples"] | new["examples"],
                }
            },
        }
    return merged


# Every operation but the public ones may answer 401 and 403.
_PUBLIC_PATHS = {"/healthz", "/readyz", "/v1/openapi.json"}
for _path_name, _item in PATHS.items():
    for _method, _op in _item.items():
        if _method == "parameters" or _path_name in _PUBLIC_PATHS:
            continue
        more = [ErrorCode.SASL_AUTHENTICATION_FAILED, *_AUTHORIZATION_ERRORS]
        more.append(ErrorCode.INVALID_REQUEST)  # a bad path or query parameter, any operation
        if "{topic}" in _path_name:
            more.append(ErrorCode.INVALID_TOPIC_EXCEPTION)
        if _path_name.endswith("/records") and _method == "post":
            more += [ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_ENOUGH_REPLICAS]
        _op["responses"] = _merge_errors(_op["responses"], more)
        _op["security"] = [{"basic": []}, {"bearer": []}, {"mtls": []}, {}]

# ---------------------------------------------------------------------------- the document

_DESCRIPTION = """\
A Kafka-style replicated commit log over plain HTTP.

- **Any broker serves any request.** A broker that does not lead a partition forwards a \
partition request to the leader (one hop); admin writes go to the active controller. A client \
that routes by metadata sends `X-Kraftlite-No-Forward: 1` and gets 421 NOT_LEADER_OR_FOLLOWER \
with `leader_id` and `leader_url` instead.
- Bodies are JSON unless a binary type is named; unknown fields are ignored.
- Errors are `application/problem+json`: `{"error_code", "message", "status", "retriable", \
...details}`, with Kafka's error names where one fits.
- Keys and values are bytes: UTF-8 text in JSON by default, base64 with \
`key_encoding`/`value_encoding` (produce) or `encoding=base64` (fetch). `null` is no key / a \
null value (a tombstone).
- Operations marked `x-kraftlite-status: planned` are in the contract but not served yet.
"""

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {
        "title": "kraftlite HTTP API",
        "version": __version__,
        "summary": "Produce, fetch and administer a kraftlite cluster (API v1).",
        "description": _DESCRIPTION,
        "license": {"name": "Apache-2.0", "identifier": "Apache-2.0"},
    },
    "tags": [
        {"name": "operations", "description": "Health, readiness, metrics (every node)"},
        {"name": "cluster", "description": "The cluster and its brokers"},
        {"name": "topics", "description": "Topic admin; writes go to the active controller"},
        {"name": "produce", "description": "Write records"},
        {"name": "fetch", "description": "Read records and look up offsets"},
        {"name": "groups", "description": "Consumer groups, forwarded to the coordinator"},
        {
            "name": "transactions",
            "description": "Kafka's transactional producer, forwarded to the id's coordinator",
        },
        {"name": "security", "description": "Users, tokens, ACLs and quotas"},
    ],
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "parameters": PARAMETERS,
        "securitySchemes": {
            "basic": {"type": "http", "scheme": "basic", "description": "a SCRAM user"},
            "bearer": {"type": "http", "scheme": "bearer", "description": "POST /v1/tokens"},
            "mtls": {"type": "mutualTLS", "description": "principal: the subject (RFC 4514)"},
        },
    },
}

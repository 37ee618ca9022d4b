"""The public API's other admin bodies: users, ACLs, quotas (which the Kafka edge sends too),
the elastic cluster's reassignments, elections, rebalance and replication factor, and quorum
voters.
They follow protocol/admin.py's rules 1 and 3: one type, decoded by the controllers in one
step (`admin.decode`), a body of the wrong shape refused as INVALID_REQUEST, and the OpenAPI
document's schema of each generated from it (`DOCUMENTED_BODIES`, api/openapi.py). Each
type is named as the document names its schema. One exception to "unknown fields are
ignored": an ACL filter refuses them (a misspelt field must not widen a delete). GET
/v1/acls's query is an AclFilter too.

Rules:
1. Where the controllers answer a value INVALID_REQUEST (a user name's characters, a
   password's length, an ACL's names and enums, a quota's bounds, a partition index), the
   type refuses it, with that code; where a decision answers a code of its own
   (INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT, INVALID_CONFIG, or an unknown
   topic), the field's schema states the rule (`extra_json_schema`) and the decision checks
   it, as admin.py's rule 1.
2. A rule about a body as a whole (an ACL names its resource unless it is the cluster's, and
   a prefix is not *; a filter names a field, a quota request a quota; a user request a
   password or a credential computed elsewhere, its keys of the mechanism's size) is the
   `Meta` of its entry in DOCUMENTED_BODIES; the document folds it into the body's schema,
   and the decisions check it (kraftlite.security.acls, controller/access.py; a user
   request's, its type's `__post_init__` too).
3. A pattern means the same to JSON Schema (ECMA-262) and to Python but for one case:
   Python's `$` also matches before a final newline. So a name's type lets "name\\n" pass,
   and the decisions' `names.is_name`, which every such name meets next, refuses it, with
   the same INVALID_REQUEST.
4. What this layer cannot import (SCRAM's mechanisms and iteration bounds, the ACL enums:
   kraftlite.security sits above it) is written here again; tests/unit/test_admin_messages.py
   holds the two equal.
5. An optional field that may not be null is UNSET when absent: a body never carries a
   value its client did not send (`msgspec.to_builtins` leaves UNSET fields out).
Pure: no I/O.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

from kraftlite.protocol import admin, names

MAX_USER_NAME: Final = 255
USER_NAME_EXCLUDED: Final = ":*/?#%\\ "  # principal syntax, wildcards, URL syntax, spaces
MAX_PASSWORD_CHARS: Final = 256  # 1024 bytes of UTF-8 at most (scram.MAX_PASSWORD_BYTES)
MAX_NODE_ID: Final = 2**31 - 1
MAX_PARTITION_INDEX: Final = 2**31 - 1
MAX_REPLICAS: Final = 64  # Kafka has no limit; a list longer than any cluster here is a mistake
# One Raft batch's worth (quorum_controller.MAX_BATCH_RECORDS): a request commits whole
MAX_REASSIGNMENTS_PER_REQUEST: Final = 5_000
_PORT: Final = (
    "([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)

PartitionIndex = Annotated[int, Meta(ge=0, le=MAX_PARTITION_INDEX, description="partition index")]
# Rule 4: kraftlite.security.scram and kraftlite.security.acls
Mechanism = Literal["SCRAM-SHA-256", "SCRAM-SHA-512"]
AclOperation = Literal[
    "ALL",
    "READ",
    "WRITE",
    "CREATE",
    "DELETE",
    "ALTER",
    "DESCRIBE",
    "CLUSTER_ACTION",
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
    "IDEMPOTENT_WRITE",
]
AclPermission = Literal["ALLOW", "DENY"]
ResourceType = Literal["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID"]
PatternType = Literal["LITERAL", "PREFIXED"]
MIN_ITERATIONS: Final = 4096
MAX_ITERATIONS: Final = 100_000
# A SCRAM credential computed elsewhere (UserRequest without a password): base64 (RFC 4648,
# padded), a salt of MIN_SALT_BYTES to MAX_SALT_BYTES (4 to 1024 characters exactly), keys
# of the mechanism's digest size (KEY_CHARS: 32 or 64 bytes). Any salt its maker chose, as
# Kafka takes any (librdkafka's own tests send 4 bytes); kraftlite's own are 16+ random bytes.
MIN_SALT_BYTES: Final = 1
MAX_SALT_BYTES: Final = 768
KEY_CHARS: Final = {"SCRAM-SHA-256": 44, "SCRAM-SHA-512": 88}
CREDENTIAL_FIELDS: Final = ("salt", "stored_key", "server_key")
_BASE64: Final = "^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_KEY: Final = "^([A-Za-z0-9+/]{43}=|[A-Za-z0-9+/]{86}==)$"

Principal = Annotated[
    str,
    Meta(
        pattern="^User:" + names.pattern(MAX_USER_NAME - len("User:"))[1:],
        description="User:<name>, or User:* for every principal",
    ),
]
AclName = Annotated[str, Meta(pattern=names.pattern(255))]  # rule 3


# ---------------------------------------------------------------------------- users


class UserRequest(msgspec.Struct, frozen=True):
    """A user to create, or whose credential to set: from a password, or computed elsewhere."""

    name: Annotated[
        str,
        Meta(
            pattern=names.pattern(MAX_USER_NAME, USER_NAME_EXCLUDED),
            description="1-255 characters: no controls, spaces or any of :*/?#%\\",
        ),
    ]
    password: (
        Annotated[
            str,
            Meta(
                min_length=1,
                max_length=MAX_PASSWORD_CHARS,
                description="kept only as a salted SCRAM credential (at most 1024 bytes of "
                "UTF-8); or, instead, salt, stored_key and server_key",
            ),
        ]
        | UnsetType
    ) = UNSET
    mechanism: Mechanism = "SCRAM-SHA-256"
    iterations: Annotated[int, Meta(ge=MIN_ITERATIONS, le=MAX_ITERATIONS)] = MIN_ITERATIONS
    # Rule 2's whole-body rule (a password, or all three of these) is the type's too
    salt: (
        Annotated[
            str,
            Meta(
                pattern=_BASE64,
                min_length=4,
                max_length=1024,
                description="instead of a password, with stored_key and server_key: a SCRAM "
                f"credential computed elsewhere (RFC 5802); base64, {MIN_SALT_BYTES}-"
                f"{MAX_SALT_BYTES} bytes",
            ),
        ]
        | UnsetType
    ) = UNSET
    stored_key: (
        Annotated[
            str,
            Meta(
                pattern=_KEY,
                description='base64 of H(HMAC(SaltedPassword, "Client Key")): the '
                "mechanism's digest size (32 bytes for SCRAM-SHA-256, 64 for SCRAM-SHA-512)",
            ),
        ]
        | UnsetType
    ) = UNSET
    server_key: (
        Annotated[
            str,
            Meta(
                pattern=_KEY,
                description='base64 of HMAC(SaltedPassword, "Server Key"): the '
                "mechanism's digest size",
            ),
        ]
        | UnsetType
    ) = UNSET

    def __post_init__(self) -> None:
        """Rule 2: a password, or a credential (all of salt, stored_key and server_key, its
        keys of the mechanism's size); never both."""
        keys = (self.stored_key, self.server_key)
        credential = [self.salt, *keys]
        if self.password is UNSET:
            if any(value is UNSET for value in credential):
                raise ValueError("a password, or salt, stored_key and server_key")
        elif any(value is not UNSET for value in credential):
            raise ValueError("a password or a credential (salt, stored_key, server_key), not both")
        size = KEY_CHARS[self.mechanism]
        if any(isinstance(key, str) and len(key) != size for key in keys):
            raise ValueError(f"{self.mechanism}'s keys are {size} characters of base64")


# ---------------------------------------------------------------------------- ACLs


class AclRequest(msgspec.Struct, frozen=True):
    """An ACL to add (Kafka's StandardAuthorizer semantics: deny wins, no match = deny)."""

    principal: Principal
    operation: AclOperation
    resource_type: ResourceType
    resource_name: (
        Annotated[
            AclName, Meta(description="a name, or * (LITERAL) for every one; ignored for CLUSTER")
        ]
        | UnsetType
    ) = UNSET
    host: Annotated[AclName, Meta(description="the client's address, or * for any")] = "*"
    permission: AclPermission = "ALLOW"
    pattern_type: PatternType = "LITERAL"


class AclFilter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """ACLs matching every field given (at least one)."""

    # Unknown fields are refused (not ignored, as elsewhere): a misspelt field must never
    # make a filter that deletes more than was meant.
    principal: Principal | UnsetType = UNSET
    host: AclName | UnsetType = UNSET
    operation: AclOperation | UnsetType = UNSET
    permission: AclPermission | UnsetType = UNSET
    resource_type: ResourceType | UnsetType = UNSET
    resource_name: AclName | UnsetType = UNSET
    pattern_type: PatternType | UnsetType = UNSET


# ---------------------------------------------------------------------------- quotas

QUOTA_KEYS: Final = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
QuotaValue = Annotated[float, Meta(gt=0, lt=2**53)] | None | UnsetType  # null removes it


class QuotaRequest(msgspec.Struct, frozen=True):
    """Set (a value) or remove (null) quotas of one principal; the others are unchanged."""

    principal: Annotated[str, Meta(pattern="^User:" + names.pattern(255)[1:])]  # rule 3
    # each one: null removes it
    producer_byte_rate: QuotaValue = UNSET
    consumer_byte_rate: QuotaValue = UNSET
    request_percentage: QuotaValue = UNSET


# ---------------------------------------------------------------------------- elastic cluster


class PartitionReassignment(msgspec.Struct, frozen=True):
    """One partition's new replica list, or null to cancel its move."""

    topic: admin.TopicName
    partition: PartitionIndex
    replicas: Annotated[
        Annotated[
            tuple[
                Annotated[int, Meta(extra_json_schema={"minimum": 0, "maximum": MAX_NODE_ID})], ...
            ],
            Meta(extra_json_schema={"minItems": 1, "maxItems": MAX_REPLICAS, "uniqueItems": True}),
        ]
        | None,
        Meta(
            description="the target replica list (its first is the preferred leader), or null "
            "to cancel the partition's move"
        ),
    ]


class ReassignmentsRequest(msgspec.Struct, frozen=True):
    """Partitions to move to new replica lists, or whose moves to cancel (KIP-455)."""

    partitions: Annotated[
        tuple[PartitionReassignment, ...],
        Meta(
            min_length=1,
            max_length=MAX_REASSIGNMENTS_PER_REQUEST,
            description="each partition at most once",
        ),
    ]


class PartitionRef(msgspec.Struct, frozen=True):
    """A partition: its topic and index."""

    topic: admin.TopicName
    partition: PartitionIndex


class ElectionsRequest(msgspec.Struct, frozen=True):
    """Partitions whose preferred replicas should lead, or that should get a leader."""

    type: Annotated[
        Literal["preferred", "unclean"],
        Meta(
            description="preferred: each partition's first replica leads where it is live and "
            "in sync; unclean (Kafka's UNCLEAN election): a partition without a leader gets "
            "one, from outside the ISR when no in-sync replica is live, whatever "
            "unclean.leader.election.enable says (records it never received are lost)"
        ),
    ] = "preferred"
    partitions: Annotated[
        Annotated[tuple[PartitionRef, ...], Meta(min_length=1, max_length=admin.MAX_PARTITIONS)]
        | None,
        Meta(
            description="null or absent: every partition not led by its preferred replica "
            "(preferred), every partition without a leader (unclean)"
        ),
    ] = None


class RebalanceRequest(msgspec.Struct, frozen=True):
    """Plan only, or move too."""

    dry_run: Annotated[bool, Meta(description="plan only")] = False


class AlterTopicRequest(msgspec.Struct, frozen=True):
    """A topic's new replication factor."""

    replication_factor: Annotated[
        int,
        Meta(
            description="at most the live brokers, at least the topic's min.insync.replicas",
            extra_json_schema={"minimum": 1, "maximum": MAX_REPLICAS},
        ),
    ]


# ---------------------------------------------------------------------------- quorum


class AddVoterRequest(msgspec.Struct, frozen=True):
    """A controller to add to the quorum, running already (started with --join)."""

    id: Annotated[int, Meta(ge=0, le=MAX_NODE_ID, description="its node id")]
    # the server checks addresses as it checks configured ones (protocol/urls.py); these
    # patterns are the plain forms of them
    raft: Annotated[
        str,
        Meta(
            description="its Raft address, HOST:PORT",
            extra_json_schema={"pattern": f"^[A-Za-z0-9.-]+:{_PORT}$"},
        ),
    ]
    url: Annotated[
        str,
        Meta(
            description="its HTTP URL, http(s)://HOST:PORT",
            extra_json_schema={"pattern": f"^https?://[A-Za-z0-9.-]+:{_PORT}$"},
        ),
    ]


def given(body: msgspec.Struct) -> dict[str, Any]:
    """The fields `body` carries as JSON values: the UNSET ones left out (rule 5)."""
    fields: dict[str, Any] = msgspec.to_builtins(body)
    return fields


# Every body whose schema the OpenAPI document takes from its type (api/openapi.py), with
# the rules about whole bodies (rule 2).
DOCUMENTED_BODIES: Final = (
    *admin.DOCUMENTED_BODIES,
    Annotated[
        UserRequest,
        Meta(
            extra_json_schema={  # a password, or a credential computed elsewhere; not both
                "oneOf": [
                    {
                        "required": ["password"],
                        "not": {"anyOf": [{"required": [f]} for f in CREDENTIAL_FIELDS]},
                    },
                    {"required": list(CREDENTIAL_FIELDS), "not": {"required": ["password"]}},
                ],
                "if": {  # the keys are the mechanism's digest size
                    "properties": {"mechanism": {"const": "SCRAM-SHA-512"}},
                    "required": ["mechanism"],
                },
                "then": {
                    "properties": {
                        key: {"minLength": KEY_CHARS["SCRAM-SHA-512"]}
                        for key in ("stored_key", "server_key")
                    }
                },
                "else": {
                    "properties": {
                        key: {"maxLength": KEY_CHARS["SCRAM-SHA-256"]}
                        for key in ("stored_key", "server_key")
                    }
                },
            }
        ),
    ],
    Annotated[
        AclRequest,
        Meta(
            extra_json_schema={  # a TOPIC or GROUP ACL names its resource, a prefix not *
                "if": {"properties": {"resource_type": {"const": "CLUSTER"}}},
                "else": {
                    "required": ["resource_name"],
                    "if": {
                        "properties": {"pattern_type": {"const": "PREFIXED"}},
                        "required": ["pattern_type"],
                    },
                    "then": {"properties": {"resource_name": {"not": {"const": "*"}}}},
                },
            }
        ),
    ],
    Annotated[AclFilter, Meta(extra_json_schema={"minProperties": 1})],
    Annotated[
        QuotaRequest,
        Meta(extra_json_schema={"anyOf": [{"required": [name]} for name in QUOTA_KEYS]}),
    ],
    ReassignmentsRequest,
    ElectionsRequest,
    RebalanceRequest,
    AlterTopicRequest,
    AddVoterRequest,
)

"""Kafka's ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) in kraftlite's terms: Kafka's
numeric enums as kraftlite's names (security/acls.py), a CreateAcls entry as the body of
`POST /v1/acls`, and a Kafka filter as the controllers' `AclFilter` plus Kafka's own
matching, so the Kafka edge calls the same controller routes as the HTTP API
(handlers.py does the calls). Pure.

Rules:
1. Codes are Kafka's (org.apache.kafka.common.resource.ResourceType and PatternType,
   org.apache.kafka.common.acl.AclOperation and AclPermissionType). UNKNOWN (0) and codes
   Kafka does not define are INVALID_REQUEST, in a creation and in a filter alike (Kafka's
   request classes refuse them); so are ANY and MATCH in a creation (Kafka's
   AclControlManager.validateNewAcl).
2. Kafka's types kraftlite has no ACLs of (resources TRANSACTIONAL_ID, DELEGATION_TOKEN and
   USER; operations CREATE_TOKENS and DESCRIBE_TOKENS): a creation naming one is
   INVALID_REQUEST; a filter naming one matches nothing (there is none).
3. The cluster resource is `kafka-cluster` to Kafka clients, Kafka's only valid name for it
   (a creation naming another is INVALID_REQUEST, as Kafka answers), whatever the HTTP API
   calls it (`acls.CLUSTER_NAME`).
4. A filter matches as Kafka's AclBindingFilter does: a resource pattern filter of type
   LITERAL or PREFIXED matches that pattern type with exactly the name, ANY either pattern
   type with exactly the name, MATCH every ACL that applies to a resource of that name (its
   literal name, `*`, and every prefix of it); a null name, principal or host and ANY
   match everything. The controllers' filter only says "these fields are equal":
   `KafkaFilter.narrowed` gives the one that selects every ACL the Kafka filter matches,
   and whether it selects exactly those; where it does not, the edge lists and picks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import admin
from kraftlite.protocol.kafka import bodies
from kraftlite.security.acls import (
    CLUSTER_NAME,
    Action,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

ANY: Final = 1  # every enum's ANY (a filter's "whatever it is")
MATCH: Final = 2  # PatternType.MATCH: the ACLs that apply to a name (rule 4)
KAFKA_CLUSTER_NAME: Final = "kafka-cluster"  # rule 3
MAX_ACL_ENTRIES: Final = 1_000  # creations or filters one request may hold; the rest refused

RESOURCE_TYPES: Final[Mapping[int, ResourceType]] = {
    2: ResourceType.TOPIC,
    3: ResourceType.GROUP,
    4: ResourceType.CLUSTER,
    5: ResourceType.TRANSACTIONAL_ID,
}
PATTERN_TYPES: Final[Mapping[int, PatternType]] = {3: PatternType.LITERAL, 4: PatternType.PREFIXED}
OPERATIONS: Final[Mapping[int, Operation]] = {
    2: Operation.ALL,
    3: Operation.READ,
    4: Operation.WRITE,
    5: Operation.CREATE,
    6: Operation.DELETE,
    7: Operation.ALTER,
    8: Operation.DESCRIBE,
    9: Operation.CLUSTER_ACTION,
    10: Operation.DESCRIBE_CONFIGS,
    11: Operation.ALTER_CONFIGS,
    12: Operation.IDEMPOTENT_WRITE,
}
PERMISSIONS: Final[Mapping[int, Permission]] = {2: Permission.DENY, 3: Permission.ALLOW}
# What an ACL of each resource type may name (Kafka's AclEntry.supportedOperations), which
# IncludeAuthorizedOperations answers about (Metadata, DescribeCluster, the describes of
# groups)
SUPPORTED_OPERATIONS: Final[Mapping[ResourceType, tuple[Operation, ...]]] = {
    ResourceType.TOPIC: (
        Operation.READ,
        Operation.WRITE,
        Operation.CREATE,
        Operation.DESCRIBE,
        Operation.DELETE,
        Operation.ALTER,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE,
        Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS,
        Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE,
        Operation.ALTER,
        Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}
_OPERATION_CODES: Final[Mapping[Operation, int]] = {
    operation: code for code, operation in OPERATIONS.items()
}
AUTHORIZED_OPERATIONS_NOT_ASKED: Final = -(2**31)  # Kafka's INT32_MIN: "not asked for"


def authorized_operations(allowed: Callable[[Action], bool], kind: ResourceType, name: str) -> int:
    """Kafka's bit set (1 << each operation's code) of the operations on a resource that
    `allowed` grants, as IncludeAuthorizedOperations answers it."""
    return sum(
        1 << _OPERATION_CODES[operation]
        for operation in SUPPORTED_OPERATIONS[kind]
        if allowed(Action(operation, kind, name))
    )


# Rule 2: Kafka's codes that kraftlite has no ACLs of
RESOURCE_TYPES_NOT_SERVED: Final[Mapping[int, str]] = {
    6: "DELEGATION_TOKEN",
    7: "USER",
}
OPERATIONS_NOT_SERVED: Final[Mapping[int, str]] = {13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}

_CODE_OF: Final[Mapping[str, Mapping[str, int]]] = {
    "resource_type": {kind.value: code for code, kind in RESOURCE_TYPES.items()},
    "pattern_type": {kind.value: code for code, kind in PATTERN_TYPES.items()},
    "operation": {kind.value: code for code, kind in OPERATIONS.items()},
    "permission": {kind.value: code for code, kind in PERMISSIONS.items()},
}


def _invalid(message: str) -> KraftliteError:
    return KraftliteError(ErrorCode.INVALID_REQUEST, message)


class KafkaAcl(NamedTuple):
    """An ACL as Kafka's APIs show it: Kafka's codes, the cluster named `kafka-cluster`."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


def kafka_acl(acl: admin.AclAnswer) -> KafkaAcl | None:
    """A controller's ACL in Kafka's terms; None for a value with no Kafka code (none the
    controllers store today)."""
    codes = [
        _CODE_OF["resource_type"].get(acl.resource_type),
        _CODE_OF["pattern_type"].get(acl.pattern_type),
        _CODE_OF["operation"].get(acl.operation),
        _CODE_OF["permission"].get(acl.permission),
    ]
    kind, pattern, operation, permission = codes
    if kind is None or pattern is None or operation is None or permission is None:
        return None
    cluster = acl.resource_type == ResourceType.CLUSTER.value
    name = KAFKA_CLUSTER_NAME if cluster else acl.resource_name
    return KafkaAcl(kind, name, pattern, acl.principal, acl.host, operation, permission)


def exact_filter(acl: admin.AclAnswer) -> dict[str, str]:
    """The controllers' filter that names every field of `acl`: it selects `acl` alone
    (the controllers keep no two equal ACLs)."""
    return {
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission": acl.permission,
        "resource_type": acl.resource_type,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type,
    }


def acl_request(creation: bodies.AclCreation) -> dict[str, str]:
    """A CreateAcls entry as the fields of `POST /v1/acls`'s body (AclRequest), or
    INVALID_REQUEST (rules 1-3)."""
    kind = creation["resource_type"]
    if kind in RESOURCE_TYPES_NOT_SERVED:
        raise _invalid(
            f"{RESOURCE_TYPES_NOT_SERVED[kind]} ACLs are not served "
            "(TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID are)"
        )
    if kind not in RESOURCE_TYPES:
        raise _invalid(f"Invalid resourceType {kind}")
    pattern = creation["resource_pattern_type"]
    if pattern not in PATTERN_TYPES:
        raise _invalid(f"Invalid patternType {pattern} (LITERAL or PREFIXED)")
    operation = creation["operation"]
    if operation in OPERATIONS_NOT_SERVED:
        raise _invalid(f"{OPERATIONS_NOT_SERVED[operation]} ACLs are not served")
    if operation not in OPERATIONS:
        raise _invalid(f"Invalid operation {operation}")
    permission = creation["permission_type"]
    if permission not in PERMISSIONS:
        raise _invalid(f"Invalid permissionType {permission} (ALLOW or DENY)")
    name = creation["resource_name"]
    if not name:
        raise _invalid("Invalid empty resource name")
    resource = RESOURCE_TYPES[kind]
    if resource is ResourceType.CLUSTER and name != KAFKA_CLUSTER_NAME:
        raise _invalid(f"The only valid name for the CLUSTER resource is {KAFKA_CLUSTER_NAME}")
    body = {
        "principal": creation["principal"],
        "host": creation["host"],
        "operation": OPERATIONS[operation].value,
        "permission": PERMISSIONS[permission].value,
        "resource_type": resource.value,
        "pattern_type": PATTERN_TYPES[pattern].value,
    }
    if resource is not ResourceType.CLUSTER:  # the controllers name the cluster themselves
        body["resource_name"] = name
    return body


@dataclass(frozen=True, slots=True)
class KafkaFilter:
    """A DescribeAcls request's filter, or one of a DeleteAcls request's."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission_type: int

    @classmethod
    def of(cls, body: bodies.DescribeAclsRequest | bodies.DeleteAclsFilter) -> KafkaFilter:
        return cls(
            body["resource_type_filter"],
            body["resource_name_filter"],
            body["pattern_type_filter"],
            body["principal_filter"],
            body["host_filter"],
            body["operation"],
            body["permission_type"],
        )

    def problem(self) -> str | None:
        """Why Kafka refuses the filter (rule 1), or None."""
        if self.resource_type not in {ANY, *RESOURCE_TYPES, *RESOURCE_TYPES_NOT_SERVED}:
            return f"Invalid resourceType filter {self.resource_type}"
        if self.pattern_type not in {ANY, MATCH, *PATTERN_TYPES}:
            return f"Invalid patternType filter {self.pattern_type}"
        if self.operation not in {ANY, *OPERATIONS, *OPERATIONS_NOT_SERVED}:
            return f"Invalid operation filter {self.operation}"
        if self.permission_type not in {ANY, *PERMISSIONS}:
            return f"Invalid permissionType filter {self.permission_type}"
        return None

    def matches(self, acl: KafkaAcl) -> bool:
        """Rule 4: Kafka's AclBindingFilter.matches."""
        if self.resource_type not in (ANY, acl.resource_type):
            return False
        if self.pattern_type not in (ANY, MATCH, acl.pattern_type):
            return False
        if self.resource_name is not None and not self._name_matches(acl):
            return False
        return (
            self.principal in (None, acl.principal)
            and self.host in (None, acl.host)
            and self.operation in (ANY, acl.operation)
            and self.permission_type in (ANY, acl.permission_type)
        )

    def _name_matches(self, acl: KafkaAcl) -> bool:
        name = self.resource_name
        assert name is not None
        if self.pattern_type != MATCH:  # ANY, or the ACL's own pattern type
            return name == acl.resource_name
        if PATTERN_TYPES[acl.pattern_type] is PatternType.LITERAL:
            return acl.resource_name in (name, "*")
        return name.startswith(acl.resource_name)

    def narrowed(self) -> tuple[dict[str, str], bool] | None:
        """Rule 4: the controllers' filter (AclFilter's fields) that selects every ACL this
        one matches, and whether it selects exactly those; None when this one can match
        none (rule 2). Call `problem` first."""
        if self.resource_type in RESOURCE_TYPES_NOT_SERVED:
            return None
        if self.operation in OPERATIONS_NOT_SERVED:
            return None
        wanted: dict[str, str] = {}
        if self.principal is not None:
            wanted["principal"] = self.principal
        if self.host is not None:
            wanted["host"] = self.host
        if self.operation != ANY:
            wanted["operation"] = OPERATIONS[self.operation].value
        if self.permission_type != ANY:
            wanted["permission"] = PERMISSIONS[self.permission_type].value
        kind = RESOURCE_TYPES.get(self.resource_type)  # None: ANY
        if kind is not None:
            wanted["resource_type"] = kind.value
        pattern = PATTERN_TYPES.get(self.pattern_type)  # None: ANY or MATCH
        if pattern is not None:
            wanted["pattern_type"] = pattern.value
        name = self.resource_name
        if name is None:  # (so MATCH without a name is ANY)
            return wanted, True
        if self.pattern_type == MATCH:  # the name, `*` and its prefixes: picked at the edge
            return wanted, False
        if kind is ResourceType.CLUSTER:  # every cluster ACL is named kafka-cluster here
            return (wanted, True) if name == KAFKA_CLUSTER_NAME else None
        if kind is None and name == KAFKA_CLUSTER_NAME:  # also the cluster's, named otherwise
            return wanted, False
        wanted["resource_name"] = name
        # another type's ACLs of the HTTP API's cluster name: the cluster's are not named so
        return wanted, not (kind is None and name == CLUSTER_NAME)


def resources(acls: Iterable[KafkaAcl]) -> list[bodies.DescribeAclsResource]:
    """DescribeAcls' answer: the ACLs grouped by resource pattern, in order."""
    grouped: dict[tuple[int, str, int], list[bodies.AclDescription]] = {}
    for acl in acls:
        key = (acl.resource_type, acl.resource_name, acl.pattern_type)
        grouped.setdefault(key, []).append(
            {
                "principal": acl.principal,
                "host": acl.host,
                "operation": acl.operation,
                "permission_type": acl.permission_type,
            }
        )
    return [
        {"resource_type": kind, "resource_name": name, "pattern_type": pattern, "acls": found}
        for (kind, name, pattern), found in sorted(grouped.items())
    ]


def matching_acl(
    acl: KafkaAcl, error_code: int = 0, error_message: str | None = None
) -> bodies.DeleteAclsMatchingAcl:
    """One of a DeleteAcls filter's ACLs: deleted, or the error that kept it."""
    return {
        "error_code": error_code,
        "error_message": error_message,
        "resource_type": acl.resource_type,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission_type": acl.permission_type,
    }

"""ACLs and the authorizer, with the semantics of Kafka's StandardAuthorizer (KIP-801).

Rules:
1. An ACL says: principal P from host H may (ALLOW) or may not (DENY) do operation O on
   resources of type T whose name matches N (LITERAL: equal, or `*` for every name;
   PREFIXED: starts with N).
2. A super user may do everything. Anyone else: a matching DENY refuses; else a matching
   ALLOW allows; else refused (no match = deny).
3. `User:*` matches every principal, host `*` every host; operation ALL matches every
   operation. An ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and an ALLOW of
   ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's implied operations); a DENY implies
   nothing beyond itself (but DENY ALL denies all).
4. Filters (list, delete) match ACLs field by field; a field left out matches anything.
5. "May the caller do O on some resource of type T" (Kafka's authorizeByResourceType, which
   InitProducerId asks of WRITE on topics): yes if some ALLOW that grants O is not taken
   back by a DENY of the name it grants (`CallerAcls.allows_some`).

Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.records import AccessControlEntryRecord
from kraftlite.protocol import names


class ResourceType(Enum):
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    CLUSTER = "CLUSTER"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"  # issue 27: WRITE to use one, DESCRIBE to see it


class Operation(Enum):
    ALL = "ALL"
    READ = "READ"
    WRITE = "WRITE"
    CREATE = "CREATE"
    DELETE = "DELETE"
    ALTER = "ALTER"
    DESCRIBE = "DESCRIBE"
    CLUSTER_ACTION = "CLUSTER_ACTION"
    DESCRIBE_CONFIGS = "DESCRIBE_CONFIGS"
    ALTER_CONFIGS = "ALTER_CONFIGS"
    IDEMPOTENT_WRITE = "IDEMPOTENT_WRITE"  # on the cluster: may have producer ids


class PatternType(Enum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"


class Permission(Enum):
    ALLOW = "ALLOW"
    DENY = "DENY"


CLUSTER_NAME: Final = "kraftlite-cluster"  # Kafka's cluster resource name
WILDCARD: Final = "*"
WILDCARD_PRINCIPAL: Final = "User:*"
_IMPLIES_DESCRIBE: Final = {
    Operation.READ,
    Operation.WRITE,
    Operation.DELETE,
    Operation.ALTER,
}
_MAX_NAME = 255


@dataclass(frozen=True, slots=True)
class Action:
    """What a request asks to do (one of possibly several per request)."""

    operation: Operation
    resource_type: ResourceType
    resource_name: str


def _implied(acl_operation: Operation, wanted: Operation, permission: Permission) -> bool:
    if acl_operation in {wanted, Operation.ALL}:
        return True
    if permission is Permission.DENY:
        return False
    if wanted is Operation.DESCRIBE:
        return acl_operation in _IMPLIES_DESCRIBE
    return wanted is Operation.DESCRIBE_CONFIGS and acl_operation is Operation.ALTER_CONFIGS


def _resource_matches(acl: AccessControlEntryRecord, action: Action) -> bool:
    if acl.resource_type != action.resource_type.value:
        return False
    if acl.pattern_type == PatternType.LITERAL.value:
        return acl.resource_name in {action.resource_name, WILDCARD}
    return action.resource_name.startswith(acl.resource_name)


def authorize(
    acls: Iterable[AccessControlEntryRecord],
    super_users: frozenset[str],
    principal: str,
    host: str,
    action: Action,
) -> bool:
    """Rule 2: may `principal` from `host` do `action`?"""
    if principal in super_users:
        return True
    allowed = False
    for acl in acls:
        if acl.principal not in {principal, WILDCARD_PRINCIPAL}:
            continue
        if acl.host not in {host, WILDCARD}:
            continue
        if not _resource_matches(acl, action):
            continue
        permission = Permission(acl.permission_type)
        if not _implied(Operation(acl.operation), action.operation, permission):
            continue
        if permission is Permission.DENY:
            return False
        allowed = True
    return allowed


class CallerAcls:
    """Rule 2 for many actions of one caller (filtering a list of 10,000 topics): the ACLs
    that name the caller's principal and host, picked once and indexed by resource, so
    each check looks at the ACLs of that resource's name (and `*`) and the prefixed ones
    of its type, not at every ACL of the cluster. Answers exactly as `authorize`."""

    def __init__(
        self,
        acls: Iterable[AccessControlEntryRecord],
        super_users: frozenset[str],
        principal: str,
        host: str,
    ) -> None:
        self.principal, self.host, self.super_users = principal, host, super_users
        self._literal: dict[tuple[str, str], list[AccessControlEntryRecord]] = {}
        self._prefixed: dict[str, list[AccessControlEntryRecord]] = {}
        for acl in acls:
            if acl.principal not in {principal, WILDCARD_PRINCIPAL}:
                continue
            if acl.host not in {host, WILDCARD}:
                continue
            if acl.pattern_type == PatternType.LITERAL.value:
                key = (acl.resource_type, acl.resource_name)
                self._literal.setdefault(key, []).append(acl)
            else:
                self._prefixed.setdefault(acl.resource_type, []).append(acl)

    def allows(self, action: Action) -> bool:
        kind = action.resource_type.value
        candidates = [
            *self._literal.get((kind, action.resource_name), ()),
            *self._literal.get((kind, WILDCARD), ()),
            *self._prefixed.get(kind, ()),
        ]
        return authorize(candidates, self.super_users, self.principal, self.host, action)

    def allows_some(self, operation: Operation, kind: ResourceType) -> bool:
        """Rule 5: whether some resource of `kind` allows `operation`. Each ALLOW that
        could grant it is tried on the name it names (a literal name, `*`, or a prefix as a
        name of its own), so a DENY that covers that name takes it back. A little stricter
        than Kafka's authorizeByResourceType: a literal DENY of a prefix's own name also
        takes back that prefix's ALLOW."""
        if self.principal in self.super_users:
            return True
        granting = {operation, Operation.ALL}
        for acl in (
            *(a for (t, _), found in self._literal.items() if t == kind.value for a in found),
            *self._prefixed.get(kind.value, ()),
        ):
            if acl.permission_type != Permission.ALLOW.value:
                continue
            if Operation(acl.operation) not in granting:
                continue
            if self.allows(Action(operation, kind, acl.resource_name)):
                return True
        return False


# -------------------------------------------------------------------------------- requests


def _field(body: Mapping[str, Any], name: str, enum: type[Enum] | None = None) -> str:
    value = body.get(name)
    if not names.is_name(value, _MAX_NAME):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"{name} must be 1-{_MAX_NAME} characters, no controls"
        )
    assert isinstance(value, str)
    if enum is not None:  # exactly, as Kafka's names are written (the OpenAPI enum)
        try:
            enum(value)
        except ValueError:
            choices = ", ".join(e.value for e in enum)
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST, f"{name} must be one of {choices}"
            ) from None
    return value


def acl_from_request(acl_id: str, body: Mapping[str, Any]) -> AccessControlEntryRecord:
    """`POST /v1/acls`'s body as a record, or INVALID_REQUEST naming the field."""
    principal = _field(body, "principal")
    if not _principal_syntax(principal):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "principal must be User:<name> or User:*")
    resource_type = _field(body, "resource_type", ResourceType)
    name = CLUSTER_NAME if resource_type == "CLUSTER" else _field(body, "resource_name")
    pattern = _field({"p": body.get("pattern_type", "LITERAL")}, "p", PatternType)
    if pattern == "PREFIXED" and name == WILDCARD:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "a PREFIXED pattern cannot be *")
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=resource_type,
        resource_name=name,
        pattern_type=pattern,
        principal=principal,
        host=_field({"h": body.get("host", WILDCARD)}, "h"),
        operation=_field(body, "operation", Operation),
        permission_type=_field({"p": body.get("permission", "ALLOW")}, "p", Permission),
    )


_FILTER_FIELDS: Final = {
    "principal": "principal",
    "host": "host",
    "operation": "operation",
    "permission": "permission_type",
    "resource_type": "resource_type",
    "resource_name": "resource_name",
    "pattern_type": "pattern_type",
}


_FILTER_ENUMS: Final[Mapping[str, type[Enum]]] = {
    "operation": Operation,
    "permission": Permission,
    "resource_type": ResourceType,
    "pattern_type": PatternType,
}


def filter_from_request(values: Mapping[str, object]) -> dict[str, str]:
    """A list or delete filter, checked: a misspelt field or value is an error, never a
    filter that matches more than was meant."""
    wanted: dict[str, str] = {}
    for name, value in values.items():
        if name not in _FILTER_FIELDS:
            raise KraftliteError(
                ErrorCode.INVALID_REQUEST,
                f"unknown ACL filter field {name!r} (known: {', '.join(_FILTER_FIELDS)})",
            )
        enum = _FILTER_ENUMS.get(name)
        wanted[name] = _field({name: value}, name, enum)
        if name == "principal" and not _principal_syntax(wanted[name]):
            raise KraftliteError(ErrorCode.INVALID_REQUEST, "principal must be User:<name>")
    return wanted


def _principal_syntax(value: str) -> bool:
    return value.startswith("User:") and value != "User:"


def matches_filter(acl: AccessControlEntryRecord, wanted: Mapping[str, str]) -> bool:
    """Rule 4: `wanted` maps filter names (the request's) to values; upper-cased enums."""
    for name, value in wanted.items():
        field = _FILTER_FIELDS.get(name)
        if field is None:
            continue
        actual = getattr(acl, field)
        if field in {"principal", "resource_name", "host"}:
            if actual != value:
                return False
        elif actual != value:
            return False
    return True


def acl_view(acl: AccessControlEntryRecord) -> dict[str, str]:
    return {
        "id": acl.id,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission": acl.permission_type,
        "resource_type": acl.resource_type,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type,
    }

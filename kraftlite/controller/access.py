"""Controller decisions for users, ACLs and quotas: pure functions of the image that return
the records to commit (as decisions.py does for brokers and topics).

Rules:
1. A user is a name with one SCRAM credential per mechanism; the request carries the
   credential the edge computed (scram.py) or a client computed (Kafka's
   AlterUserScramCredentials, or POST /v1/users with salt and keys), never a password.
   Either way it must be one kraftlite could have made: a known mechanism, MIN_ITERATIONS
   to MAX_ITERATIONS, a salt of admin_bodies' size bounds and keys of the mechanism's digest
   size, in base64. Deleting takes the user whole, or one mechanism's credential.
2. ACLs are added whole; adding one equal to an existing ACL (every field but the id) adds
   nothing, as Kafka's CreateAcls. Deleting takes a filter and answers what it removed.
3. Quotas are per principal: producer_byte_rate, consumer_byte_rate (bytes/s, > 0) and
   request_percentage (> 0); null removes one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any, Final

from kraftlite.controller.decisions import ControllerResult
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage
from kraftlite.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from kraftlite.protocol import admin_bodies, names
from kraftlite.protocol.admin_bodies import (
    MAX_SALT_BYTES,
    MIN_SALT_BYTES,
    QUOTA_KEYS,
    USER_NAME_EXCLUDED,
)
from kraftlite.security import acls
from kraftlite.security.scram import MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS

MAX_ACLS: Final = 100_000
MAX_USER_NAME: Final = admin_bodies.MAX_USER_NAME  # the Kafka edge's too


def validate_user_name(name: object) -> str:
    if not names.is_name(name, MAX_USER_NAME, USER_NAME_EXCLUDED):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST,
            f"user names are 1-{MAX_USER_NAME} characters, no control characters, spaces "
            f"or any of {USER_NAME_EXCLUDED.strip()!r}",
        )
    assert isinstance(name, str)
    return name


def _base64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def credential_problem(credential: UserScramCredentialRecord) -> str | None:
    """Rule 1: why no credential kraftlite makes could be `credential`, or None. Names no
    value of it (the keys are secrets' kin)."""
    digest = MECHANISMS.get(credential.mechanism)
    if digest is None:
        return f"unsupported SCRAM mechanism (one of {', '.join(sorted(MECHANISMS))})"
    if not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
        return f"iterations must be {MIN_ITERATIONS} to {MAX_ITERATIONS}"
    salt = _base64(credential.salt)
    if salt is None or not MIN_SALT_BYTES <= len(salt) <= MAX_SALT_BYTES:
        return f"the salt must be {MIN_SALT_BYTES} to {MAX_SALT_BYTES} bytes, in base64"
    size = hashlib.new(digest).digest_size
    for name, key in (("stored_key", credential.stored_key), ("server_key", credential.server_key)):
        decoded = _base64(key)
        if decoded is None or len(decoded) != size:
            return f"{name} must be {size} bytes ({credential.mechanism}'s digest), in base64"
    return None


def set_user_credential(
    image: MetadataImage, credential: UserScramCredentialRecord
) -> ControllerResult[None]:
    """Rule 1: create the user, or replace its credential for that mechanism."""
    validate_user_name(credential.name)
    problem = credential_problem(credential)
    if problem is not None:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, problem)
    return ControllerResult((credential,), None)


def bootstrap_user(
    image: MetadataImage, credential: UserScramCredentialRecord
) -> ControllerResult[bool]:
    """The configured first user, unless it exists already (never overwritten: its password
    may have been changed through the API since). The answer: whether it was created."""
    if credential.name in image.users:
        return ControllerResult((), False)
    return ControllerResult((credential,), True)


def delete_user(
    image: MetadataImage, name: str, mechanism: str | None = None
) -> ControllerResult[None]:
    """Rule 1: the user's every credential, or only its credential for `mechanism` (the
    user goes with its last one)."""
    credentials = image.users.get(name)
    if not credentials:
        raise KraftliteError(ErrorCode.RESOURCE_NOT_FOUND, f"no user {name!r}")
    if mechanism is not None and mechanism not in credentials:
        raise KraftliteError(
            ErrorCode.RESOURCE_NOT_FOUND, f"user {name!r} has no {mechanism} credential"
        )
    wanted = sorted(credentials) if mechanism is None else [mechanism]
    records: tuple[MetadataRecord, ...] = tuple(
        RemoveUserScramCredentialRecord(name=name, mechanism=m) for m in wanted
    )
    return ControllerResult(records, None)


def _same(a: AccessControlEntryRecord, b: AccessControlEntryRecord) -> bool:
    return acls.acl_view(a) | {"id": ""} == acls.acl_view(b) | {"id": ""}


def create_acls(
    image: MetadataImage, wanted: tuple[AccessControlEntryRecord, ...]
) -> ControllerResult[list[AccessControlEntryRecord]]:
    """Rule 2; the answer is every requested ACL as stored (an existing equal one kept)."""
    if len(image.acls) + len(wanted) > MAX_ACLS:
        raise KraftliteError(ErrorCode.POLICY_VIOLATION, f"at most {MAX_ACLS} ACLs")
    existing = list(image.acls.values())
    records: list[MetadataRecord] = []
    answer = []
    for acl in wanted:
        if acl.id in image.acls:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"ACL id {acl.id} exists")
        same = next((e for e in existing if _same(e, acl)), None)
        if same is None:
            records.append(acl)
            existing.append(acl)
            same = acl
        answer.append(same)
    return ControllerResult(tuple(records), answer)


def delete_acls(
    image: MetadataImage, wanted: Mapping[str, str]
) -> ControllerResult[list[AccessControlEntryRecord]]:
    """Rule 2: every ACL matching the filter; an empty filter is refused (it would match
    every ACL: name at least one field)."""
    if not wanted:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "a delete filter names at least one field")
    removed = [a for _, a in sorted(image.acls.items()) if acls.matches_filter(a, wanted)]
    return ControllerResult(
        tuple(RemoveAccessControlEntryRecord(id=a.id) for a in removed), removed
    )


def alter_quotas(
    image: MetadataImage, principal: object, values: Mapping[str, Any]
) -> ControllerResult[dict[str, float]]:
    """Rule 3; the answer is the principal's quotas afterwards."""
    if (
        not isinstance(principal, str)
        or not principal.startswith("User:")
        or len(principal) == len("User:")
        or not names.is_name(principal, 260)  # no control characters: audit lines echo it
    ):
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, "principal must be User:<name>, no control characters"
        )
    records: list[MetadataRecord] = []
    result = dict(image.quotas.get(principal, {}))
    for key in QUOTA_KEYS:
        if key not in values:
            continue
        value = values[key]
        if value is None:
            result.pop(key, None)
        elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 2**53:
            raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{key} must be a positive number")
        else:
            value = float(value)
            result[key] = value
        records.append(ClientQuotaRecord(principal=principal, key=key, value=value))
    if not records:
        raise KraftliteError(
            ErrorCode.INVALID_REQUEST, f"set at least one of {', '.join(QUOTA_KEYS)}"
        )
    return ControllerResult(tuple(records), result)

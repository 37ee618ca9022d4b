"""Kafka's user and quota admin APIs: DescribeUserScramCredentials,
AlterUserScramCredentials, DescribeClientQuotas and AlterClientQuotas, on the controllers'
users and quotas (the HTTP API's /v1/users and /v1/quotas). The decisions (what a Kafka
request means in kraftlite's terms, and what Kafka refuses) are the plain functions first;
the four handlers after them only authorize, call and answer.

Rules:
1. Authorization is Kafka's (KafkaApis): DESCRIBE on the cluster to describe SCRAM
   credentials, ALTER to alter them; DESCRIBE_CONFIGS on the cluster to describe quotas,
   ALTER_CONFIGS to alter them. Refused at the edge, before any controller call, with
   CLUSTER_AUTHORIZATION_FAILED (for the request when describing, for each user or entry
   when altering), one audit line a request; the controllers authorize the call again, as
   the client (the HTTP routes ask the same of it).
2. Descriptions come from this broker's metadata, as Kafka's brokers answer from their
   metadata cache: users with their mechanisms and iterations (never salts or keys), quotas
   per principal. An alteration is answered once this broker's metadata holds it (the
   controllers' answer names its version), so describing it next here shows it.
3. SCRAM mechanisms are Kafka's codes: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512; any other is
   UNSUPPORTED_SASL_MECHANISM. DescribeUserScramCredentials with no users (null or empty)
   describes every user; a user named twice is DUPLICATE_RESOURCE, one without credentials
   RESOURCE_NOT_FOUND (Kafka's ScramImage.describe).
4. AlterUserScramCredentials (Kafka's ScramControlManager): a user named twice in a request
   (deletions and upsertions together) is DUPLICATE_RESOURCE and nothing changes for it; an
   empty name is UNACCEPTABLE_CREDENTIAL; deleting a credential the user does not have is
   RESOURCE_NOT_FOUND. An upsertion carries the client's salt and salted password: the
   edge derives StoredKey and ServerKey from it (RFC 5802) and sends only those with the
   salt, so the salted password, which logs in as well as the password does, goes no
   further than this broker and is never logged nor named in an error. It must be a
   credential kraftlite could have made itself (controller/access.py rule 1), else
   UNACCEPTABLE_CREDENTIAL: a user name of kraftlite's rules, MIN_ITERATIONS to
   MAX_ITERATIONS iterations (scram.py: 4096 to 100,000, as the HTTP API takes; Kafka's
   own ceiling is 16,384), a salt of MIN_SALT_BYTES to MAX_SALT_BYTES, a salted password of
   the mechanism's digest size. Each user's change is one controller commit (POST
   /v1/users with the credential, DELETE /v1/users/{name}?mechanism=): it happens whole or
   not at all, and its answer is that user's. A changed or deleted credential ends the
   user's open Kafka connections at their next request (handlers.py), as a password
   change does.
5. Quotas are what kraftlite enforces (security/quotas.py): per user principal,
   producer_byte_rate, consumer_byte_rate and request_percentage. Kafka's entity of one
   named user is the principal User:<name>; default entities (a null name), client-id and
   ip entities, and other keys (controller_mutation_rate, connection_creation_rate, ...)
   are INVALID_REQUEST naming what is not enforced: never stored, to be ignored. As
   Kafka's ClientQuotaControlManager: an empty entity, an entity type twice, an unknown
   type or an empty name are INVALID_REQUEST; so are a key twice in one entry, a byte
   rate that is not a whole number (Kafka's LONG); values must be above 0 (and below
   2^53). An entity named by two entries of one request is INVALID_REQUEST for both, and
   neither is applied. Each entry's changes are one commit (POST /v1/quotas); an entry with
   no changes is answered without one. validate_only checks everything, changes nothing.
6. DescribeClientQuotas filters as Kafka's ClientQuotasImage: components of entity types
   user, client-id or ip (another is UNSUPPORTED_VERSION), each type once, EXACT (0) with a
   name, DEFAULT (1) and SPECIFIED (2) without (else INVALID_REQUEST), ip not with the
   others; an entity matches when it has every EXACT type with that name (DEFAULT: the
   default entity) and every SPECIFIED type; `strict` also wants it to have no other type;
   no components match every entity unless strict. kraftlite's entities are named users
   only, so a filter on client-id, ip or a default matches nothing.
7. Bounds: at most MAX_ENTRIES users (or quota entries) per request; the rest are
   INVALID_REQUEST. A request's entries are counted as items, so a big one lets the event
   loop run others and its answer is encoded off it (handlers.py `_went_through`).
"""

from __future__ import annotations

import base64
import collections
import hashlib
import hmac
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple, cast

from kraftlite.controller import access
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka.codes import MAX_ADMIN_TIMEOUT_MS, MAX_MESSAGE, NONE, kafka_code, message
from kraftlite.metadata.records import UserScramCredentialRecord
from kraftlite.protocol import admin, admin_bodies
from kraftlite.protocol.internal import MessageError
from kraftlite.protocol.kafka import bodies
from kraftlite.protocol.kafka.messages import ApiKey, Request
from kraftlite.security import scram
from kraftlite.security.acls import CLUSTER_NAME, Operation, ResourceType
from kraftlite.security.quotas import FETCH, PRODUCE, REQUEST

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler, Session

MAX_ENTRIES: Final = 200  # users or quota entries one request may name (rule 7)
# Kafka's codes that kraftlite's ErrorCode does not name
UNSUPPORTED_SASL_MECHANISM: Final = 33
UNSUPPORTED_VERSION: Final = 35
DUPLICATE_RESOURCE: Final = 92
UNACCEPTABLE_CREDENTIAL: Final = 93
INVALID_REQUEST: Final = int(ErrorCode.INVALID_REQUEST)
RESOURCE_NOT_FOUND: Final = int(ErrorCode.RESOURCE_NOT_FOUND)
CLUSTER_AUTHORIZATION_FAILED: Final = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)

# Rule 3: org.apache.kafka.clients.admin.ScramMechanism
MECHANISMS: Final[Mapping[int, str]] = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
_MECHANISM_CODES: Final = {name: code for code, name in MECHANISMS.items()}
assert set(MECHANISMS.values()) == set(scram.MECHANISMS)

# Rule 5: org.apache.kafka.common.quota.ClientQuotaEntity's types, and the keys enforced
USER: Final = "user"
CLIENT_ID: Final = "client-id"
IP: Final = "ip"
ENTITY_TYPES: Final = frozenset({USER, CLIENT_ID, IP})
QUOTA_KEYS: Final = admin_bodies.QUOTA_KEYS
BYTE_RATES: Final = frozenset({PRODUCE, FETCH})  # Kafka's LONG quotas: whole numbers
assert set(QUOTA_KEYS) == {PRODUCE, FETCH, REQUEST}
MAX_QUOTA: Final = 2**53  # exclusive, as QuotaRequest's bound
# Rule 6: DescribeClientQuotasRequest's match types
EXACT: Final = 0
DEFAULT: Final = 1
SPECIFIED: Final = 2


class Refused(Exception):
    """A Kafka error code (some kraftlite's ErrorCode does not name) and its message."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.message = text[:MAX_MESSAGE]


def _invalid(text: str) -> Refused:
    return Refused(INVALID_REQUEST, text)


# ---------------------------------------------------------------------------- SCRAM


def credential_infos(
    credentials: Mapping[str, UserScramCredentialRecord],
) -> list[bodies.CredentialInfo]:
    """A user's credentials as Kafka shows them: mechanism code and iterations, by code."""
    return [
        {"mechanism": _MECHANISM_CODES[name], "iterations": credentials[name].iterations}
        for name in sorted(credentials, key=lambda n: _MECHANISM_CODES.get(n, 0))
        if name in _MECHANISM_CODES
    ]


def described_credentials(
    users: Mapping[str, Mapping[str, UserScramCredentialRecord]], named: Sequence[str] | None
) -> list[bodies.DescribeUserScramCredentialsResult]:
    """Rule 3: every user (None), or each user named, once, in the order first named."""
    if named is None:
        every = ((name, credential_infos(users[name])) for name in sorted(users))
        return [
            {"user": name, "error_code": NONE, "error_message": None, "credential_infos": infos}
            for name, infos in every
            if infos
        ]
    counts = collections.Counter(named)
    results: list[bodies.DescribeUserScramCredentialsResult] = []
    for position, name in enumerate(dict.fromkeys(named)):
        result: bodies.DescribeUserScramCredentialsResult = {
            "user": name,
            "error_code": NONE,
            "error_message": None,
            "credential_infos": [],
        }
        infos = credential_infos(users.get(name, {}))
        if position >= MAX_ENTRIES:
            result.update(
                {"error_code": INVALID_REQUEST, "error_message": f"at most {MAX_ENTRIES} users"}
            )
        elif counts[name] > 1:
            result.update(
                {
                    "error_code": DUPLICATE_RESOURCE,
                    "error_message": "Cannot describe SCRAM credentials for the same user "
                    "twice in a single request",
                }
            )
        elif not infos:
            result.update(
                {
                    "error_code": RESOURCE_NOT_FOUND,
                    "error_message": "Attempt to describe a user credential that does not exist",
                }
            )
        else:
            result["credential_infos"] = infos
        results.append(result)
    return results


def scram_keys(salted_password: bytes, mechanism: str) -> tuple[bytes, bytes]:
    """RFC 5802's StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
    HMAC(SaltedPassword, "Server Key"), as scram.make_credential derives them from the
    salted password it computes itself."""
    digest = scram.MECHANISMS[mechanism]
    client_key = hmac.new(salted_password, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    return stored_key, hmac.new(salted_password, b"Server Key", digest).digest()


def _known_mechanism(name: str, code: int) -> str:
    if not name:
        raise Refused(UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    mechanism = MECHANISMS.get(code)
    if mechanism is None:
        raise Refused(UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism {code}")
    return mechanism


def deletion(
    entry: bodies.ScramCredentialDeletion,
    users: Mapping[str, Mapping[str, UserScramCredentialRecord]],
) -> admin.DeleteUserCredentialRequest:
    """Rule 4: a deletion as the controllers' request, or Refused."""
    name = entry["name"]
    mechanism = _known_mechanism(name, entry["mechanism"])
    if mechanism not in users.get(name, {}):
        raise Refused(RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")
    return admin.DeleteUserCredentialRequest(name, mechanism)


def upsertion(entry: bodies.ScramCredentialUpsertion) -> admin.SetUserCredentialRequest:
    """Rule 4: an upsertion as the controllers' request (the keys derived, the salted
    password dropped), or Refused; no message names a byte of the secret."""
    name = entry["name"]
    mechanism = _known_mechanism(name, entry["mechanism"])
    try:
        access.validate_user_name(name)
    except KraftliteError as exc:
        raise Refused(UNACCEPTABLE_CREDENTIAL, exc.message) from None
    iterations = entry["iterations"]
    if iterations < scram.MIN_ITERATIONS:
        raise Refused(
            UNACCEPTABLE_CREDENTIAL, f"Too few iterations (at least {scram.MIN_ITERATIONS})"
        )
    if iterations > scram.MAX_ITERATIONS:
        raise Refused(
            UNACCEPTABLE_CREDENTIAL, f"Too many iterations (at most {scram.MAX_ITERATIONS})"
        )
    salt = entry["salt"]
    if not admin_bodies.MIN_SALT_BYTES <= len(salt) <= admin_bodies.MAX_SALT_BYTES:
        raise Refused(
            UNACCEPTABLE_CREDENTIAL,
            f"the salt must be {admin_bodies.MIN_SALT_BYTES} to "
            f"{admin_bodies.MAX_SALT_BYTES} bytes",
        )
    salted = entry["salted_password"]
    size = hashlib.new(scram.MECHANISMS[mechanism]).digest_size
    if len(salted) != size:
        raise Refused(
            UNACCEPTABLE_CREDENTIAL,
            f"the salted password must be {size} bytes ({mechanism}'s digest)",
        )
    stored_key, server_key = scram_keys(salted, mechanism)
    credential = {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": base64.b64encode(salt).decode(),
        "stored_key": base64.b64encode(stored_key).decode(),
        "server_key": base64.b64encode(server_key).decode(),
    }
    try:
        return admin.SetUserCredentialRequest(admin.decode(admin_bodies.UserRequest, credential))
    except MessageError:  # (every value was checked above) never its text: it holds keys
        raise Refused(UNACCEPTABLE_CREDENTIAL, "not a credential kraftlite keeps") from None


class Alteration(NamedTuple):
    """One user's part of an AlterUserScramCredentials request: the controllers' request
    to make, or the error answered for that user (`change` None)."""

    user: str
    change: admin.SetUserCredentialRequest | admin.DeleteUserCredentialRequest | None
    error_code: int = NONE
    error_message: str | None = None


def alterations(
    body: bodies.AlterUserScramCredentialsRequest,
    users: Mapping[str, Mapping[str, UserScramCredentialRecord]],
) -> list[Alteration]:
    """Rule 4: each user the request names, once, in the order first named (deletions
    first, as Kafka reads them), with its change or its error."""
    entries: list[bodies.ScramCredentialDeletion | bodies.ScramCredentialUpsertion] = [
        *body["deletions"],
        *body["upsertions"],
    ]
    counts = collections.Counter(entry["name"] for entry in entries)
    planned: dict[str, Alteration] = {}
    for entry in entries:
        name = entry["name"]
        if name in planned:
            continue
        try:
            change = _change(entry, len(planned), counts[name], users)
        except Refused as refused:
            planned[name] = Alteration(name, None, refused.code, refused.message)
        else:
            planned[name] = Alteration(name, change)
    return list(planned.values())


def _change(
    entry: bodies.ScramCredentialDeletion | bodies.ScramCredentialUpsertion,
    position: int,
    count: int,
    users: Mapping[str, Mapping[str, UserScramCredentialRecord]],
) -> admin.SetUserCredentialRequest | admin.DeleteUserCredentialRequest:
    if position >= MAX_ENTRIES:
        raise _invalid(f"at most {MAX_ENTRIES} users")
    if count > 1:
        raise Refused(
            DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request"
        )
    if "salted_password" in entry:
        return upsertion(cast(bodies.ScramCredentialUpsertion, entry))
    return deletion(entry, users)


# ---------------------------------------------------------------------------- quotas


def _entity_types(entity: Iterable[tuple[str, str | None]]) -> dict[str, str | None]:
    """Rule 5: Kafka's checks of an entity (ClientQuotaControlManager.validateEntity)."""
    found: dict[str, str | None] = {}
    for kind, name in entity:
        if kind in found:
            raise _invalid(f"Invalid client quota entity: duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _invalid(f"Unhandled client quota entity type: {kind}")
        if name == "":
            raise _invalid(f"Empty {kind} not supported")
        found[kind] = name
    if not found:
        raise _invalid("Invalid empty client quota entity")
    if IP in found and len(found) > 1:
        raise _invalid("Invalid quota entity combination: ip with user or client-id")
    return found


def quota_principal(entity: Iterable[tuple[str, str | None]]) -> str:
    """Rule 5: the principal whose quotas an entity names, or Refused."""
    found = _entity_types(entity)
    if IP in found:
        raise _invalid("ip quotas are not enforced by kraftlite (its quotas are per user)")
    if CLIENT_ID in found:
        raise _invalid("client-id quotas are not enforced by kraftlite (its quotas are per user)")
    name = found[USER]
    if name is None:
        raise _invalid("default user quotas are not enforced by kraftlite (only a named user's)")
    return "User:" + name


def quota_values(ops: Iterable[bodies.OpData]) -> dict[str, float | None]:
    """Rule 5: an entry's ops as QuotaRequest's fields (None removes), or Refused."""
    values: dict[str, float | None] = {}
    for op in ops:
        key = op["key"]
        if key in values:
            raise _invalid(f"Duplicate quota key {key}")
        if key not in QUOTA_KEYS:
            raise _invalid(
                f"{key} is not a quota kraftlite enforces (it enforces {', '.join(QUOTA_KEYS)})"
            )
        if op["remove"]:
            values[key] = None
            continue
        value = op["value"]
        if not (math.isfinite(value) and 0 < value < MAX_QUOTA):
            raise _invalid(f"Quota {key} must be above 0 and below 2^53")
        if key in BYTE_RATES and not value.is_integer():
            raise _invalid(f"Configuration {key} must be a Long value")
        values[key] = value
    return values


def quota_change(
    entry: bodies.AlterClientQuotasRequestEntryData,
) -> admin.AlterQuotasRequest | None:
    """Rule 5: an AlterClientQuotas entry as the controllers' request (None: it changes
    nothing), or Refused."""
    principal = quota_principal((e["entity_type"], e["entity_name"]) for e in entry["entity"])
    values = quota_values(entry["ops"])
    if not values:
        return None
    try:
        wanted = admin.decode(admin_bodies.QuotaRequest, {"principal": principal, **values})
    except MessageError as exc:  # a name longer than the controllers keep, or with a newline
        raise _invalid(str(exc)) from None
    return admin.AlterQuotasRequest(wanted)


def _quota_entry(
    entry: bodies.AlterClientQuotasRequestEntryData, position: int, count: int
) -> admin.AlterQuotasRequest | None:
    """Rules 5 and 7: the entry's change, or Refused."""
    if position >= MAX_ENTRIES:
        raise _invalid(f"at most {MAX_ENTRIES} entries")
    if count > 1:
        raise _invalid("the entity appears more than once in the request")
    return quota_change(entry)


def entity_key(entity: Iterable[tuple[str, str | None]]) -> frozenset[tuple[str, str | None]]:
    """An entity as Kafka's ClientQuotaEntity compares it: its (type, name) pairs, unordered."""
    return frozenset(entity)


@dataclass(frozen=True, slots=True)
class QuotaFilter:
    """Rule 6: a DescribeClientQuotas request's components."""

    exact: Mapping[str, str | None]  # type -> name (None: the default entity)
    specified: frozenset[str]
    strict: bool

    @classmethod
    def of(cls, body: bodies.DescribeClientQuotasRequest) -> QuotaFilter:
        """Kafka's ClientQuotasImage.describe checks, or Refused."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for component in body["components"]:
            kind, match = component["entity_type"], component["match"]
            if not kind:
                raise _invalid("Invalid empty entity type.")
            if kind in exact or kind in specified:
                raise _invalid(f"Entity type {kind} cannot appear more than once in the filter.")
            if kind not in ENTITY_TYPES:
                raise Refused(UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
            match_type = component["match_type"]
            if match_type == EXACT:
                if match is None:
                    raise _invalid("Request specified MATCH_TYPE_EXACT, but set match to null.")
                exact[kind] = match
            elif match_type in (DEFAULT, SPECIFIED):
                if match is not None:
                    raise _invalid(
                        "Request specified MATCH_TYPE_DEFAULT or MATCH_TYPE_SPECIFIED, but also "
                        "specified a match string."
                    )
                if match_type == DEFAULT:
                    exact[kind] = None
                else:
                    specified.add(kind)
            else:
                raise _invalid(f"Unknown match type {match_type}")
        if IP in exact.keys() | specified and len(exact.keys() | specified) > 1:
            raise _invalid(
                "Invalid entity filter component combination. IP filter component should not "
                "be used with user or clientId filter component."
            )
        return cls(exact, frozenset(specified), bool(body["strict"]))

    def matches(self, entity: Mapping[str, str | None]) -> bool:
        if not self.exact and not self.specified:
            return not self.strict
        if any(kind not in entity or entity[kind] != name for kind, name in self.exact.items()):
            return False
        if any(kind not in entity for kind in self.specified):
            return False
        return not self.strict or len(entity) == len(self.exact) + len(self.specified)


def described_quotas(
    quotas: Mapping[str, Mapping[str, float]], wanted: QuotaFilter
) -> list[bodies.DescribeClientQuotasResponseEntryData]:
    """Rule 6 over kraftlite's quotas: each principal User:<name> is the entity of user
    <name> (rule 5)."""
    entries: list[bodies.DescribeClientQuotasResponseEntryData] = []
    for principal in sorted(quotas):
        if not principal.startswith("User:"):
            continue
        name = principal.removeprefix("User:")
        if not wanted.matches({USER: name}):
            continue
        entries.append(
            {
                "entity": [{"entity_type": USER, "entity_name": name}],
                "values": [
                    {"key": key, "value": value} for key, value in sorted(quotas[principal].items())
                ],
            }
        )
    return entries


# ---------------------------------------------------------------------------- handlers


def _deadline(session: Session) -> float:
    return session._admin_deadline(MAX_ADMIN_TIMEOUT_MS)


async def describe_user_scram_credentials(
    session: Session, request: Request
) -> bodies.DescribeUserScramCredentialsResponse:
    """Rules 1-3."""
    users = cast(bodies.DescribeUserScramCredentialsRequest, request.body)["users"]
    named = [user["name"] for user in users] if users else None
    await session._went_through(len(named or ()))
    if not session._may(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        refused = "DESCRIBE on the cluster is needed"
        return {
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": refused,
            "results": [
                {
                    "user": name,
                    "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": refused,
                    "credential_infos": [],
                }
                for name in dict.fromkeys(named or ())
            ],
        }
    return {
        "error_code": NONE,
        "error_message": None,
        "results": described_credentials(session.image.users, named),
    }


async def alter_user_scram_credentials(
    session: Session, request: Request
) -> bodies.AlterUserScramCredentialsResponse:
    """Rules 1 and 4: each user's change through the controllers, one at a time."""
    body = cast(bodies.AlterUserScramCredentialsRequest, request.body)
    await session._went_through(len(body["deletions"]) + len(body["upsertions"]))
    if not session._may(Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        names = [e["name"] for e in body["deletions"]] + [e["name"] for e in body["upsertions"]]
        return {
            "results": [
                {
                    "user": name,
                    "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "ALTER on the cluster is needed",
                }
                for name in dict.fromkeys(names)
            ]
        }
    planned = alterations(body, session.image.users)
    deadline = _deadline(session)
    results: list[bodies.AlterUserScramCredentialsResult] = []
    for user, change, refused, refusal in planned:
        code, text = refused, refusal
        if change is not None:
            try:
                await session._admin(deadline, change)
            except KraftliteError as exc:
                code, text = kafka_code(exc), message(exc)
        results.append({"user": user, "error_code": code, "error_message": text})
    return {"results": results}


async def describe_client_quotas(
    session: Session, request: Request
) -> bodies.DescribeClientQuotasResponse:
    """Rules 1, 2 and 6."""
    body = cast(bodies.DescribeClientQuotasRequest, request.body)
    await session._went_through(len(body["components"]))
    if not session._may(Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "error_code": CLUSTER_AUTHORIZATION_FAILED,
            "error_message": "DESCRIBE_CONFIGS on the cluster is needed",
            "entries": None,
        }
    try:
        wanted = QuotaFilter.of(body)
    except Refused as refused:
        return {"error_code": refused.code, "error_message": refused.message, "entries": None}
    entries = described_quotas(session.image.quotas, wanted)
    return {"error_code": NONE, "error_message": None, "entries": entries}


async def alter_client_quotas(
    session: Session, request: Request
) -> bodies.AlterClientQuotasResponse:
    """Rules 1 and 5: each entry's changes through the controllers, one commit each."""
    body = cast(bodies.AlterClientQuotasRequest, request.body)
    entries = body["entries"]
    await session._went_through(len(entries))
    entities = [
        [(e["entity_type"], e["entity_name"]) for e in entry["entity"]] for entry in entries
    ]
    shown: list[list[bodies.AlterClientQuotasResponseEntityData]] = [
        [{"entity_type": kind, "entity_name": name} for kind, name in entity] for entity in entities
    ]
    if not session._may(Operation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {
            "entries": [
                {
                    "error_code": CLUSTER_AUTHORIZATION_FAILED,
                    "error_message": "ALTER_CONFIGS on the cluster is needed",
                    "entity": entity,
                }
                for entity in shown
            ]
        }
    counts = collections.Counter(entity_key(entity) for entity in entities)
    deadline = _deadline(session)
    answers: list[bodies.AlterClientQuotasResponseEntryData] = []
    for position, (entry, entity) in enumerate(zip(entries, entities, strict=True)):
        code, text = NONE, None
        try:
            change = _quota_entry(entry, position, counts[entity_key(entity)])
            if change is not None and not body["validate_only"]:
                await session._admin(deadline, change)
        except Refused as refused:
            code, text = refused.code, refused.message
        except KraftliteError as exc:
            code, text = kafka_code(exc), message(exc)
        answers.append({"error_code": code, "error_message": text, "entity": shown[position]})
    return {"entries": answers}


APIS: Final[dict[ApiKey, ModuleHandler]] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: alter_client_quotas,
}

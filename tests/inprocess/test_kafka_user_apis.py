"""Kafka's SCRAM and quota admin APIs (kraftlite/kafka/user_apis.py) in-process: requests
encoded as a client encodes them, handled by a connection's Session over one in-process
broker, its controller calls answered by ControllerTwin with the controllers' own decisions
(controller/access.py). What each test proves is in its docstring."""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
from collections.abc import AsyncIterator, Iterator, MutableMapping, Sequence
from typing import Any

import pytest
import structlog

from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.kafka.handlers import SERVED, CloseConnection
from kraftlite.metadata.records import AccessControlEntryRecord, ClientQuotaRecord
from kraftlite.protocol.kafka.messages import ApiKey
from kraftlite.security import scram
from kraftlite.security.authenticator import AuthSettings
from kraftlite.security.scram_client import ScramClient
from tests.harness.inprocess import ControllerTwin, InProcessBroker, KafkaConnection

ALICE, ADMIN = "User:alice", "User:admin"
SHA256, SHA512 = 1, 2  # Kafka's ScramMechanism codes
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
REFUSED = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
NOT_FOUND = int(ErrorCode.RESOURCE_NOT_FOUND)
UNSUPPORTED_SASL_MECHANISM, UNSUPPORTED_VERSION = 33, 35
DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 92, 93
SASL_AUTHENTICATION_FAILED = int(ErrorCode.SASL_AUTHENTICATION_FAILED)
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
_acl_ids = itertools.count()


def grant(principal: str, operation: str) -> AccessControlEntryRecord:
    """`operation` on the cluster for `principal`."""
    return AccessControlEntryRecord(
        id=f"user-apis-{next(_acl_ids)}",
        resource_type="CLUSTER",
        resource_name="kraftlite-cluster",
        pattern_type="LITERAL",
        principal=principal,
        host="*",
        operation=operation,
        permission_type="ALLOW",
    )


def salted(password: str, salt: bytes, iterations: int = 4096, mechanism: int = SHA256) -> bytes:
    """What a client sends: PBKDF2 of the password (Kafka's ScramFormatter.saltedPassword)."""
    digest = "sha256" if mechanism == SHA256 else "sha512"
    return hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)


def upsertion(
    name: str,
    password: str = "pw",
    *,
    mechanism: int = SHA256,
    iterations: int = 4096,
    salt: bytes | None = None,
    salted_password: bytes | None = None,
) -> dict[str, Any]:
    salt = os.urandom(24) if salt is None else salt
    if salted_password is None:
        salted_password = salted(password, salt, iterations, mechanism)
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted_password,
    }


async def alter(
    kafka: KafkaConnection,
    upsertions: Sequence[dict[str, Any]] = (),
    deletions: Sequence[dict[str, Any]] = (),
) -> dict[str, tuple[int, str | None]]:
    """AlterUserScramCredentials v0: user -> (error code, message)."""
    answer = await kafka.call(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        {"deletions": list(deletions), "upsertions": list(upsertions)},
    )
    return {r["user"]: (r["error_code"], r["error_message"]) for r in answer["results"]}


async def describe(kafka: KafkaConnection, *users: str) -> dict[str, Any]:
    """DescribeUserScramCredentials v0 of `users`, or of every user."""
    body = {"users": [{"name": u} for u in users] if users else None}
    return await kafka.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, body)


def entity(user: str | None = "alice", **others: str | None) -> list[dict[str, Any]]:
    found = [{"entity_type": "user", "entity_name": user}] if user != "-" else []
    return found + [
        {"entity_type": kind.replace("_", "-"), "entity_name": name}
        for kind, name in others.items()
    ]


def op(key: str, value: float = 0.0, *, remove: bool = False) -> dict[str, Any]:
    return {"key": key, "value": value, "remove": remove}


async def alter_quotas(
    kafka: KafkaConnection,
    *entries: tuple[list[dict[str, Any]], list[dict[str, Any]]],
    validate_only: bool = False,
    version: int = 1,
) -> list[tuple[int, str | None]]:
    """AlterClientQuotas: each entry's (error code, message)."""
    answer = await kafka.call(
        ApiKey.ALTER_CLIENT_QUOTAS,
        version,
        {
            "entries": [{"entity": e, "ops": ops} for e, ops in entries],
            "validate_only": validate_only,
        },
    )
    assert [a["entity"] for a in answer["entries"]] == [e for e, _ in entries]
    return [(a["error_code"], a["error_message"]) for a in answer["entries"]]


async def describe_quotas(
    kafka: KafkaConnection, *components: tuple[str, int, str | None], strict: bool = False
) -> dict[str, Any]:
    body = {
        "components": [
            {"entity_type": kind, "match_type": match_type, "match": match}
            for kind, match_type, match in components
        ],
        "strict": strict,
    }
    return await kafka.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, body)


def described(answer: dict[str, Any]) -> dict[str | None, dict[str, float]]:
    """A DescribeClientQuotas answer as user name -> quotas (every entity is a user's)."""
    assert answer["error_code"] == 0, answer
    found: dict[str | None, dict[str, float]] = {}
    for entry in answer["entries"]:
        ((kind, name),) = [(e["entity_type"], e["entity_name"]) for e in entry["entity"]]
        assert kind == "user"
        found[name] = {v["key"]: v["value"] for v in entry["values"]}
    return found


async def scram_login(
    node: InProcessBroker, user: str, password: str, mechanism: str = "SCRAM-SHA-256"
) -> tuple[KafkaConnection, int]:
    """A new connection's SASL SCRAM exchange (SaslHandshake v1, SaslAuthenticate v2 twice,
    the server's signature checked): the connection and the last answer's error code."""
    kafka = node.connect()
    handshake = await kafka.call(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    assert handshake["error_code"] == 0, handshake
    client = ScramClient(user, password, mechanism, nonce=base64.b64encode(os.urandom(12)).decode())
    first = await kafka.call(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first()})
    if first["error_code"]:
        return kafka, first["error_code"]
    try:
        final = await kafka.call(
            ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final(first["auth_bytes"])}
        )
    except CloseConnection:
        return kafka, SASL_AUTHENTICATION_FAILED
    if final["error_code"] == 0:
        client.verify(final["auth_bytes"])  # the server knew the credential
    return kafka, final["error_code"]


@pytest.fixture
def twin(node: InProcessBroker) -> ControllerTwin:
    controllers = ControllerTwin(node)
    node.broker.controllers = controllers  # type: ignore[assignment]
    return controllers


@pytest.fixture
async def secured() -> AsyncIterator[InProcessBroker]:
    """A broker whose clients must authenticate: User:admin may alter the cluster."""
    async with InProcessBroker(auth=AuthSettings(required=True)) as broker:
        broker.apply(grant(ADMIN, "ALTER"), grant(ADMIN, "ALTER_CONFIGS"))
        broker.broker.controllers = ControllerTwin(broker)  # type: ignore[assignment]
        yield broker


@pytest.fixture
def audit() -> Iterator[list[MutableMapping[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def denials(audit: list[MutableMapping[str, Any]]) -> list[tuple[str, str]]:
    return [
        (line["operation"], line["api"])
        for line in audit
        if line["event"] == "authorization_denied"
    ]


def test_the_four_apis_are_served_at_kafkas_versions() -> None:
    assert {
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        ApiKey.ALTER_CLIENT_QUOTAS,
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    } <= SERVED


# -- SCRAM credentials ---------------------------------------------------------------------------


async def test_credentials_are_set_described_and_deleted_through_the_users_route(
    node: InProcessBroker, twin: ControllerTwin, audit: list[MutableMapping[str, Any]]
) -> None:
    """Upsertions become POST /v1/users with the salt and the keys derived from the salted
    password (never the salted password itself), which check the client's password as a
    credential kraftlite made would; Describe shows mechanisms and iterations from this
    broker's metadata (all users, or each named once: RESOURCE_NOT_FOUND,
    DUPLICATE_RESOURCE); a deletion is one mechanism's DELETE /v1/users/{name}."""
    kafka = node.connect()
    alice_salt = os.urandom(24)
    alice = upsertion("alice", "alice-pw", iterations=8192, salt=alice_salt)
    bob = upsertion("bob", "bob-pw", mechanism=SHA512)
    bob_too = upsertion("bob2", "bob-pw")
    assert await alter(kafka, [alice, bob, bob_too]) == {
        "alice": (0, None),
        "bob": (0, None),
        "bob2": (0, None),
    }
    assert [(m, p) for m, p, _, _ in twin.calls] == [("POST", "/v1/users")] * 3
    sent = twin.calls[0][2]
    assert sent == {
        "name": "alice",
        "mechanism": "SCRAM-SHA-256",
        "iterations": 8192,
        "salt": base64.b64encode(alice_salt).decode(),
        "stored_key": sent["stored_key"],
        "server_key": sent["server_key"],
    }
    secret = alice["salted_password"]
    for text in [str(twin.calls), str(audit), str(node.image.users)]:
        assert secret.hex() not in text and base64.b64encode(secret).decode() not in text
    stored = node.image.users["alice"]["SCRAM-SHA-256"]
    assert scram.check_password(stored, "alice-pw") and not scram.check_password(stored, "x")
    assert stored == scram.make_credential("alice", "alice-pw", "SCRAM-SHA-256", alice_salt, 8192)
    assert scram.check_password(node.image.users["bob"]["SCRAM-SHA-512"], "bob-pw")

    everyone = await describe(kafka)
    assert everyone["error_code"] == 0
    assert [(r["user"], r["credential_infos"]) for r in everyone["results"]] == [
        ("alice", [{"mechanism": SHA256, "iterations": 8192}]),
        ("bob", [{"mechanism": SHA512, "iterations": 4096}]),
        ("bob2", [{"mechanism": SHA256, "iterations": 4096}]),
    ]
    assert (await describe(kafka))["results"] == (
        await kafka.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": []})
    )["results"]  # an empty list is every user too, as Kafka's ScramImage has it
    named = await describe(kafka, "nobody", "alice", "bob2", "bob2")
    assert [(r["user"], r["error_code"], r["credential_infos"]) for r in named["results"]] == [
        ("nobody", NOT_FOUND, []),
        ("alice", 0, [{"mechanism": SHA256, "iterations": 8192}]),
        ("bob2", DUPLICATE_RESOURCE, []),
    ]

    # bob gets a second mechanism; deleting one leaves the other, deleting it the user
    assert await alter(kafka, [upsertion("bob", "bob-pw-256")]) == {"bob": (0, None)}
    assert set(node.image.users["bob"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert await alter(kafka, deletions=[{"name": "bob", "mechanism": SHA512}]) == {
        "bob": (0, None)
    }
    assert twin.calls[-1][:3] == ("DELETE", "/v1/users/bob?mechanism=SCRAM-SHA-512", None)
    assert set(node.image.users["bob"]) == {"SCRAM-SHA-256"}
    assert await alter(kafka, deletions=[{"name": "bob", "mechanism": SHA256}]) == {
        "bob": (0, None)
    }
    assert "bob" not in node.image.users
    calls = len(twin.calls)
    gone = await alter(kafka, deletions=[{"name": "bob", "mechanism": SHA256}])
    assert gone["bob"][0] == NOT_FOUND and len(twin.calls) == calls  # no call for it
    assert (await describe(kafka, "bob"))["results"][0]["error_code"] == NOT_FOUND


async def test_a_credential_set_over_kafka_logs_in_at_once_and_ends_the_users_connections(
    secured: InProcessBroker,
) -> None:
    """The new credential works for SCRAM (both mechanisms) and PLAIN logins at once, the
    old password no more; the user's open connections, logged in with the old one, are
    closed at their next request, as a password change over HTTP closes them."""
    admin = secured.connect(certificate_principal=ADMIN)
    assert await alter(admin, [upsertion("alice", "first-pw")]) == {"alice": (0, None)}
    old, code = await scram_login(secured, "alice", "first-pw")
    assert code == 0
    assert (await old.call(ApiKey.API_VERSIONS, 3, {}))["error_code"] == 0  # logged in

    changed = [upsertion("alice", "second-pw"), upsertion("alice2", "x", mechanism=SHA512)]
    assert await alter(admin, changed) == {"alice": (0, None), "alice2": (0, None)}
    with pytest.raises(CloseConnection):
        await old.call(ApiKey.METADATA, 12, {"topics": None})
    assert (await scram_login(secured, "alice", "second-pw"))[1] == 0
    assert (await scram_login(secured, "alice", "first-pw"))[1] == SASL_AUTHENTICATION_FAILED
    assert (await scram_login(secured, "alice2", "x", "SCRAM-SHA-512"))[1] == 0
    plain = await secured.connect().authenticate_plain("alice", "second-pw")
    assert plain["error_code"] == 0

    # deleting the credential ends the connection that used it, and its logins
    fresh, code = await scram_login(secured, "alice", "second-pw")
    assert code == 0
    assert await alter(admin, deletions=[{"name": "alice", "mechanism": SHA256}]) == {
        "alice": (0, None)
    }
    with pytest.raises(CloseConnection):
        await fresh.call(ApiKey.METADATA, 12, {"topics": None})
    assert (await scram_login(secured, "alice", "second-pw"))[1] == SASL_AUTHENTICATION_FAILED


async def test_credentials_kafka_refuses_or_kraftlite_could_not_make_change_nothing(
    node: InProcessBroker, twin: ControllerTwin, audit: list[MutableMapping[str, Any]]
) -> None:
    """Kafka's per-user codes, decided at the edge with no controller call: an unknown
    mechanism UNSUPPORTED_SASL_MECHANISM; an empty name, a name kraftlite's users cannot
    have, iterations outside 4096-100,000, a salt outside 1-768 bytes or a salted password
    not of the digest's size UNACCEPTABLE_CREDENTIAL; a user named twice DUPLICATE_RESOURCE
    (neither of its changes made). Another user's change in the same request is made. No
    message or log line carries the salted password."""
    kafka = node.connect()
    secrets_sent = []

    def bad(name: str, **changes: Any) -> dict[str, Any]:
        entry = upsertion(name, f"{name}-pw", **changes)
        secrets_sent.append(entry["salted_password"])
        return entry

    answer = await alter(
        kafka,
        [
            bad("unknown-mechanism", mechanism=0),
            bad("mechanism-3", mechanism=3),
            bad(""),
            bad("with:colon"),
            bad("with space"),
            bad("x" * 256),
            bad("few", iterations=4095),
            bad("many", iterations=100_001),
            bad("no-salt", salt=b""),
            bad("long-salt", salt=b"s" * 769),
            bad("wrong-size", salted_password=b"p" * 31),
            bad("sha512-size", mechanism=SHA512, salted_password=b"p" * 32),
            bad("twice"),
            upsertion("fine"),
        ],
        deletions=[
            {"name": "twice", "mechanism": SHA256},
            {"name": "no-such", "mechanism": SHA256},
            {"name": "bad-mechanism", "mechanism": 9},
        ],
    )
    assert {user: code for user, (code, _) in answer.items()} == {
        "twice": DUPLICATE_RESOURCE,
        "no-such": NOT_FOUND,
        "bad-mechanism": UNSUPPORTED_SASL_MECHANISM,
        "unknown-mechanism": UNSUPPORTED_SASL_MECHANISM,
        "mechanism-3": UNSUPPORTED_SASL_MECHANISM,
        "": UNACCEPTABLE_CREDENTIAL,
        "with:colon": UNACCEPTABLE_CREDENTIAL,
        "with space": UNACCEPTABLE_CREDENTIAL,
        "x" * 256: UNACCEPTABLE_CREDENTIAL,
        "few": UNACCEPTABLE_CREDENTIAL,
        "many": UNACCEPTABLE_CREDENTIAL,
        "no-salt": UNACCEPTABLE_CREDENTIAL,
        "long-salt": UNACCEPTABLE_CREDENTIAL,
        "wrong-size": UNACCEPTABLE_CREDENTIAL,
        "sha512-size": UNACCEPTABLE_CREDENTIAL,
        "fine": 0,
    }
    assert all(text for code, text in answer.values() if code)
    assert [path for _, path, _, _ in twin.calls] == ["/v1/users"]  # "fine" alone
    assert set(node.image.users) == {"fine"}
    said = str(answer) + str(audit) + str(twin.calls)
    for secret in secrets_sent:
        assert secret.hex() not in said and base64.b64encode(secret).decode() not in said


async def test_the_controllers_refusal_is_that_users_alone(node: InProcessBroker) -> None:
    """Each user's change is its own controller call: one refused (here, a timeout) is that
    user's error code; the others are made."""

    class FlakyTwin(ControllerTwin):
        async def call_with_headers(
            self, method: str, path: str, body: Any = None, **options: Any
        ) -> tuple[int, Any, dict[str, str]]:
            if body is not None and b'"bob"' in body:
                raise KraftliteError(ErrorCode.REQUEST_TIMED_OUT, "a slow quorum")
            return await super().call_with_headers(method, path, body, **options)

    node.broker.controllers = FlakyTwin(node)  # type: ignore[assignment]
    answer = await alter(node.connect(), [upsertion(n) for n in ("alice", "bob", "carol")])
    assert {u: code for u, (code, _) in answer.items()} == {
        "alice": 0,
        "bob": int(ErrorCode.REQUEST_TIMED_OUT),
        "carol": 0,
    }
    assert set(node.image.users) == {"alice", "carol"}


async def test_scram_apis_need_alter_or_describe_on_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    """Kafka's rule: ALTER on the cluster to alter credentials, DESCRIBE to describe them;
    refused at the edge with CLUSTER_AUTHORIZATION_FAILED (for each user, or the request),
    no controller call, nothing changed, one audit line per request."""
    twin = ControllerTwin(secured)
    secured.broker.controllers = twin  # type: ignore[assignment]
    alice = secured.connect(certificate_principal=ALICE)
    answer = await alter(
        alice,
        [upsertion("alice"), upsertion("mallory")],
        deletions=[{"name": "admin", "mechanism": SHA256}],
    )
    assert answer == {
        "admin": (REFUSED, "ALTER on the cluster is needed"),
        "alice": (REFUSED, "ALTER on the cluster is needed"),
        "mallory": (REFUSED, "ALTER on the cluster is needed"),
    }
    refused = await describe(alice)
    assert (refused["error_code"], refused["results"]) == (REFUSED, [])
    refused = await describe(alice, "alice")
    assert refused["error_code"] == REFUSED
    assert [r["error_code"] for r in refused["results"]] == [REFUSED]
    assert twin.calls == [] and not secured.image.users
    assert denials(audit) == [
        ("ALTER", "AlterUserScramCredentials"),
        ("DESCRIBE", "DescribeUserScramCredentials"),
        ("DESCRIBE", "DescribeUserScramCredentials"),
    ]

    secured.apply(grant(ALICE, "ALTER"))
    assert await alter(alice, [upsertion("alice")]) == {"alice": (0, None)}
    # the controllers authorize the call as the client too (its principal travels with it)
    assert all(headers is not None and ALICE in headers.values() for *_, headers in twin.calls)
    assert (await describe(alice))["error_code"] == 0  # ALTER implies DESCRIBE


async def test_a_request_names_at_most_200_users(
    node: InProcessBroker, twin: ControllerTwin
) -> None:
    kafka = node.connect()
    many = [{"name": f"u{i}", "mechanism": SHA256} for i in range(250)]
    answer = await alter(kafka, deletions=many)
    codes = [code for code, _ in answer.values()]
    assert codes == [NOT_FOUND] * 200 + [INVALID_REQUEST] * 50
    described_users = await describe(kafka, *(f"u{i}" for i in range(250)))
    codes = [r["error_code"] for r in described_users["results"]]
    assert codes == [NOT_FOUND] * 200 + [INVALID_REQUEST] * 50
    assert twin.calls == []


# -- client quotas -------------------------------------------------------------------------------


async def test_quotas_are_altered_and_described_as_kafkas_client_quotas(
    node: InProcessBroker, twin: ControllerTwin
) -> None:
    """A user entity's ops are one POST /v1/quotas for the principal User:<name> (removals
    as null); DescribeClientQuotas filters as Kafka's ClientQuotasImage (EXACT, DEFAULT,
    SPECIFIED, strict) over kraftlite's per-user quotas; validate_only changes nothing."""
    kafka = node.connect()
    answer = await alter_quotas(
        kafka,
        (
            entity("alice"),
            [
                op("producer_byte_rate", 1024),
                op("consumer_byte_rate", 2048),
                op("request_percentage", 50.5),
            ],
        ),
        (entity("bob"), [op("producer_byte_rate", 4096)]),
        (entity("carol"), []),  # nothing to change: answered without a call
        version=0,
    )
    assert answer == [(0, None), (0, None), (0, None)]
    assert [(m, p, b) for m, p, b, _ in twin.calls] == [
        (
            "POST",
            "/v1/quotas",
            {
                "principal": ALICE,
                "producer_byte_rate": 1024.0,
                "consumer_byte_rate": 2048.0,
                "request_percentage": 50.5,
            },
        ),
        ("POST", "/v1/quotas", {"principal": "User:bob", "producer_byte_rate": 4096.0}),
    ]
    assert node.image.quotas == {
        ALICE: {"producer_byte_rate": 1024, "consumer_byte_rate": 2048, "request_percentage": 50.5},
        "User:bob": {"producer_byte_rate": 4096},
    }
    both = {
        "alice": {
            "consumer_byte_rate": 2048,
            "producer_byte_rate": 1024,
            "request_percentage": 50.5,
        },
        "bob": {"producer_byte_rate": 4096},
    }
    assert described(await describe_quotas(kafka)) == both
    assert described(await describe_quotas(kafka, ("user", EXACT, "bob"))) == {"bob": both["bob"]}
    assert described(await describe_quotas(kafka, ("user", SPECIFIED, None))) == both
    assert described(await describe_quotas(kafka, ("user", SPECIFIED, None), strict=True)) == both
    for nothing in [
        await describe_quotas(kafka, strict=True),
        await describe_quotas(kafka, ("user", DEFAULT, None)),
        await describe_quotas(kafka, ("user", EXACT, "nobody")),
        await describe_quotas(kafka, ("client-id", EXACT, "app")),
        await describe_quotas(kafka, ("client-id", SPECIFIED, None)),
        await describe_quotas(kafka, ("ip", DEFAULT, None)),
        await describe_quotas(kafka, ("user", EXACT, "alice"), ("client-id", DEFAULT, None)),
    ]:
        assert described(nothing) == {}
    v0 = await kafka.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, {"components": [], "strict": False})
    assert described(v0) == both

    # a removal is null; validate_only checks and changes nothing
    calls = len(twin.calls)
    checked = await alter_quotas(
        kafka, (entity("alice"), [op("producer_byte_rate", 1)]), validate_only=True
    )
    assert checked == [(0, None)] and len(twin.calls) == calls
    assert node.image.quotas[ALICE]["producer_byte_rate"] == 1024
    removed = await alter_quotas(
        kafka,
        (entity("alice"), [op("producer_byte_rate", remove=True), op("request_percentage", 5)]),
    )
    assert removed == [(0, None)]
    assert twin.calls[-1][2] == {
        "principal": ALICE,
        "producer_byte_rate": None,
        "request_percentage": 5.0,
    }
    assert node.image.quotas[ALICE] == {"consumer_byte_rate": 2048, "request_percentage": 5}


async def test_quotas_kraftlite_does_not_enforce_are_refused_never_stored(
    node: InProcessBroker, twin: ControllerTwin
) -> None:
    """Default entities, client-id and ip entities and keys kraftlite does not enforce are
    INVALID_REQUEST naming what is not enforced; so is what Kafka refuses (an empty or
    repeated entity type, an unknown type, an empty name, a key twice, a byte rate that is
    not whole, a value not above 0, an entity twice in a request: both entries). No call,
    nothing stored, and the good entry of the same request is made."""
    kafka = node.connect()
    rate = [op("producer_byte_rate", 100)]
    cases: list[tuple[list[dict[str, Any]], list[dict[str, Any]], str]] = [
        (entity(None), rate, "default user"),
        (entity(client_id="app"), rate, "client-id"),
        (entity("-", client_id="app"), rate, "client-id"),
        (entity("-", client_id=None), rate, "client-id"),
        (entity("-", ip="10.0.0.1"), [op("connection_creation_rate", 5)], "ip"),
        (entity(ip="10.0.0.1"), rate, "ip"),
        (entity("a0"), [op("controller_mutation_rate", 5)], "controller_mutation_rate"),
        (entity("a1"), [op("connection_creation_rate", 5)], "connection_creation_rate"),
        (entity("a2"), [op("controller_mutation_rate", remove=True)], "controller_mutation"),
        (entity("-"), rate, "empty"),
        (entity("a") + entity("b"), rate, "duplicate entity entry user"),
        (entity("-", group="g"), rate, "group"),
        (entity(""), rate, "Empty user"),
        (entity("a3"), [op("producer_byte_rate", 1), op("producer_byte_rate", 2)], "Dupl"),
        (entity("a4"), [op("producer_byte_rate", 1.5)], "Long"),
        (entity("a5"), [op("consumer_byte_rate", 0)], "above 0"),
        (entity("a6"), [op("request_percentage", -1)], "above 0"),
        (entity("a7"), [op("request_percentage", float("inf"))], "above 0"),
        (entity("a8"), [op("request_percentage", float("nan"))], "above 0"),
        (entity("a9"), [op("producer_byte_rate", 2.0**53)], "above 0"),
        (entity("x" * 256), rate, "principal"),
        (entity("twice"), rate, "more than once"),
        (entity("twice"), [op("consumer_byte_rate", 1)], "more than once"),
    ]
    answer = await alter_quotas(kafka, *[(e, ops) for e, ops, _ in cases], (entity("ok"), rate))
    for (code, text), (e, _, words) in zip(answer, cases, strict=False):
        assert code == INVALID_REQUEST and text is not None and words in text, (e, text)
    assert answer[-1] == (0, None)
    assert [b["principal"] for _, _, b, _ in twin.calls] == ["User:ok"]
    assert node.image.quotas == {"User:ok": {"producer_byte_rate": 100}}


async def test_quota_filters_kafka_refuses(node: InProcessBroker) -> None:
    """As Kafka's ClientQuotasImage.describe: an unknown entity type is UNSUPPORTED_VERSION;
    an empty or repeated type, EXACT without a name, DEFAULT or SPECIFIED with one, an
    unknown match type and ip with user are INVALID_REQUEST; the entries are null."""
    node.apply(ClientQuotaRecord(principal=ALICE, key="producer_byte_rate", value=10.0))
    kafka = node.connect()
    for components, code in [
        ([("group", EXACT, "g")], UNSUPPORTED_VERSION),
        ([("", EXACT, "x")], INVALID_REQUEST),
        ([("user", EXACT, "a"), ("user", SPECIFIED, None)], INVALID_REQUEST),
        ([("user", EXACT, None)], INVALID_REQUEST),
        ([("user", DEFAULT, "a")], INVALID_REQUEST),
        ([("user", SPECIFIED, "a")], INVALID_REQUEST),
        ([("user", 3, None)], INVALID_REQUEST),
        ([("ip", SPECIFIED, None), ("user", SPECIFIED, None)], INVALID_REQUEST),
    ]:
        answer = await describe_quotas(kafka, *components)
        assert (answer["error_code"], answer["entries"]) == (code, None), components
        assert answer["error_message"]
    many = [("user", SPECIFIED, None)] * 100_000  # a repeated type: refused at the second
    assert (await describe_quotas(kafka, *many))["error_code"] == INVALID_REQUEST


async def test_quota_apis_need_alter_configs_or_describe_configs_on_the_cluster(
    secured: InProcessBroker, audit: list[MutableMapping[str, Any]]
) -> None:
    """Kafka's rule: ALTER_CONFIGS on the cluster to alter quotas, DESCRIBE_CONFIGS to
    describe them; CLUSTER_AUTHORIZATION_FAILED otherwise, no call, nothing changed."""
    twin = ControllerTwin(secured)
    secured.broker.controllers = twin  # type: ignore[assignment]
    secured.apply(ClientQuotaRecord(principal="User:bob", key="producer_byte_rate", value=10.0))
    alice = secured.connect(certificate_principal=ALICE)
    rate = [op("producer_byte_rate", 1 << 30)]
    answer = await alter_quotas(alice, (entity("alice"), rate), (entity("bob"), rate))
    assert answer == [(REFUSED, "ALTER_CONFIGS on the cluster is needed")] * 2
    refused = await describe_quotas(alice)
    assert (refused["error_code"], refused["entries"]) == (REFUSED, None)
    assert twin.calls == []
    assert secured.image.quotas == {"User:bob": {"producer_byte_rate": 10.0}}
    assert denials(audit) == [
        ("ALTER_CONFIGS", "AlterClientQuotas"),
        ("DESCRIBE_CONFIGS", "DescribeClientQuotas"),
    ]
    secured.apply(grant(ALICE, "ALTER_CONFIGS"))
    assert await alter_quotas(alice, (entity("alice"), rate)) == [(0, None)]
    assert all(headers is not None and ALICE in headers.values() for *_, headers in twin.calls)
    assert set(described(await describe_quotas(alice))) == {"alice", "bob"}  # implied


async def test_a_request_alters_at_most_200_quota_entries(
    node: InProcessBroker, twin: ControllerTwin
) -> None:
    entries = [(entity(f"u{i}"), [op("producer_byte_rate", 1)]) for i in range(210)]
    answer = await alter_quotas(node.connect(), *entries, validate_only=True)
    assert [code for code, _ in answer] == [0] * 200 + [INVALID_REQUEST] * 10
    assert twin.calls == []

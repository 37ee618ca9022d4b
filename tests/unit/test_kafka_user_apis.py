"""Kafka's SCRAM and quota APIs in kraftlite's terms (kraftlite/kafka/user_apis.py), the pure
decisions: the keys derived from a client's salted password are the ones kraftlite derives
from the password; an alteration names each user once; quota entities and ops map onto the
per-user quotas kraftlite enforces or are refused; and DescribeClientQuotas' filter matches
as Kafka's ClientQuotasImage, checked against a transcription of it over a universe of
entities and filters."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Mapping
from typing import Any

import msgspec
import pytest

from kraftlite.kafka import user_apis
from kraftlite.kafka.user_apis import QuotaFilter, Refused
from kraftlite.protocol import admin
from kraftlite.security import scram

# org.apache.kafka.clients.admin.ScramMechanism
KAFKA_MECHANISMS = {"UNKNOWN": 0, "SCRAM_SHA_256": 1, "SCRAM_SHA_512": 2}


def test_mechanism_codes_are_kafkas() -> None:
    assert {
        KAFKA_MECHANISMS["SCRAM_SHA_256"]: "SCRAM-SHA-256",
        KAFKA_MECHANISMS["SCRAM_SHA_512"]: "SCRAM-SHA-512",
    } == user_apis.MECHANISMS


@pytest.mark.parametrize("mechanism", sorted(scram.MECHANISMS))
@pytest.mark.parametrize(("password", "iterations"), [("pencil", 4096), ("é ünïcode", 5000)])
def test_keys_from_a_salted_password_are_those_kraftlite_makes_from_the_password(
    mechanism: str, password: str, iterations: int
) -> None:
    salt = b"a-salt-of-16-bytes+"
    digest = scram.MECHANISMS[mechanism]
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, iterations)
    upserted = user_apis.upsertion(
        {
            "name": "alice",
            "mechanism": user_apis._MECHANISM_CODES[mechanism],
            "iterations": iterations,
            "salt": salt,
            "salted_password": salted,
        }
    )
    made = scram.make_credential("alice", password, mechanism, salt, iterations)
    sent = upserted.user
    assert (sent.salt, sent.stored_key, sent.server_key) == (
        made.salt,
        made.stored_key,
        made.server_key,
    )
    assert (sent.mechanism, sent.iterations) == (mechanism, iterations)
    assert sent.password is msgspec.UNSET  # no password, nor the salted one, travels on
    assert "salted" not in repr(upserted) and salted.hex() not in repr(upserted)


def _upsertion(name: str = "alice", **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "mechanism": 1,
        "iterations": 4096,
        "salt": b"s" * 16,
        "salted_password": b"p" * 32,
        **changes,
    }


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"name": ""}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"name": "", "mechanism": 0}, user_apis.UNACCEPTABLE_CREDENTIAL),  # the name first
        ({"mechanism": 0}, user_apis.UNSUPPORTED_SASL_MECHANISM),
        ({"mechanism": -1}, user_apis.UNSUPPORTED_SASL_MECHANISM),
        ({"name": "a/b"}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"name": "a\n"}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"iterations": 4095}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"iterations": -(2**31)}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"iterations": 100_001}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"salt": b""}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"salt": b""}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"salt": b"s" * 769}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"salted_password": b""}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"salted_password": b"p" * 64}, user_apis.UNACCEPTABLE_CREDENTIAL),
        ({"mechanism": 2}, user_apis.UNACCEPTABLE_CREDENTIAL),  # 32 bytes: SHA-256's size
    ],
)
def test_an_upsertion_kraftlite_could_not_have_made_is_refused(
    changes: dict[str, Any], code: int
) -> None:
    with pytest.raises(Refused) as refused:
        user_apis.upsertion(_upsertion(**changes))  # type: ignore[arg-type]
    assert refused.value.code == code
    assert "pppp" not in refused.value.message


@pytest.mark.parametrize(
    "changes",
    [
        {"iterations": 4096},
        {"iterations": 100_000},
        {"salt": b"s"},  # any salt, as Kafka (librdkafka's tests send 4 bytes)
        {"salt": b"s" * 768},
        {"mechanism": 2, "salted_password": b"p" * 64},
        {"name": "é-ünïcode.name_1"},
    ],
)
def test_the_bounds_themselves_are_taken(changes: dict[str, Any]) -> None:
    assert isinstance(
        user_apis.upsertion(_upsertion(**changes)),  # type: ignore[arg-type]
        admin.SetUserCredentialRequest,
    )


def test_an_alteration_names_each_user_once_in_the_order_first_named() -> None:
    users = {"alice": {"SCRAM-SHA-256": object()}, "bob": {"SCRAM-SHA-512": object()}}
    planned = user_apis.alterations(
        {
            "deletions": [
                {"name": "bob", "mechanism": 2},
                {"name": "alice", "mechanism": 1},
                {"name": "carol", "mechanism": 1},
                {"name": "bob", "mechanism": 1},  # bob twice: neither
            ],
            "upsertions": [_upsertion("dave"), _upsertion("alice"), _upsertion("erin")],  # type: ignore[list-item]
        },
        users,  # type: ignore[arg-type]
    )
    assert [(p.user, p.error_code, type(p.change).__name__) for p in planned] == [
        ("bob", user_apis.DUPLICATE_RESOURCE, "NoneType"),
        ("alice", user_apis.DUPLICATE_RESOURCE, "NoneType"),
        ("carol", user_apis.RESOURCE_NOT_FOUND, "NoneType"),
        ("dave", 0, "SetUserCredentialRequest"),
        ("erin", 0, "SetUserCredentialRequest"),
    ]
    many = user_apis.alterations(
        {"deletions": [], "upsertions": [_upsertion(f"u{i}") for i in range(205)]},  # type: ignore[misc]
        {},
    )
    assert [p.error_code for p in many] == [0] * 200 + [user_apis.INVALID_REQUEST] * 5


def test_only_a_named_users_enforced_quotas_are_taken() -> None:
    assert user_apis.quota_principal([("user", "alice")]) == "User:alice"
    for entity, words in [
        ([], "empty"),
        ([("user", None)], "default user"),
        ([("client-id", "app")], "client-id"),
        ([("user", "a"), ("client-id", None)], "client-id"),
        ([("ip", None)], "ip"),
        ([("ip", "10.0.0.1"), ("user", "a")], "combination"),
        ([("user", "a"), ("user", "b")], "duplicate"),
        ([("tenant", "t")], "Unhandled"),
        ([("user", "")], "Empty user"),
    ]:
        with pytest.raises(Refused) as refused:
            user_apis.quota_principal(entity)
        assert refused.value.code == user_apis.INVALID_REQUEST
        assert words in refused.value.message, entity
    assert user_apis.quota_values(
        [
            {"key": "producer_byte_rate", "value": 1e6, "remove": False},
            {"key": "consumer_byte_rate", "value": -5.0, "remove": True},  # value unread
            {"key": "request_percentage", "value": 0.25, "remove": False},
        ]
    ) == {"producer_byte_rate": 1e6, "consumer_byte_rate": None, "request_percentage": 0.25}
    for key in ["controller_mutation_rate", "connection_creation_rate", "Producer_Byte_Rate"]:
        with pytest.raises(Refused) as refused:
            user_apis.quota_values([{"key": key, "value": 1.0, "remove": False}])
        assert key in refused.value.message


# -- DescribeClientQuotas' filter, against Kafka's own -------------------------------------------


def kafka_describe(
    entities: list[Mapping[str, str | None]],
    components: list[tuple[str, int, str | None]],
    strict: bool,
) -> list[Mapping[str, str | None]]:
    """ClientQuotasImage.matches (Kafka 4.x), transcribed: candidates by exact match, then
    type match, then strict's size check; no components: everything unless strict."""
    exact = {kind: match for kind, match_type, match in components if match_type != 2}
    typed = {kind for kind, match_type, _ in components if match_type == 2}
    candidates: list[Mapping[str, str | None]] | None = None
    if exact:
        for kind, name in exact.items():
            matches = [e for e in entities if kind in e and e[kind] == name]
            candidates = matches if candidates is None else [c for c in candidates if c in matches]
        for kind in typed:
            assert candidates is not None
            candidates = [c for c in candidates if kind in c]
    elif typed:
        for kind in typed:
            matches = [e for e in entities if kind in e]
            candidates = matches if candidates is None else [c for c in candidates if c in matches]
    elif not strict:
        return entities
    if candidates is None:
        return []
    if strict:
        return [c for c in candidates if len(c) == len(exact) + len(typed)]
    return candidates


ENTITIES: list[Mapping[str, str | None]] = [
    {"user": "alice"},
    {"user": "bob"},
    {"user": None},
    {"client-id": "app"},
    {"client-id": None},
    {"user": "alice", "client-id": "app"},
    {"user": None, "client-id": "app"},
    {"user": "alice", "client-id": None},
    {"ip": "10.0.0.1"},
    {"ip": None},
]
COMPONENTS = [
    (kind, match_type, match)
    for kind in ("user", "client-id", "ip")
    for match_type, match in [(0, "alice"), (0, "app"), (0, "10.0.0.1"), (1, None), (2, None)]
]


def test_the_quota_filter_matches_as_kafkas_over_every_filter_of_up_to_two_components() -> None:
    checked = 0
    for size in (0, 1, 2):
        for components in itertools.combinations(COMPONENTS, size):
            kinds = [kind for kind, _, _ in components]
            if len(set(kinds)) != len(kinds) or ("ip" in kinds and len(kinds) > 1):
                continue  # refused (the next test)
            for strict in (False, True):
                wanted = QuotaFilter.of(
                    {
                        "components": [
                            {"entity_type": k, "match_type": t, "match": m}
                            for k, t, m in components
                        ],
                        "strict": strict,
                    }
                )
                ours = [e for e in ENTITIES if wanted.matches(e)]
                expected = kafka_describe(ENTITIES, list(components), strict)
                assert ours == expected, (components, strict)
                checked += 1
    assert checked == 82  # (ip alone, or user and client-id; each type once)


def test_described_quotas_are_users_entities() -> None:
    quotas = {"User:bob": {"producer_byte_rate": 1.0}, "User:alice": {"request_percentage": 5.0}}
    every = QuotaFilter.of({"components": [], "strict": False})
    assert user_apis.described_quotas(quotas, every) == [
        {
            "entity": [{"entity_type": "user", "entity_name": "alice"}],
            "values": [{"key": "request_percentage", "value": 5.0}],
        },
        {
            "entity": [{"entity_type": "user", "entity_name": "bob"}],
            "values": [{"key": "producer_byte_rate", "value": 1.0}],
        },
    ]

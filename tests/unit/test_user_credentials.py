"""A SCRAM credential computed elsewhere (issue 25: Kafka's AlterUserScramCredentials, and
POST /v1/users with salt and keys instead of a password): the body's type, the OpenAPI
document and the controllers' decision (controller/access.py rule 1) take and refuse the
same credentials, and a user loses one mechanism's credential or all of them."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from kraftlite.api.openapi import OPENAPI
from kraftlite.controller import access
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, apply_batch
from kraftlite.metadata.records import RecordBatch, UserScramCredentialRecord
from kraftlite.protocol import admin, admin_bodies
from kraftlite.protocol.internal import MessageError
from kraftlite.security import scram

SALT = b"sixteen-byte-slt"


def made(mechanism: str = "SCRAM-SHA-256", password: str = "pw") -> UserScramCredentialRecord:
    return scram.make_credential("alice", password, mechanism, SALT)


def body(credential: UserScramCredentialRecord, **changes: Any) -> dict[str, Any]:
    return {
        "name": credential.name,
        "mechanism": credential.mechanism,
        "iterations": credential.iterations,
        "salt": credential.salt,
        "stored_key": credential.stored_key,
        "server_key": credential.server_key,
        **changes,
    }


def document() -> Draft202012Validator:
    ref = "#/components/schemas/UserRequest"
    return Draft202012Validator({"$ref": ref, "components": OPENAPI["components"]})


def commit(image: MetadataImage, result: access.ControllerResult[Any]) -> MetadataImage:
    return apply_batch(image, RecordBatch(image.version, result.records))


def as_record(request: admin_bodies.UserRequest) -> UserScramCredentialRecord:
    """What controller_app.create_user commits for a credential computed elsewhere."""
    return UserScramCredentialRecord(
        name=request.name,
        mechanism=request.mechanism,
        salt=str(request.salt),
        stored_key=str(request.stored_key),
        server_key=str(request.server_key),
        iterations=request.iterations,
    )


@pytest.mark.parametrize("mechanism", sorted(scram.MECHANISMS))
def test_a_credential_computed_elsewhere_is_kept_as_if_made_here(mechanism: str) -> None:
    credential = made(mechanism)
    wanted = body(credential)
    assert document().is_valid(wanted)
    request = admin.decode(admin_bodies.UserRequest, wanted)
    assert admin_bodies.given(request) == wanted  # no password, none invented
    image = commit(
        MetadataImage.EMPTY, access.set_user_credential(MetadataImage.EMPTY, as_record(request))
    )
    assert image.users["alice"][mechanism] == credential
    assert scram.check_password(image.users["alice"][mechanism], "pw")


KEY_32 = base64.b64encode(b"k" * 32).decode()
KEY_64 = base64.b64encode(b"k" * 64).decode()
WRONG_BODIES = [
    {"name": "alice"},  # neither a password nor a credential
    {"name": "alice", "salt": base64.b64encode(SALT).decode(), "stored_key": KEY_32},
    {  # both
        "name": "alice",
        "password": "pw",
        "salt": base64.b64encode(SALT).decode(),
        "stored_key": KEY_32,
        "server_key": KEY_32,
    },
    {"name": "alice", "password": "pw", "salt": base64.b64encode(SALT).decode()},
    # keys not of the mechanism's size
    {"name": "a", "salt": "A" * 24, "stored_key": KEY_64, "server_key": KEY_64},
    {
        "name": "a",
        "mechanism": "SCRAM-SHA-512",
        "salt": "A" * 24,
        "stored_key": KEY_32,
        "server_key": KEY_32,
    },
    {"name": "a", "salt": "A" * 24, "stored_key": KEY_32, "server_key": KEY_64},
    # salts outside 1-768 bytes, or not base64
    {"name": "a", "salt": "", "stored_key": KEY_32, "server_key": KEY_32},
    {"name": "a", "salt": base64.b64encode(b"s" * 769).decode(), "stored_key": KEY_32,
     "server_key": KEY_32},
    {"name": "a", "salt": "!" * 24, "stored_key": KEY_32, "server_key": KEY_32},
    {"name": "a", "salt": "A" * 25, "stored_key": KEY_32, "server_key": KEY_32},
    {"name": "a", "salt": "A" * 24, "stored_key": "k" * 44, "server_key": KEY_32},
    {"name": "a", "salt": "A" * 24, "stored_key": KEY_32, "server_key": KEY_32, "iterations": 1},
]  # fmt: skip


@pytest.mark.parametrize("wrong", WRONG_BODIES)
def test_the_type_and_the_document_refuse_the_same_bodies(wrong: dict[str, Any]) -> None:
    assert not document().is_valid(wrong)
    with pytest.raises(MessageError):
        admin.decode(admin_bodies.UserRequest, wrong)


@pytest.mark.parametrize(
    "good",
    [
        {"name": "a", "password": "pw"},  # as ever
        {"name": "a", "salt": "A" * 24, "stored_key": KEY_32, "server_key": KEY_32},
        {"name": "a", "salt": "A" * 1024, "stored_key": KEY_32, "server_key": KEY_32},
        {
            "name": "a",
            "mechanism": "SCRAM-SHA-512",
            "iterations": 100_000,
            "salt": base64.b64encode(b"s" * 17).decode(),
            "stored_key": KEY_64,
            "server_key": KEY_64,
        },
    ],
)
def test_what_the_document_takes_the_type_and_the_decision_take(good: dict[str, Any]) -> None:
    assert document().is_valid(good)
    request = admin.decode(admin_bodies.UserRequest, good)
    if "password" not in good:
        assert access.credential_problem(as_record(request)) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"mechanism": "PLAIN"},
        {"iterations": 4095},
        {"iterations": 100_001},
        {"salt": ""},
        {"salt": base64.b64encode(b"s" * 769).decode()},
        {"salt": "not base64!"},
        {"salt": base64.b64encode(SALT).decode() + "\n"},  # what a pattern's $ lets through
        {"stored_key": base64.b64encode(b"k" * 31).decode()},
        {"server_key": base64.b64encode(b"k" * 64).decode()},
        {"server_key": ""},
    ],
)
def test_the_decision_refuses_a_credential_kraftlite_could_not_make(
    changes: dict[str, Any],
) -> None:
    """Rule 1 of controller/access.py, whatever the edge: the body's type has checked most
    of it already; the decision checks it all, and names no value."""
    credential = made()
    wrong = UserScramCredentialRecord(**{**body(credential), **changes})
    with pytest.raises(KraftliteError) as refused:
        access.set_user_credential(MetadataImage.EMPTY, wrong)
    assert refused.value.code is ErrorCode.INVALID_REQUEST
    assert credential.stored_key not in refused.value.message


def test_a_user_loses_one_mechanisms_credential_or_all() -> None:
    image = MetadataImage.EMPTY
    for mechanism in sorted(scram.MECHANISMS):
        image = commit(image, access.set_user_credential(image, made(mechanism)))
    before = image.user_versions["alice"]
    image = commit(image, access.delete_user(image, "alice", "SCRAM-SHA-512"))
    assert set(image.users["alice"]) == {"SCRAM-SHA-256"}
    assert image.user_versions["alice"] > before  # its tokens and connections end
    with pytest.raises(KraftliteError) as missing:
        access.delete_user(image, "alice", "SCRAM-SHA-512")
    assert missing.value.code is ErrorCode.RESOURCE_NOT_FOUND
    image = commit(image, access.delete_user(image, "alice", "SCRAM-SHA-256"))
    assert "alice" not in image.users  # with its last credential
    with pytest.raises(KraftliteError) as missing:
        access.delete_user(image, "alice")
    assert missing.value.code is ErrorCode.RESOURCE_NOT_FOUND


def test_a_credential_request_never_shows_its_keys() -> None:
    request = admin.SetUserCredentialRequest(admin.decode(admin_bodies.UserRequest, body(made())))
    assert made().stored_key not in repr(request) and made().server_key not in repr(request)
    assert (request.method, request.route()) == ("POST", "/v1/users")
    deletion = admin.DeleteUserCredentialRequest("a.b-é", "SCRAM-SHA-512")
    assert deletion.route() == "/v1/users/a.b-%C3%A9?mechanism=SCRAM-SHA-512"
    quota = admin.AlterQuotasRequest(
        admin.decode(admin_bodies.QuotaRequest, {"principal": "User:a", "producer_byte_rate": 1})
    )
    assert (quota.method, quota.route(), admin_bodies.given(quota.body())) == (
        "POST",
        "/v1/quotas",
        {"principal": "User:a", "producer_byte_rate": 1.0},
    )

"""Users, ACLs and quotas as metadata (controller/access.py decisions, image replay)."""

from __future__ import annotations

import pickle

import pytest

from kraftlite.controller import access
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataImage, apply_batch
from kraftlite.metadata.records import AccessControlEntryRecord, RecordBatch
from kraftlite.metadata.views import image_from_json, image_to_json
from kraftlite.security.acls import acl_from_request
from kraftlite.security.scram import check_password, make_credential


def commit(image: MetadataImage, result: access.ControllerResult[object]) -> MetadataImage:
    return apply_batch(image, RecordBatch(image.version, result.records))


def test_users_are_created_changed_and_deleted_by_credential_never_password() -> None:
    first = make_credential("alice", "one", "SCRAM-SHA-256", b"s" * 16)
    image = commit(MetadataImage.EMPTY, access.set_user_credential(MetadataImage.EMPTY, first))
    assert check_password(image.users["alice"]["SCRAM-SHA-256"], "one")
    created_at = image.user_versions["alice"]
    second = make_credential("alice", "two", "SCRAM-SHA-256", b"t" * 16)
    image = commit(image, access.set_user_credential(image, second))
    assert image.user_versions["alice"] > created_at  # tokens issued before stop working
    assert check_password(image.users["alice"]["SCRAM-SHA-256"], "two")
    assert "one" not in str(image_to_json(image)) and "two" not in str(image_to_json(image))
    image = commit(image, access.delete_user(image, "alice"))
    assert "alice" not in image.users
    with pytest.raises(KraftliteError) as error:
        access.delete_user(image, "alice")
    assert error.value.code is ErrorCode.RESOURCE_NOT_FOUND


@pytest.mark.parametrize("name", ["", "a:b", "*", "has space", "x" * 256, 7])
def test_bad_user_names_are_refused(name: object) -> None:
    with pytest.raises(KraftliteError):
        access.validate_user_name(name)


def test_the_bootstrap_user_is_created_once_and_never_overwritten() -> None:
    credential = make_credential("admin", "boot", "SCRAM-SHA-256", b"s" * 16)
    result = access.bootstrap_user(MetadataImage.EMPTY, credential)
    assert result.response is True
    image = commit(MetadataImage.EMPTY, result)
    again = access.bootstrap_user(
        image, make_credential("admin", "other", "SCRAM-SHA-256", b"x" * 16)
    )
    assert again.records == () and again.response is False


def _acl(acl_id: str, **changes: str) -> AccessControlEntryRecord:
    body = {
        "principal": "User:alice",
        "operation": "READ",
        "resource_type": "TOPIC",
        "resource_name": "orders",
    } | changes
    return acl_from_request(acl_id, body)


def test_acls_are_added_once_and_deleted_by_filter() -> None:
    image = MetadataImage.EMPTY
    image = commit(image, access.create_acls(image, (_acl("a1"),)))
    duplicate = access.create_acls(image, (_acl("a2"),))
    assert duplicate.records == () and duplicate.response[0].id == "a1"
    image = commit(image, access.create_acls(image, (_acl("a3", operation="WRITE"),)))
    assert set(image.acls) == {"a1", "a3"}
    with pytest.raises(KraftliteError):
        access.delete_acls(image, {})
    removed = access.delete_acls(image, {"operation": "WRITE"})
    assert [a.id for a in removed.response] == ["a3"]
    image = commit(image, removed)
    assert set(image.acls) == {"a1"}
    # followers of metadata get the same ACLs
    assert image_from_json(image_to_json(image)).acls == image.acls


def test_quotas_are_set_and_removed_per_principal() -> None:
    image = MetadataImage.EMPTY
    result = access.alter_quotas(image, "User:alice", {"producer_byte_rate": 1024})
    image = commit(image, result)
    assert image.quotas == {"User:alice": {"producer_byte_rate": 1024.0}}
    image = commit(image, access.alter_quotas(image, "User:alice", {"producer_byte_rate": None}))
    assert image.quotas == {}
    for principal, values in [
        ("alice", {"producer_byte_rate": 1}),
        ("User:alice", {}),
        ("User:alice", {"producer_byte_rate": 0}),
        ("User:alice", {"consumer_byte_rate": True}),
        ("User:alice", {"consumer_byte_rate": "fast"}),
        ("User:", {"producer_byte_rate": 1}),
        ("User:a\n", {"producer_byte_rate": 1}),  # audit lines echo the principal
        ("User:a\x00b", {"producer_byte_rate": 1}),
        ("User:\x1b[2J", {"producer_byte_rate": 1}),
    ]:
        with pytest.raises(KraftliteError):
            access.alter_quotas(image, principal, values)


def test_an_image_pickled_before_users_existed_loads_with_none() -> None:
    old_state = (3, {}, {}, {}, {1: "http://c:1"})  # what a snapshot of the old image held
    image = MetadataImage.__new__(MetadataImage)
    image.__setstate__(old_state)
    assert image.version == 3 and image.users == {} and image.acls == {} and image.quotas == {}
    assert pickle.loads(pickle.dumps(image)) == image

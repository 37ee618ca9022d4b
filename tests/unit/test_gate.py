"""The front door (security/gate.py, authenticator.py, producer_ids.py) in-process: one
authorizer indexed per caller and kept while the ACLs stay the same, one audit line per
refused request, one set of quota buckets whichever edge charges them, producer ids only
for writers and bound to their principal."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from kraftlite.clock import ManualClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata.image import MetadataDelta, MetadataImage
from kraftlite.metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
)
from kraftlite.security import producer_ids
from kraftlite.security.acls import CLUSTER_NAME, Action, Operation, ResourceType, authorize
from kraftlite.security.authenticator import Authenticator, AuthSettings
from kraftlite.security.gate import AUDITED_NAMES, Gate
from kraftlite.security.principal import Caller
from kraftlite.security.quotas import PRODUCE

SECRET = "a-cluster-secret-of-some-length"
ALICE = Caller("User:alice", "10.0.0.1")
_ids = itertools.count()


def _acl(
    operation: str,
    name: str,
    *,
    principal: str = "User:alice",
    resource_type: str = "TOPIC",
    pattern: str = "LITERAL",
    permission: str = "ALLOW",
) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=f"acl-{next(_ids)}",
        resource_type=resource_type,
        resource_name=CLUSTER_NAME if resource_type == "CLUSTER" else name,
        pattern_type=pattern,
        principal=principal,
        host="*",
        operation=operation,
        permission_type=permission,
    )


class Metadata:
    """The metadata a gate reads, moved by replaying records as a broker does."""

    def __init__(self) -> None:
        self.image = MetadataImage.EMPTY

    def replay(self, *records: Any) -> None:
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        self.image = delta.apply()


@pytest.fixture
def metadata() -> Metadata:
    return Metadata()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def gate(metadata: Metadata, clock: ManualClock) -> Gate:
    settings = AuthSettings(required=True, super_users=frozenset({"User:admin"}))
    return Gate(Authenticator(settings, SECRET, lambda: metadata.image, clock), clock)


def _topic(name: str, operation: Operation = Operation.WRITE) -> Action:
    return Action(operation, ResourceType.TOPIC, name)


# -- the authorizer ----------------------------------------------------------------------


def test_an_image_keeps_its_acl_mapping_until_an_acl_record_changes_it(
    metadata: Metadata,
) -> None:
    metadata.replay(_acl("WRITE", "orders"))
    acls = metadata.image.acls
    metadata.replay(
        RegisterBrokerRecord(broker_id=1, incarnation_id="i", url="http://b1", broker_epoch=2)
    )
    assert metadata.image.acls is acls  # other records: the same mapping, the index kept
    metadata.replay(_acl("READ", "orders"))
    assert metadata.image.acls is not acls and len(metadata.image.acls) == 2


def test_the_index_follows_every_acl_change(gate: Gate, metadata: Metadata) -> None:
    assert not gate.allowed(ALICE, _topic("orders"))
    allow = _acl("WRITE", "orders")
    metadata.replay(allow)
    assert gate.allowed(ALICE, _topic("orders"))
    deny = _acl("WRITE", "orders", permission="DENY")
    metadata.replay(deny)
    assert not gate.allowed(ALICE, _topic("orders"))
    metadata.replay(RemoveAccessControlEntryRecord(id=deny.id))
    assert gate.allowed(ALICE, _topic("orders"))
    metadata.replay(RemoveAccessControlEntryRecord(id=allow.id))
    assert not gate.allowed(ALICE, _topic("orders"))


def test_old_acls_are_not_kept_alive_by_the_indexes(gate: Gate, metadata: Metadata) -> None:
    """Issue 24's review: an index per caller kept the ACL mapping it was built from, so
    with ACLs changing often up to 10,000 old mappings stayed alive."""
    callers = [Caller(f"User:u{i}", f"10.0.0.{i}") for i in range(20)]
    for i in range(5):
        metadata.replay(_acl("WRITE", f"t{i}"))
        for who in callers:
            gate.allowed(who, _topic("t0"))
    authenticator = gate.authenticator
    assert authenticator._indexed is metadata.image.acls
    assert len(authenticator._indexes) == len(callers)
    metadata.replay(_acl("WRITE", "t9"))
    gate.allowed(ALICE, _topic("t9"))
    assert len(authenticator._indexes) == 1  # the old mapping's indexes are gone


_names = st.sampled_from(["orders", "orders-eu", "logs", "*", "o"])
_acls = st.builds(
    lambda op, name, principal, pattern, permission: _acl(
        op,
        "orders" if pattern == "PREFIXED" and name == "*" else name,
        principal=principal,
        pattern=pattern,
        permission=permission,
    ),
    st.sampled_from(["READ", "WRITE", "ALL", "DESCRIBE"]),
    _names,
    st.sampled_from(["User:alice", "User:bob", "User:*"]),
    st.sampled_from(["LITERAL", "PREFIXED"]),
    st.sampled_from(["ALLOW", "DENY"]),
)


@given(st.lists(_acls, max_size=8), _names, st.sampled_from(list(Operation)))
def test_the_indexed_authorizer_answers_as_a_scan_of_every_acl(
    acls: list[AccessControlEntryRecord], name: str, operation: Operation
) -> None:
    metadata = Metadata()
    metadata.replay(*acls)
    gate = Gate(
        Authenticator(AuthSettings(required=True), SECRET, lambda: metadata.image, ManualClock()),
        ManualClock(),
    )
    action = _topic(name, operation)
    expected = authorize(metadata.image.acls.values(), frozenset(), ALICE.principal, "h", action)
    assert gate.allowed(Caller(ALICE.principal, "h"), action) == expected


# -- audit: one line per refused request --------------------------------------------------


@pytest.fixture
def audit_lines() -> Iterator[list[dict[str, Any]]]:
    with structlog.testing.capture_logs() as captured:
        yield captured


def test_a_request_refused_many_names_is_one_audit_line(
    gate: Gate, audit_lines: list[dict[str, Any]]
) -> None:
    refused = [_topic(f"t{i}") for i in range(AUDITED_NAMES)]
    gate.audit_refused(ALICE, refused, count=150_000, edge="kafka", api="Metadata")
    (line,) = [e for e in audit_lines if e["event"] == "authorization_denied"]
    assert line["count"] == 150_000 and line["names"] == [f"t{i}" for i in range(10)]
    assert line["principal"] == "User:alice" and line["edge"] == "kafka"
    gate.audit_refused(ALICE, [], edge="http")  # nothing refused: nothing written
    assert len([e for e in audit_lines if e["event"] == "authorization_denied"]) == 1


# -- quotas: one set of buckets ----------------------------------------------------------


def test_both_edges_charge_one_bucket(gate: Gate, metadata: Metadata, clock: ManualClock) -> None:
    metadata.replay(ClientQuotaRecord(principal=ALICE.principal, key=PRODUCE, value=1000.0))
    quotas = gate.quotas_of(ALICE)
    assert quotas == {PRODUCE: 1000.0}
    # the HTTP edge spends the whole burst; the Kafka edge's next byte is throttled
    assert gate.throttle_ms(ALICE, quotas, handling_s=0, produced=1000) == 0
    assert gate.throttle_ms(ALICE, quotas, handling_s=0, produced=500) == 501
    clock.advance(1500)
    assert gate.throttle_ms(ALICE, quotas, handling_s=0, produced=500) == 0


def test_nodes_are_never_throttled(gate: Gate, metadata: Metadata) -> None:
    metadata.replay(ClientQuotaRecord(principal=ALICE.principal, key=PRODUCE, value=1.0))
    assert gate.quotas_of(Caller("cluster", "h", is_cluster=True)) is None
    forwarded = Caller(ALICE.principal, ALICE.host, node="broker-2")
    assert gate.quotas_of(forwarded) is None  # counted where it came in


def test_not_ready_is_broker_not_available(metadata: Metadata, clock: ManualClock) -> None:
    why: list[str | None] = ["starting"]
    authenticator = Authenticator(AuthSettings(), SECRET, lambda: metadata.image, clock)
    gate = Gate(authenticator, clock, ready=lambda: why[0])
    with pytest.raises(KraftliteError) as refused:
        gate.check_ready()
    assert refused.value.code is ErrorCode.BROKER_NOT_AVAILABLE
    why[0] = None
    gate.check_ready()


# -- producer ids --------------------------------------------------------------------------


def _may_init(gate: Gate, who: Caller = ALICE) -> bool:
    try:
        gate.check_init_producer(who, edge="kafka", request="InitProducerId")
    except KraftliteError as exc:
        assert exc.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return False
    return True


def test_producer_ids_only_for_writers(gate: Gate, metadata: Metadata) -> None:
    assert not _may_init(gate)
    metadata.replay(_acl("READ", "orders"))
    assert not _may_init(gate)  # reading is not writing
    write = _acl("WRITE", "orders-", pattern="PREFIXED")
    metadata.replay(write)
    assert _may_init(gate)
    metadata.replay(_acl("WRITE", "orders-", permission="DENY"))
    assert not _may_init(gate)  # the DENY of the name the ALLOW grants takes it back
    metadata.replay(_acl("IDEMPOTENT_WRITE", "", resource_type="CLUSTER"))
    assert _may_init(gate)
    assert _may_init(gate, Caller("User:admin", "h"))  # a super user


def test_producer_ids_for_anyone_without_auth_required(clock: ManualClock) -> None:
    image = MetadataImage.EMPTY
    gate = Gate(Authenticator(AuthSettings(), SECRET, lambda: image, clock), clock)
    assert _may_init(gate, Caller("User:ANONYMOUS", "h"))


def test_a_producer_id_belongs_to_its_principal_alone() -> None:
    key = b"k" * 32
    given_ids = {producer_ids.mint(key, "User:alice", nonce) for nonce in range(1000)}
    assert len(given_ids) == 1000
    for producer_id in given_ids:
        assert 0 <= producer_id < 2**63
        assert producer_ids.belongs_to(key, producer_id, "User:alice")
        assert not producer_ids.belongs_to(b"x" * 32, producer_id, "User:alice")
    # another principal's tag matches with odds of 2**-23: of 1,000 ids, none or one
    assert sum(producer_ids.belongs_to(key, p, "User:mallory") for p in given_ids) <= 1
    for bad in (-1, 2**63, 2**64):
        assert not producer_ids.belongs_to(key, bad, "User:alice")


# -- password guesses cost their address (authenticator.py rule 5) ---------------------------


async def test_failed_logins_spend_their_address_budget(
    metadata: Metadata, clock: ManualClock
) -> None:
    from kraftlite.security import scram  # noqa: PLC0415
    from kraftlite.security.authenticator import (  # noqa: PLC0415
        FAILED_ITERATIONS_BURST,
        FAILED_ITERATIONS_PER_S,
    )

    strong = scram.make_credential(
        "strong", "right", scram.DEFAULT_MECHANISM, b"s" * 32, scram.MAX_ITERATIONS
    )
    metadata.replay(strong)
    authenticator = Authenticator(
        AuthSettings(required=True), SECRET, lambda: metadata.image, clock
    )
    guesses = FAILED_ITERATIONS_BURST // scram.MAX_ITERATIONS
    for _ in range(guesses + 1):  # the burst, then one into debt
        with pytest.raises(KraftliteError) as failed:
            await authenticator.check_password("strong", "wrong", "10.0.0.9")
        assert failed.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED
    # spent: refused at once, with no PBKDF2, even the right password
    with pytest.raises(KraftliteError) as refused:
        await authenticator.check_password("strong", "right", "10.0.0.9")
    assert refused.value.code is ErrorCode.THROTTLING_QUOTA_EXCEEDED
    # another address is not held back, and the spent one refills with time
    assert (await authenticator.check_password("strong", "right", "10.0.0.8"))[0] == ("User:strong")
    clock.advance(1000 * 2 * scram.MAX_ITERATIONS // FAILED_ITERATIONS_PER_S)
    assert (await authenticator.check_password("strong", "right", "10.0.0.9"))[0] == ("User:strong")


async def test_a_node_that_knows_no_users_yet_charges_no_one(clock: ManualClock) -> None:
    """A starting broker's image has no users: every login fails there, and must not
    spend the client's budget (a review finding: a client retrying a starting broker
    locked itself out)."""
    from kraftlite.security import scram  # noqa: PLC0415
    from kraftlite.security.authenticator import FAILED_ITERATIONS_BURST  # noqa: PLC0415

    empty = MetadataImage.EMPTY
    authenticator = Authenticator(AuthSettings(required=True), SECRET, lambda: empty, clock)
    for _ in range(FAILED_ITERATIONS_BURST // scram.MIN_ITERATIONS + 5):
        with pytest.raises(KraftliteError) as failed:
            await authenticator.check_password("alice", "right", "10.0.0.9")
        assert failed.value.code is ErrorCode.SASL_AUTHENTICATION_FAILED

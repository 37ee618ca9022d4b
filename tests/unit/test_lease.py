"""The leadership lease (kraftlite/broker/lease.py): when a broker may act as a leader."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kraftlite.broker.lease import MAX_WAITING, LeadershipLease, lease_margin_ms

SESSION = 9000
MARGIN = lease_margin_ms(SESSION)


def test_no_lease_before_the_first_answer() -> None:
    assert not LeadershipLease().valid(0)


def test_an_answer_at_our_version_runs_from_when_it_was_sent() -> None:
    lease = LeadershipLease(applied_version=10)
    lease.answered(sent_ms=1000, controller_version=10, timeout_ms=SESSION)
    assert lease.valid(1000 + SESSION - MARGIN - 1)
    # by sent + session the controller may have fenced us: we stopped before it could
    assert not lease.valid(1000 + SESSION - MARGIN)
    assert not lease.valid(1000 + SESSION)


def test_an_answer_from_ahead_of_our_metadata_counts_only_once_we_reach_it() -> None:
    """Fenced and replaced while cut off: the first answer after the cut comes from metadata
    that no longer makes us leader, while our image still does. It must not renew anything
    until we hold that metadata."""
    lease = LeadershipLease(applied_version=10)
    lease.answered(sent_ms=0, controller_version=10, timeout_ms=SESSION)
    lease.answered(sent_ms=20_000, controller_version=14, timeout_ms=SESSION)
    assert not lease.valid(20_001)
    assert lease.waiting_for_version() == 14
    lease.applied(13)
    assert not lease.valid(20_001)
    lease.applied(14)
    assert lease.valid(20_001)
    assert lease.waiting_for_version() is None


def test_an_older_answer_still_counts_while_a_newer_one_waits() -> None:
    lease = LeadershipLease(applied_version=5)
    lease.answered(sent_ms=0, controller_version=5, timeout_ms=SESSION)
    lease.answered(sent_ms=2000, controller_version=6, timeout_ms=SESSION)
    assert lease.valid(SESSION - MARGIN - 1)
    assert not lease.valid(SESSION - MARGIN)


def test_a_late_answer_to_an_old_heartbeat_never_shortens_the_lease() -> None:
    lease = LeadershipLease(applied_version=1)
    lease.answered(sent_ms=5000, controller_version=1, timeout_ms=SESSION)
    lease.answered(sent_ms=1000, controller_version=1, timeout_ms=SESSION)
    assert lease.valid(5000 + SESSION - MARGIN - 1)


def test_answers_waiting_for_metadata_are_bounded() -> None:
    lease = LeadershipLease(applied_version=0)
    for sent in range(1000):
        lease.answered(sent_ms=sent, controller_version=1 + sent, timeout_ms=SESSION)
    assert len(lease._waiting) == MAX_WAITING
    lease.applied(1000)
    assert lease.valid(999 + SESSION - MARGIN - 1)  # the newest answer is the one kept


@given(
    st.lists(
        st.tuples(st.integers(0, 100_000), st.integers(0, 20), st.integers(0, 20)),
        max_size=30,
    ),
    st.integers(1000, 30_000),
)
def test_the_lease_never_outlives_a_session_from_a_counted_answer(
    events: list[tuple[int, int, int]], session: int
) -> None:
    """The invariant the safety argument needs: whenever the lease holds, some answer sent
    less than a session ago was given at a version our metadata has reached."""
    lease = LeadershipLease()
    answers: list[tuple[int, int]] = []
    applied = -1
    for sent, version, apply in events:
        lease.answered(sent, version, session)
        answers.append((sent, version))
        applied = max(applied, apply)
        lease.applied(apply)
        for now in (sent, sent + session // 2, sent + session):
            if lease.valid(now):
                assert any(s > now - session and v <= applied for s, v in answers)


def test_a_revoked_lease_holds_nothing_until_answered_again() -> None:
    lease = LeadershipLease(applied_version=3)
    lease.answered(sent_ms=0, controller_version=3, timeout_ms=SESSION)
    lease.answered(sent_ms=100, controller_version=9, timeout_ms=SESSION)
    assert lease.waiting_since() == 100
    lease.revoke()
    assert not lease.valid(1) and lease.waiting_since() is None
    lease.applied(9)
    assert not lease.valid(1)  # the answer waiting for 9 was for the old registration
    lease.answered(sent_ms=200, controller_version=9, timeout_ms=SESSION)
    assert lease.valid(201)


def test_an_answer_waiting_for_metadata_keeps_its_own_timeout() -> None:
    """Each answer names its lease timeout: one counted later (rule 2) runs by its own, not
    by whatever the latest answer said."""
    lease = LeadershipLease(applied_version=1)
    lease.answered(sent_ms=0, controller_version=5, timeout_ms=2_500)  # waits for version 5
    lease.answered(sent_ms=100, controller_version=9, timeout_ms=9_000)  # waits for 9
    lease.applied(5)
    assert lease.valid(2_500 - lease_margin_ms(2_500) - 1)
    assert not lease.valid(2_500 - lease_margin_ms(2_500))


def test_the_margin_is_half_a_second_at_least() -> None:
    assert lease_margin_ms(2_500) == 500
    assert lease_margin_ms(9_000) == 900

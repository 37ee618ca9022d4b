"""The leader's replica state: caught-up tracking, ISR shrink/expand, the high watermark."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kraftlite.broker import replica_state as rs

LAG = 1_000


def leader(isr: tuple[int, ...] = (1, 2, 3), leo: int = 10, hw: int = 10) -> rs.LeaderState:
    return rs.become_leader(1, 5, 7, (1, 2, 3), isr, leo, hw, now_ms=0)


def test_hw_waits_for_every_isr_member_it_has_not_heard_from() -> None:
    state = leader(leo=10, hw=4)
    assert rs.high_watermark(state, 10) == 4  # followers' LEO unknown: HW holds
    state = rs.record_fetch(state, 2, 10, 10, now_ms=1)
    assert rs.high_watermark(state, 10) == 4
    state = rs.record_fetch(state, 3, 8, 10, now_ms=1)
    assert rs.high_watermark(state, 10) == 8


def test_hw_never_moves_backwards() -> None:
    state = leader(isr=(1, 2), leo=10, hw=10)
    state = rs.record_fetch(state, 2, 3, 10, now_ms=1)  # a truncated follower asks for less
    assert rs.high_watermark(state, 10) == 10


def test_a_pending_shrink_still_counts_the_old_isr() -> None:
    state = leader(leo=20, hw=10)
    state = rs.record_fetch(state, 2, 20, 20, now_ms=1)
    state = rs.record_fetch(state, 3, 12, 20, now_ms=1)
    state = rs.propose_isr(state, (1, 2))
    assert rs.high_watermark(state, 20) == 12  # 3 still counts until the shrink commits
    state = rs.with_registration(state, 8, (1, 2, 3), (1, 2))
    assert state.pending_isr is None and rs.high_watermark(state, 20) == 20


def test_a_pending_expand_counts_the_new_member_at_once() -> None:
    state = leader(isr=(1, 2), leo=20, hw=15)
    state = rs.record_fetch(state, 2, 20, 20, now_ms=1)
    state = rs.record_fetch(state, 3, 16, 20, now_ms=1)
    state = rs.propose_isr(state, (1, 2, 3))
    assert rs.high_watermark(state, 20) == 16


def test_shrink_after_the_lag_time_and_not_before() -> None:
    state = leader(leo=10, hw=10)
    state = rs.record_fetch(state, 2, 10, 10, now_ms=100)
    state = rs.record_fetch(state, 3, 10, 10, now_ms=100)
    # 3 stops fetching; the leader's log grows
    state = rs.record_fetch(state, 2, 30, 30, now_ms=LAG + 50)
    assert rs.isr_change(state, 30, LAG + 100, LAG) is None
    assert rs.isr_change(state, 30, LAG + 101, LAG) == (1, 2)


def test_a_follower_fetching_behind_a_moving_leader_counts_as_caught_up_at_its_last_fetch() -> None:
    state = leader(isr=(1, 2), leo=10, hw=10)
    now = 0
    leo = 10
    for _ in range(20):  # it always asks for what the leader had at its previous fetch
        now += 400
        state = rs.record_fetch(state, 2, leo, leo + 5, now_ms=now)
        leo += 5
    assert rs.isr_change(state, leo, now + 100, LAG) is None


def test_expand_needs_the_hw_and_the_epoch_start() -> None:
    state = rs.become_leader(1, 5, 7, (1, 2, 3), (1, 2), 50, 40, now_ms=0)
    state = rs.record_fetch(state, 3, 45, 50, now_ms=1)
    assert rs.isr_change(state, 50, 2, LAG) is None  # above HW but below the epoch start
    state = rs.record_fetch(state, 3, 50, 50, now_ms=3)
    assert rs.isr_change(state, 50, 4, LAG) == (1, 2, 3)


def test_expansion_is_decided_at_the_fetch_that_reaches_the_hw() -> None:
    """Found by the chaos suite (unclean election, then steady acks=all load on an ISR of
    the leader alone, whose HW is its LEO): decided later, against an HW the next append
    has already moved, the follower never qualified and never rejoined."""
    state = rs.become_leader(1, 5, 7, (1, 2, 3), (1,), 50, 50, now_ms=0)
    state = rs.record_fetch(state, 2, 49, 50, now_ms=1)
    assert rs.expansion_at_fetch(state, 2, 5) is None  # below the HW
    state = rs.record_fetch(state, 2, 50, 50, now_ms=2)
    state = rs.advance_high_watermark(state, 50)
    assert rs.expansion_at_fetch(state, 2, 5) == (1, 2)
    assert rs.expansion_at_fetch(rs.propose_isr(state, (1, 3)), 2, 5) is None  # one at a time
    # Once the leader appends, the same fetch no longer qualifies: hence decide at the fetch.
    assert rs.isr_change(rs.advance_high_watermark(state, 55), 55, 3, LAG) is None


def test_expansion_at_fetch_needs_the_epoch_start_and_a_replica_outside_the_isr() -> None:
    state = rs.become_leader(1, 5, 7, (1, 2, 3), (1, 2), 50, 40, now_ms=0)
    state = rs.record_fetch(state, 3, 45, 50, now_ms=1)
    assert rs.expansion_at_fetch(state, 3, 5) is None  # above the HW, below the epoch start
    state = rs.record_fetch(state, 3, 50, 50, now_ms=2)
    assert rs.expansion_at_fetch(state, 3, 5) == (1, 2, 3)
    state = rs.record_fetch(state, 2, 50, 50, now_ms=2)
    assert rs.expansion_at_fetch(state, 2, 5) is None  # already in the ISR
    assert rs.expansion_at_fetch(state, 4, 5) is None  # not a replica


def test_the_low_watermark_is_the_smallest_log_start_of_every_replica_that_could_lead() -> None:
    state = rs.become_leader(1, 5, 7, (1, 2, 3), (1, 2), 50, 50, now_ms=0)
    assert rs.low_watermark(state, 20) == rs.UNKNOWN_OFFSET  # no follower has said yet
    state = rs.record_fetch(state, 2, 50, 50, now_ms=1, log_start=20)
    state = rs.record_fetch(state, 3, 30, 50, now_ms=1, log_start=5)
    assert rs.low_watermark(state, 20) == 5  # 3 is live, though out of the ISR
    assert rs.low_watermark(state, 20, eligible=lambda b: b != 3) == 20  # 3 is down
    down_in_isr = rs.become_leader(1, 5, 7, (1, 2, 3), (1, 2, 3), 50, 50, now_ms=0)
    down_in_isr = rs.record_fetch(down_in_isr, 2, 50, 50, now_ms=1, log_start=20)
    # an ISR member counts until the ISR shrinks, live or not: it could lead
    assert rs.low_watermark(down_in_isr, 20, eligible=lambda b: b != 3) == rs.UNKNOWN_OFFSET
    older = rs.record_fetch(state, 3, 30, 50, now_ms=2)  # a broker that does not say
    assert rs.low_watermark(older, 20) == rs.UNKNOWN_OFFSET


def test_a_replica_joins_the_isr_only_past_the_records_deleted() -> None:
    state = rs.become_leader(1, 5, 7, (1, 2, 3), (1, 2), 50, 50, now_ms=0, log_start_offset=10)
    state = rs.records_deleted(state, 40)
    assert rs.records_deleted(state, 30).deleted_to == 40  # never backwards
    state = rs.record_fetch(state, 3, 50, 50, now_ms=1, log_start=10)  # caught up, but holds
    assert rs.expansion_at_fetch(state, 3, 2) is None  # records deleted before 40
    assert rs.isr_change(state, 50, 2, LAG) is None
    state = rs.record_fetch(state, 3, 50, 50, now_ms=3, log_start=40)
    assert rs.expansion_at_fetch(state, 3, 4) == (1, 2, 3)
    older = rs.record_fetch(state, 3, 50, 50, now_ms=3)  # an older broker says nothing:
    assert rs.expansion_at_fetch(older, 3, 4) is None  # it may hold what was deleted
    untouched = rs.become_leader(1, 5, 7, (1, 2, 3), (1, 2), 50, 50, now_ms=0)
    untouched = rs.record_fetch(untouched, 3, 50, 50, now_ms=1)
    assert rs.expansion_at_fetch(untouched, 3, 2) == (1, 2, 3)  # nothing deleted: as before


def test_one_change_in_flight_and_a_refusal_clears_it() -> None:
    state = leader(isr=(1, 2), leo=10, hw=10)
    state = rs.record_fetch(state, 3, 10, 10, now_ms=1)
    proposed = rs.isr_change(state, 10, 2, LAG)
    assert proposed == (1, 2, 3)
    state = rs.propose_isr(state, proposed)
    assert rs.isr_change(state, 10, 3, LAG) is None
    state = rs.isr_change_failed(state, now_ms=3)
    assert rs.isr_change(state, 10, 4, LAG) == (1, 2, 3)


def test_after_a_refusal_fetches_do_not_propose_an_expansion_for_a_while() -> None:
    """A fenced follower still fetching qualifies at every fetch; the controller refuses
    each time (INELIGIBLE_REPLICA). Proposed at every fetch, the refusals would flood the
    controller and keep a due shrink waiting."""
    state = leader(isr=(1, 2), leo=10, hw=10)
    state = rs.record_fetch(state, 3, 10, 10, now_ms=1)
    assert rs.expansion_at_fetch(state, 3, 1) == (1, 2, 3)
    state = rs.isr_change_failed(rs.propose_isr(state, (1, 2, 3)), now_ms=2)
    backoff = rs.REFUSED_EXPANSION_BACKOFF_MS
    assert rs.expansion_at_fetch(state, 3, 2 + backoff - 1) is None
    assert rs.expansion_at_fetch(state, 3, 2 + backoff) == (1, 2, 3)


def test_stale_registrations_are_ignored_and_min_isr_uses_the_committed_isr() -> None:
    state = leader(isr=(1, 2, 3))
    assert rs.with_registration(state, 7, (1, 2, 3), (1,)) is state
    state = rs.propose_isr(state, (1,))
    assert rs.enough_replicas(state, 2)  # the shrink is not committed yet
    state = rs.with_registration(state, 8, (1, 2, 3), (1,))
    assert not rs.enough_replicas(state, 2)


def test_unknown_followers_are_ignored() -> None:
    state = leader()
    assert rs.record_fetch(state, 9, 10, 10, now_ms=1) is state


events = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 5)),
        st.tuples(st.just("fetch"), st.sampled_from([2, 3]), st.integers(0, 60)),
        st.tuples(st.just("tick"), st.integers(0, 700)),
        st.tuples(st.just("commit")),
        st.tuples(st.just("refuse")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events)
def test_invariants_under_random_histories(history: list[tuple]) -> None:
    """Within one leader epoch (followers' logs only grow): the HW never decreases, never
    passes the leader's LEO, and never passes what a member of the committed ISR holds, which
    is what makes an acks=all acknowledgement safe. The ISR always holds the leader.
    """
    state = leader(leo=10, hw=10)
    leo, now, epoch = 10, 0, 7
    held = {2: 10, 3: 10}  # what each follower really holds
    for event in history:
        match event:
            case ("append", n):
                leo += n
            case ("fetch", follower, ask):
                held[follower] = max(held[follower], min(ask, leo))
                state = rs.record_fetch(state, follower, held[follower], leo, now)
                state = rs.advance_high_watermark(state, leo)
                if expansion := rs.expansion_at_fetch(state, follower, now):
                    state = rs.propose_isr(state, expansion)
            case ("tick", dt):
                now += dt
                if state.pending_isr is None and (change := rs.isr_change(state, leo, now, LAG)):
                    state = rs.propose_isr(state, change)
            case ("commit",) if state.pending_isr is not None:
                epoch += 1
                state = rs.with_registration(state, epoch, state.replicas, state.pending_isr)
            case ("refuse",) if state.pending_isr is not None:
                state = rs.isr_change_failed(state, now)
        before = state.high_watermark
        state = rs.advance_high_watermark(state, leo)
        assert before <= state.high_watermark <= leo
        assert 1 in state.isr
        for member in state.maximal_isr:  # a pending member too: it may be elected
            if member != 1:
                assert held[member] >= state.high_watermark, (member, held, state)


def test_followers_get_a_fresh_lag_allowance_after_the_leaders_lease_lapsed() -> None:
    """Their fetches were refused while the leader's lease was lapsed: shrinking them for
    that would punish them for the leader's absence."""
    state = rs.become_leader(1, 0, 0, (1, 2, 3), (1, 2, 3), 10, 10, now_ms=0)
    assert rs.isr_change(state, 10, now_ms=5_000, max_lag_ms=2_000) == (1,)
    resumed = rs.resume_after_lapse(state, now_ms=5_000)
    assert rs.isr_change(resumed, 10, now_ms=5_000, max_lag_ms=2_000) is None
    assert rs.isr_change(resumed, 10, now_ms=7_001, max_lag_ms=2_000) == (1,)


def test_the_periodic_check_proposes_only_replicas_that_fetched_recently() -> None:
    """A broker that died caught up is still live in metadata while its fence commits in
    batches; the leader must not propose it back (Kafka expands only at fetches)."""
    state = rs.become_leader(1, 0, 0, (1, 2, 3), (1, 2), 10, 10, now_ms=0)
    state = rs.record_fetch(state, 3, 10, 10, now_ms=100)  # 3 reached the HW, then died
    assert rs.isr_change(state, 10, 100 + rs.JOIN_FETCH_WINDOW_MS, 10**6) == (1, 2, 3)
    assert rs.isr_change(state, 10, 101 + rs.JOIN_FETCH_WINDOW_MS, 10**6) is None
    # an idle partition is fetched in every round of the follower's session: that counts
    later = 10_000 + rs.JOIN_FETCH_WINDOW_MS
    assert rs.isr_change(state, 10, later, 10**6, last_rounds={3: 10_000}) == (1, 2, 3)

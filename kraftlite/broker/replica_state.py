"""A partition leader's view of its replicas: follower progress, ISR changes, high watermark.

Pure: time and the leader's log end offset are arguments. Kafka's rules (Partition.scala):

1. A follower's log end offset (LEO) is the offset it asks for next. It is *caught up* at
   a fetch that asks for the leader's LEO, and also at the previous fetch's time when it now
   asks for at least the LEO the leader had then (Kafka's `updateFetchState`).
2. The high watermark (HW) is the smallest LEO over the *maximal* ISR: the committed ISR
   plus members a pending expansion adds (KIP-497: while a shrink is pending the old, larger
   ISR still counts). It never moves backwards and a follower whose LEO the leader has not
   heard yet holds it still.
3. One ISR change in flight at a time, through the controller (AlterPartition); the leader
   acts on the new ISR only once committed. Shrink: members not caught up within
   `replica.lag.time.max.ms`. Expand: a replica whose LEO has reached both the HW and the
   start of this leader epoch (so it holds everything this leader acknowledged), decided at
   the fetch that reports that LEO (`expansion_at_fetch`, as Kafka's maybeExpandIsr), in the
   same step as the fetch is recorded: decided later, against an HW that appends have moved
   meanwhile, a follower can chase the HW forever under steady load and never rejoin.
4. acks=all needs the committed ISR to have at least `min.insync.replicas` members, both
   before the append and when the HW passes the records.
5. Fetch sessions (fetch_sessions.py) do not name an idle partition in every round; each
   round still fetches it, at the position the session holds. So when the leader appends to
   a partition, a follower whose LEO was the leader's end is credited with being caught up
   at its session's last round (`sessions_fetched`), as if that round had named it.
6. A follower's fetch also says where its log starts. The *low watermark* is the smallest
   log start over the leader, the maximal ISR and every other replica the leader's metadata
   says is live (Kafka's lowWatermarkIfLeader): once it has reached a DeleteRecords' offset,
   no replica that could lead serves below it. A replica joins the ISR only with its log
   start at or past `deleted_to` (the last DeleteRecords of this leader, or the log start
   it took leadership with), so a replica that was down meanwhile cannot lead with records
   a DeleteRecords removed. A follower of an older version reports no log start
   (UNKNOWN_OFFSET): it holds the low watermark (DeleteRecords times out until it is
   upgraded), and it joins the ISR only of a log nothing was deleted from (its own
   adoption of a log start keeps whole batches, so it may still hold deleted records).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

UNKNOWN_OFFSET = -1
# Which replicas may join an ISR: the leader's metadata says they are live (Kafka's
# isReplicaIsrEligible). A fenced broker (one shutting down, or cut off, that still fetches
# for a moment) is not proposed: the controller would refuse it, and the pending expansion
# would hold the high watermark on its stale log end meanwhile.
Eligible = Callable[[int], bool]


def anyone(_: int) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class FollowerProgress:
    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = 0
    log_start_offset: int = UNKNOWN_OFFSET  # rule 6: what its last fetch said

    def fetched(
        self, fetch_offset: int, leader_end: int, now_ms: int, log_start: int = UNKNOWN_OFFSET
    ) -> FollowerProgress:
        caught_up = self.last_caught_up_ms
        if fetch_offset >= leader_end:
            caught_up = max(caught_up, now_ms)
        elif fetch_offset >= self.leader_end_at_last_fetch:
            caught_up = max(caught_up, self.last_fetch_ms)
        return FollowerProgress(fetch_offset, caught_up, now_ms, leader_end, log_start)

    def is_caught_up(self, leader_end: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_end or now_ms - self.last_caught_up_ms <= max_lag_ms


@dataclass(frozen=True, slots=True)
class LeaderState:
    broker_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]  # committed by the controller
    epoch_start_offset: int  # the leader's LEO when it took this epoch
    high_watermark: int
    followers: Mapping[int, FollowerProgress] = field(default_factory=dict)
    pending_isr: tuple[int, ...] | None = None  # proposed, not yet committed
    # After a refused change, no expansion at a fetch before this (a fenced follower that
    # keeps fetching would otherwise be proposed, and refused, at every fetch).
    fetch_expansion_after_ms: int = 0
    deleted_to: int = 0  # rule 6

    @property
    def maximal_isr(self) -> frozenset[int]:
        return frozenset(self.isr) | frozenset(self.pending_isr or ())


def become_leader(  # noqa: PLR0917 - the registration's fields plus the log's state
    broker_id: int,
    leader_epoch: int,
    partition_epoch: int,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    log_end_offset: int,
    high_watermark: int,
    now_ms: int,
    log_start_offset: int = 0,
) -> LeaderState:
    """A fresh leader: followers start with an unknown LEO but a full lag allowance, so the
    ISR the controller gave is not shrunk before anyone could fetch.
    """
    followers = {
        b: FollowerProgress(last_caught_up_ms=now_ms, last_fetch_ms=now_ms)
        for b in replicas
        if b != broker_id
    }
    return LeaderState(
        broker_id,
        leader_epoch,
        partition_epoch,
        replicas,
        isr,
        log_end_offset,
        min(high_watermark, log_end_offset),
        followers,
        deleted_to=log_start_offset,
    )


def with_registration(
    state: LeaderState, partition_epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...]
) -> LeaderState:
    """A committed change in this leader epoch (an ISR change, ours or the controller's)."""
    if partition_epoch <= state.partition_epoch:
        return state
    followers = dict(state.followers)
    for b in replicas:
        if b != state.broker_id and b not in followers:
            followers[b] = FollowerProgress()
    return replace(  # whatever was pending is now either this or refused by its stale epoch
        state,
        partition_epoch=partition_epoch,
        replicas=replicas,
        isr=isr,
        followers={b: p for b, p in followers.items() if b in replicas},
        pending_isr=None,
    )


def record_fetch(  # noqa: PLR0917 - the fetch's facts
    state: LeaderState,
    follower_id: int,
    fetch_offset: int,
    leader_end: int,
    now_ms: int,
    log_start: int = UNKNOWN_OFFSET,
) -> LeaderState:
    """A follower asked for `fetch_offset`: its LEO; its log start is `log_start` (rule 6).
    Unknown replicas are ignored."""
    progress = state.followers.get(follower_id)
    if progress is None:
        return state
    followers = dict(state.followers)
    followers[follower_id] = progress.fetched(fetch_offset, leader_end, now_ms, log_start)
    return replace(state, followers=followers)


def low_watermark(state: LeaderState, leader_log_start: int, eligible: Eligible = anyone) -> int:
    """Rule 6: the smallest log start over the leader, the maximal ISR and the live
    replicas (UNKNOWN_OFFSET while one has not said)."""
    low = leader_log_start
    members = state.maximal_isr
    for replica in state.replicas:
        if replica == state.broker_id or (replica not in members and not eligible(replica)):
            continue
        progress = state.followers.get(replica)
        low = min(low, UNKNOWN_OFFSET if progress is None else progress.log_start_offset)
    return low


def records_deleted(state: LeaderState, log_start: int) -> LeaderState:
    """Rule 6: a DeleteRecords moved this leader's log start to `log_start`."""
    if log_start <= state.deleted_to:
        return state
    return replace(state, deleted_to=log_start)


def sessions_fetched(
    state: LeaderState, leader_end: int, last_round_ms: Mapping[int, int]
) -> LeaderState:
    """Rule 5, just before an append past `leader_end`: followers at the leader's end whose
    session last fetched at `last_round_ms[follower]` were caught up then.
    """
    followers = dict(state.followers)
    changed = False
    for follower, at in last_round_ms.items():
        progress = followers.get(follower)
        if progress is None or progress.log_end_offset != leader_end:
            continue
        if at > progress.last_caught_up_ms:
            followers[follower] = replace(progress, last_caught_up_ms=at, last_fetch_ms=at)
            changed = True
    return replace(state, followers=followers) if changed else state


def isr_settled(state: LeaderState, leader_end: int, eligible: Eligible = anyone) -> bool:
    """No ISR change can become due until something happens to the partition (an append,
    a fetch, a registration): no change pending, every ISR member at the leader's end (so
    never lagging), and no replica able to join.
    """
    return (
        state.pending_isr is None
        and all(
            state.followers.get(m, FollowerProgress()).log_end_offset == leader_end
            for m in state.isr
            if m != state.broker_id
        )
        and not any(_may_join(state, b, eligible) for b in state.replicas)
    )


def high_watermark(state: LeaderState, leader_end: int) -> int:
    """Rule 2: the smallest LEO over the maximal ISR; never below the current HW."""
    candidate = leader_end
    for member in state.maximal_isr:
        if member == state.broker_id:
            continue
        progress = state.followers.get(member)
        if progress is None or progress.log_end_offset == UNKNOWN_OFFSET:
            return state.high_watermark
        candidate = min(candidate, progress.log_end_offset)
    return max(state.high_watermark, candidate)


def advance_high_watermark(state: LeaderState, leader_end: int) -> LeaderState:
    hw = high_watermark(state, leader_end)
    return state if hw == state.high_watermark else replace(state, high_watermark=hw)


def isr_change(
    state: LeaderState,
    leader_end: int,
    now_ms: int,
    max_lag_ms: int,
    eligible: Eligible = anyone,
    *,
    last_rounds: Mapping[int, int] | None = None,
) -> tuple[int, ...] | None:
    """Rule 3: the ISR to propose now, or None. Shrinks come before expansions."""
    if state.pending_isr is not None:
        return None
    lagging = {
        member
        for member in state.isr
        if member != state.broker_id
        and not state.followers.get(member, FollowerProgress()).is_caught_up(
            leader_end, now_ms, max_lag_ms
        )
    }
    if lagging:
        return tuple(b for b in state.isr if b not in lagging)
    joining = [
        b
        for b in state.replicas
        if _may_join(state, b, eligible)
        and now_ms - max(state.followers[b].last_fetch_ms, (last_rounds or {}).get(b, 0))
        <= JOIN_FETCH_WINDOW_MS
    ]
    if joining:
        return tuple(b for b in state.replicas if b in state.isr or b in joining)
    return None


def expansion_at_fetch(
    state: LeaderState, follower_id: int, now_ms: int, eligible: Eligible = anyone
) -> tuple[int, ...] | None:
    """Rule 3's expansion, for the follower whose fetch was just recorded (and the HW
    advanced): the ISR to propose with it added, or None. Not while a refusal is recent:
    then the periodic check (`isr_change`) proposes it, at its own pace."""
    if state.pending_isr is not None or now_ms < state.fetch_expansion_after_ms:
        return None
    if not _may_join(state, follower_id, eligible):
        return None
    return tuple(b for b in state.replicas if b in state.isr or b == follower_id)


def _may_join(state: LeaderState, replica: int, eligible: Eligible) -> bool:
    progress = state.followers.get(replica)
    return (
        replica not in state.isr
        and eligible(replica)
        and progress is not None
        and progress.log_end_offset >= max(state.high_watermark, state.epoch_start_offset)
        # rule 6: an older follower, which says nothing of its log start, only where
        # nothing was ever deleted from this log
        and (
            state.deleted_to == 0
            if progress.log_start_offset == UNKNOWN_OFFSET
            else progress.log_start_offset >= state.deleted_to
        )
    )


def resume_after_lapse(state: LeaderState, now_ms: int) -> LeaderState:
    """The leader served nothing for a while (its lease lapsed, broker/lease.py): its
    followers' fetches were refused meanwhile, so each gets a full lag allowance from now,
    as under a new leader, rather than being shrunk out for the leader's own absence."""
    followers = {
        b: replace(p, last_caught_up_ms=max(p.last_caught_up_ms, now_ms))
        for b, p in state.followers.items()
    }
    return replace(state, followers=followers)


def propose_isr(state: LeaderState, isr: tuple[int, ...]) -> LeaderState:
    return replace(state, pending_isr=isr)


def isr_change_failed(state: LeaderState, now_ms: int) -> LeaderState:
    """The controller refused: propose again later from fresh facts, and not at every
    fetch for a while (the refused follower may be fenced yet still fetching)."""
    return replace(
        state, pending_isr=None, fetch_expansion_after_ms=now_ms + REFUSED_EXPANSION_BACKOFF_MS
    )


REFUSED_EXPANSION_BACKOFF_MS = 1000
# The periodic check proposes a replica for the ISR only if it fetched this recently, by
# name or in a round of its fetch session (rule 5; Kafka expands only at fetches): a broker
# that died caught up, and is still live in metadata while its fence commits in batches, is
# not proposed back into the ISRs it is leaving.
JOIN_FETCH_WINDOW_MS = 3000


def enough_replicas(state: LeaderState, min_insync_replicas: int) -> bool:
    """Rule 4."""
    return len(state.isr) >= min_insync_replicas

"""QuorumController rules that need a Raft log which fails on cue.

The real log (pysyncobj) is exercised in tests/integration; here a scripted stand-in makes
the rare interleavings (an unknown outcome followed by a lost leadership, a deposed
controller) happen every time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from kraftlite.controller import decisions, liveness, quorum_controller
from kraftlite.controller.heartbeats import BrokerSessions
from kraftlite.controller.quorum_controller import ControllerSettings, QuorumController
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage, StaleBatchError, apply_batch
from kraftlite.metadata.records import FenceBrokerRecord, RecordBatch
from kraftlite.raft.pysyncobj_log import (
    LEADER_FALLBACK_TIMEOUT_MS,
    LEADERSHIP_CONFIRMATION_MS,
    Outcome,
    ProposeError,
    ProposeResult,
)
from tests.harness.metadata import live_brokers, play


class ScriptedLog:
    """Applies batches like the state machine; `script` decides each proposal's fate."""

    def __init__(self) -> None:
        self.image = MetadataImage.EMPTY
        self.leader = True
        self.term = 1
        self.proposals: list[RecordBatch] = []
        self.script: list[Callable[[], None]] = []
        self.barriers = 0
        self.hold: asyncio.Event | None = None  # set: proposals wait for it (in flight)

    def is_leader(self) -> bool:
        return self.leader

    def voter_addresses(self) -> set[str]:
        return {"a:1"}

    def leader_address(self) -> str | None:
        return "a:1" if self.leader else None

    def status(self) -> dict[str, Any]:
        return {"leader": "a:1" if self.leader else None, "term": self.term}

    async def barrier(self, timeout_s: float) -> int:
        self.barriers += 1
        if not self.leader:
            raise ProposeError("not the Raft leader", maybe_committed=False)
        return self.image.version

    async def propose(self, batch: RecordBatch, timeout_s: float) -> ProposeResult:
        self.proposals.append(batch)
        if self.hold is not None:
            await self.hold.wait()
        if not self.leader:
            raise ProposeError("not the Raft leader", maybe_committed=False)
        if self.script:
            self.script.pop(0)()  # may raise ProposeError
        try:
            self.image = apply_batch(self.image, batch)
        except StaleBatchError:
            return ProposeResult(Outcome.STALE, self.image.version)
        return ProposeResult(Outcome.COMMITTED, self.image.version)


class FixedClock:
    def __init__(self) -> None:
        self.ms = 1_000

    def now_ms(self) -> int:
        return self.ms

    def monotonic_ms(self) -> int:
        return self.ms


def make_controller(**extra: Any) -> tuple[QuorumController, ScriptedLog, FixedClock]:
    metadata_log, clock = ScriptedLog(), FixedClock()
    settings = ControllerSettings(node_id=1, url="http://c1", voters={"a:1": 1}, **extra)
    return QuorumController(settings, metadata_log, clock), metadata_log, clock  # type: ignore[arg-type]


def ten_partitions_led_by_1() -> MetadataImage:
    """Brokers 1-3 live; topic T's ten partitions on (1, 2), led by 1."""
    image = play(live_brokers(1, 2, 3), r.TopicRecord(name="t", topic_id="T"))
    return play(
        image,
        *(
            r.PartitionRecord(topic_id="T", partition=i, replicas=(1, 2), isr=(1, 2), leader=1)
            for i in range(10)
        ),
    )


async def register(controller: QuorumController, broker_id: int) -> int:
    return await controller.register_broker(broker_id, f"inc-{broker_id}", "http://b:9092", None)


async def test_an_unknown_outcome_then_lost_leadership_is_a_timeout_not_a_refusal() -> None:
    controller, metadata_log, _ = make_controller()

    def unknown() -> None:
        raise ProposeError("leader changed", maybe_committed=True)

    def deposed() -> None:
        metadata_log.leader = False
        raise ProposeError("not the leader", maybe_committed=False)

    metadata_log.script = [unknown, deposed]
    controller.settings = ControllerSettings(
        node_id=1, url="http://c1", voters={"a:1": 1}, request_timeout_s=0.3
    )
    with pytest.raises(KraftliteError) as caught:
        await register(controller, 7)
    # The first attempt may have committed, so NOT_CONTROLLER (safe to send elsewhere) would
    # invite a second registration; the client must be told the outcome is unknown.
    assert caught.value.code is ErrorCode.REQUEST_TIMED_OUT


async def test_a_refusal_before_any_unknown_outcome_is_not_controller() -> None:
    controller, metadata_log, _ = make_controller()

    def deposed() -> None:
        metadata_log.leader = False
        raise ProposeError("not the leader", maybe_committed=False)

    metadata_log.script = [deposed]
    with pytest.raises(KraftliteError) as caught:
        await register(controller, 7)
    assert caught.value.code is ErrorCode.NOT_CONTROLLER


async def test_a_controller_deposed_between_attempts_does_not_decide_again() -> None:
    controller, metadata_log, _ = make_controller()
    await register(controller, 1)

    def stale_then_deposed() -> None:
        metadata_log.image = apply_batch(  # someone else committed first
            metadata_log.image,
            RecordBatch(
                metadata_log.image.version,
                decisions.register_broker(
                    metadata_log.image, 2, "x", "http://b2:9092", None
                ).records,
            ),
        )
        metadata_log.leader = False

    metadata_log.script = [stale_then_deposed]
    with pytest.raises(KraftliteError) as caught:
        await register(controller, 3)
    assert caught.value.code is ErrorCode.NOT_CONTROLLER
    assert len(metadata_log.proposals) == 2  # the stale one, and no re-decision after


async def test_heartbeats_from_a_stale_epoch_or_unknown_broker_keep_no_session_alive() -> None:
    controller, _, clock = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()  # the session runs from the takeover (plus the grace)
    clock.ms += 5_000
    for broker_id, broker_epoch in ((1, epoch + 100), (9, 1)):
        with pytest.raises(KraftliteError) as caught:
            await controller.broker_heartbeat(broker_id, broker_epoch, 0, False)
        assert caught.value.code is not ErrorCode.NOT_CONTROLLER
    clock.ms += 5_000 + LEADER_FALLBACK_TIMEOUT_MS
    assert controller.sessions.expired([1], clock.ms, 9_000) == [1]


async def test_the_periodic_task_survives_an_unexpected_error() -> None:
    controller, metadata_log, _ = make_controller()
    controller.settings = ControllerSettings(
        node_id=1, url="http://c1", voters={"a:1": 1}, tick_interval_s=0.01
    )
    calls = 0

    async def broken_barrier(timeout_s: float) -> int:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    metadata_log.barrier = broken_barrier  # type: ignore[method-assign]
    controller.start()
    for _ in range(1000):  # no fixed sleep: a loaded machine may run few ticks in 0.2 s
        if calls > 1:
            break
        await asyncio.sleep(0.01)
    await controller.stop()  # returns cleanly: the task is still alive when cancelled
    assert calls > 1


async def test_a_new_term_gives_every_broker_a_fresh_session() -> None:
    controller, metadata_log, clock = make_controller()
    await register(controller, 1)
    await controller._tick()
    clock.ms += 8_000
    metadata_log.term = 2  # deposed and re-elected between two ticks: sessions are stale
    await controller._tick()
    clock.ms += 8_000
    assert controller.sessions.expired([1], clock.ms, 9_000) == []


async def test_a_new_active_controller_waits_out_its_deposed_predecessor_before_fencing() -> None:
    """lease.py rule 3: a deposed Raft leader may answer heartbeats for up to the fallback
    timeout after the new one took over, so a broker's lease may run that much later."""
    controller, _, clock = make_controller()
    await register(controller, 1)
    await controller._tick()
    takeover = clock.ms
    session = controller.settings.session_timeout_ms
    clock.ms = takeover + session + 1
    assert controller.sessions.expired([1], clock.ms, session) == []
    clock.ms = takeover + LEADER_FALLBACK_TIMEOUT_MS + session + 1
    assert controller.sessions.expired([1], clock.ms, session) == [1]


async def test_heartbeats_wait_for_the_takeover_and_carry_the_metadata_version() -> None:
    """A new leader's image may lag what its predecessor committed (a fencing among it):
    it must not vouch for a broker's leaderships before its barrier."""
    controller, metadata_log, _ = make_controller()
    epoch = await register(controller, 1)
    with pytest.raises(KraftliteError) as caught:  # active, but no takeover barrier yet
        await controller.broker_heartbeat(1, epoch, 0, False)
    assert caught.value.code is ErrorCode.NOT_CONTROLLER
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, 0, False)
    metadata_log.term = 2  # deposed and elected again: a new takeover is due first
    with pytest.raises(KraftliteError) as caught:
        await controller.broker_heartbeat(1, epoch, 0, False)
    assert caught.value.code is ErrorCode.NOT_CONTROLLER
    await controller._tick()
    response, version = await controller.broker_heartbeat(1, epoch, epoch, False)
    assert not response.fenced  # this heartbeat unfenced it: the version is after that
    assert version == metadata_log.image.version
    assert not metadata_log.image.brokers[1].fenced


async def test_a_heartbeat_that_changes_nothing_does_not_queue_behind_a_write() -> None:
    controller, metadata_log, _ = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False)  # unfenced
    async with controller._write_lock:  # a write waiting on Raft holds the lock
        response, version = await asyncio.wait_for(
            controller.broker_heartbeat(1, epoch, epoch, False), 1.0
        )
    assert not response.fenced
    assert version == metadata_log.image.version


def test_reset_keeps_a_contact_newer_than_the_reset() -> None:
    sessions = BrokerSessions()
    sessions.contact(1, 5_000)
    sessions.reset([1, 2], 4_000)
    assert sessions.expired([1, 2], 13_500, 9_000) == [2]


async def test_a_heartbeat_during_its_brokers_fence_is_answered_after_the_fence() -> None:
    """Answered from the image before the fence commits, it would renew a lease the fence is
    about to break: the broker would lead on while its partitions move."""
    controller, metadata_log, clock = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False)  # unfenced
    clock.ms += controller.settings.session_timeout_ms + LEADER_FALLBACK_TIMEOUT_MS + 1
    metadata_log.hold = asyncio.Event()
    tick = asyncio.create_task(controller._tick())  # decides the fence, waits for Raft
    await asyncio.sleep(0.01)
    assert controller._changing(1)
    heartbeat = asyncio.create_task(controller.broker_heartbeat(1, epoch, epoch, False))
    await asyncio.sleep(0.01)
    assert not heartbeat.done()
    metadata_log.hold.set()
    metadata_log.hold = None
    await tick
    response, version = await heartbeat
    fence, unfence = metadata_log.proposals[-2:]  # it waited for the fence, then unfenced
    assert type(fence.records[0]).__name__ == "FenceBrokerRecord"
    assert type(unfence.records[0]).__name__ == "UnfenceBrokerRecord"
    assert version > unfence.expected_version > fence.expected_version
    assert version == metadata_log.image.version and not response.fenced


async def test_a_fence_spares_a_broker_heard_from_while_it_waited_for_the_lock() -> None:
    controller, metadata_log, clock = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False)
    clock.ms += controller.settings.session_timeout_ms + LEADER_FALLBACK_TIMEOUT_MS + 1
    async with controller._write_lock:  # a slow write ahead of the fence
        tick = asyncio.create_task(controller._tick())
        await asyncio.sleep(0.01)
        await controller.broker_heartbeat(1, epoch, epoch, False)  # answered meanwhile
    await tick
    assert not metadata_log.image.brokers[1].fenced


async def test_heartbeats_are_answered_only_within_a_confirmed_leadership() -> None:
    """A deposed leader whose tick thread has not noticed must not answer for long: every
    answer follows a no-op committed through Raft that started at most
    LEADERSHIP_CONFIRMATION_MS earlier."""
    controller, metadata_log, clock = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller._start_confirmation()  # the tick's own confirmation, settled
    clock.ms += LEADERSHIP_CONFIRMATION_MS  # and no longer recent
    before = metadata_log.barriers
    await controller.broker_heartbeat(1, epoch, epoch, False)
    await controller.broker_heartbeat(1, epoch, epoch, False)
    assert metadata_log.barriers == before + 1  # one confirmation serves both
    clock.ms += LEADERSHIP_CONFIRMATION_MS
    await controller.broker_heartbeat(1, epoch, epoch, False)
    assert metadata_log.barriers == before + 2
    clock.ms += LEADERSHIP_CONFIRMATION_MS
    metadata_log.leader = False  # the no-op cannot commit: no answer
    metadata_log.term = 1
    controller.log.is_leader = lambda: True  # type: ignore[method-assign]  # stale belief
    with pytest.raises(KraftliteError) as caught:
        await controller.broker_heartbeat(1, epoch, epoch, False)
    assert caught.value.code is ErrorCode.REQUEST_TIMED_OUT


async def test_a_fence_whose_outcome_is_unknown_is_settled_before_its_broker_is_answered() -> None:
    """The fence timed out (outcome unknown) and may still commit: a heartbeat answered from
    the image now would renew a lease the fence can still break."""
    controller, metadata_log, clock = make_controller()
    controller.settings = ControllerSettings(
        node_id=1, url="http://c1", voters={"a:1": 1}, request_timeout_s=0.2
    )
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False)
    clock.ms += controller.settings.session_timeout_ms + LEADER_FALLBACK_TIMEOUT_MS + 1

    def unknown() -> None:
        raise ProposeError("timed out", maybe_committed=True)

    metadata_log.script = [unknown] * 50
    with pytest.raises(KraftliteError):
        await controller._tick()
    assert controller._changing(1)
    metadata_log.script = []
    before = metadata_log.image.version
    await controller.broker_heartbeat(1, epoch, epoch, False)
    assert metadata_log.proposals[-1].records == ()  # a no-op moved the version past it
    assert metadata_log.image.version > before and not controller._changing(1)


async def test_a_takeover_moves_the_version_so_a_predecessors_late_batch_cannot_apply() -> None:
    controller, metadata_log, _ = make_controller()
    await register(controller, 1)
    decided_before = RecordBatch(
        metadata_log.image.version,
        decisions.register_broker(metadata_log.image, 2, "x", "http://b2:9092", None).records,
    )
    await controller._tick()  # takes over
    result = await metadata_log.propose(decided_before, timeout_s=1)  # forwarded late
    assert result.outcome is Outcome.STALE


async def test_a_no_op_is_never_proposed_by_a_controller_that_is_not_active() -> None:
    """pysyncobj would forward it to the new leader, where it would commit: the deposed
    node would then answer a heartbeat as if it still led."""
    controller, metadata_log, _ = make_controller()
    await controller._tick()
    metadata_log.leader = False
    proposed = len(metadata_log.proposals)
    with pytest.raises(KraftliteError) as caught:
        await controller._commit_noop(asyncio.get_running_loop().time() + 1)
    assert caught.value.code is ErrorCode.NOT_CONTROLLER
    assert len(metadata_log.proposals) == proposed


async def test_a_large_fence_commits_in_bounded_batches_and_a_deposed_one_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    monkeypatch.setattr(quorum_controller, "MAX_BATCH_RECORDS", 4)
    controller, metadata_log, _ = make_controller()
    metadata_log.image = ten_partitions_led_by_1()
    fenced = await controller.submit(lambda image: decisions.fence_expired_brokers(image, [1]))
    assert fenced == [1]
    sizes = [len(b.records) for b in metadata_log.proposals]
    assert sizes == [4, 4, 3]  # 10 leader moves, then the fence record, 4 at a time
    assert isinstance(metadata_log.proposals[-1].records[-1], FenceBrokerRecord)
    versions = [b.expected_version for b in metadata_log.proposals]
    assert versions == list(range(versions[0], versions[0] + 3))  # each on the one before
    assert not metadata_log.image.is_live(1)
    assert all(p.leader == 2 for p in metadata_log.image.topics["T"].partitions.values())

    # deposed half-way: the rest is not proposed; the broker is still live for the next one
    metadata_log.image = play(
        metadata_log.image,
        r.UnfenceBrokerRecord(broker_id=1, broker_epoch=metadata_log.image.brokers[1].broker_epoch),
    )
    metadata_log.proposals.clear()

    def deposed() -> None:
        metadata_log.leader = False
        raise ProposeError("not the leader", maybe_committed=False)

    metadata_log.script = [lambda: None, deposed]
    with pytest.raises(KraftliteError) as caught:
        await controller.submit(lambda image: decisions.fence_expired_brokers(image, [2]))
    assert caught.value.code is ErrorCode.NOT_CONTROLLER
    assert metadata_log.image.is_live(2) and len(metadata_log.proposals) == 2


async def test_a_brokers_heartbeat_waits_while_its_fence_commits_in_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Review finding: answered from the image between two batches of its own fence, the
    broker would have renewed its lease past the fence."""
    monkeypatch.setattr(quorum_controller, "MAX_BATCH_RECORDS", 3)
    controller, metadata_log, clock = make_controller()
    controller._active_term = metadata_log.term  # caught up: heartbeats are answered
    controller._leadership_confirmed_ms = clock.ms
    metadata_log.image = ten_partitions_led_by_1()
    epoch = metadata_log.image.brokers[1].broker_epoch
    metadata_log.hold = asyncio.Event()  # each proposal waits until released
    fencing = asyncio.create_task(
        controller.submit(lambda image: decisions.fence_expired_brokers(image, [1]))
    )
    while not metadata_log.proposals:  # noqa: ASYNC110 - the scripted log has no event
        await asyncio.sleep(0)
    metadata_log.hold.set()  # the first batch commits ...
    metadata_log.hold = asyncio.Event()
    while len(metadata_log.proposals) < 2:  # noqa: ASYNC110 - ... and the second is in flight
        await asyncio.sleep(0)
    assert metadata_log.image.is_live(1)  # mid-fence: the image still says live
    beat = asyncio.create_task(
        controller.broker_heartbeat(1, epoch, metadata_log.image.version, False)
    )
    await asyncio.sleep(0.05)
    assert not beat.done()  # not answered from the mid-fence image
    metadata_log.hold.set()
    metadata_log.hold = None
    await fencing
    _, answered_at = await beat
    fence = next(
        b
        for b in metadata_log.proposals
        if any(isinstance(x, FenceBrokerRecord) for x in b.records)
    )
    # decided once the fence had committed: the broker's lease counts only from a version
    # that holds it (the broker may then be unfenced again, being alive)
    assert answered_at > fence.expected_version


async def test_a_batched_decision_is_decided_again_only_when_another_write_lands_between(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quorum_controller, "MAX_BATCH_RECORDS", 4)
    controller, metadata_log, _ = make_controller()
    metadata_log.image = ten_partitions_led_by_1()
    decided = []

    def fence(image: MetadataImage) -> decisions.ControllerResult[list[int]]:
        decided.append(image.version)
        return decisions.fence_expired_brokers(image, [1])

    await controller.submit(fence)
    assert len(decided) == 1  # one decision, committed in three batches

    decided.clear()

    def foreign_write() -> None:  # a controller's registration, forwarded, lands first
        metadata_log.image = play(
            metadata_log.image, r.RegisterControllerRecord(node_id=9, url="http://c9")
        )

    def fence_2(image: MetadataImage) -> decisions.ControllerResult[list[int]]:
        decided.append(image.version)
        return decisions.fence_expired_brokers(image, [2])  # 2 leads all ten now

    metadata_log.script = [lambda: None, foreign_write]
    await controller.submit(fence_2)
    assert len(decided) == 2
    assert metadata_log.image.brokers[2].fenced
    assert all(p.leader == r.NO_LEADER for p in metadata_log.image.topics["T"].partitions.values())


# ------------------------------------------------------------------------------ fast fencing


@pytest.fixture(autouse=True)
def quick_knocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Knocks 10 ms apart: the probes' timing is the injected clock's, not the loop's."""
    monkeypatch.setattr(liveness, "KNOCK_INTERVAL_S", 0.01)


def probed_controller(
    heard_ms_ago: int, lease_aware: bool = True, **settings: Any
) -> tuple[QuorumController, ScriptedLog, FixedClock]:
    """Broker 1 leading ten partitions, last heard from `heard_ms_ago`, with this
    controller active long enough that no predecessor's lease holds (rule 5)."""
    controller, log, clock = make_controller(**settings)
    log.image = ten_partitions_led_by_1()
    controller._active_term = 1
    controller._unreachable_from_ms = clock.ms - 1
    if lease_aware:
        controller._lease_aware.add(1)
    controller.sessions.contact(1, clock.ms - heard_ms_ago)
    return controller, log, clock


def knocking(controller: QuorumController, knocks: liveness.Knock | list[liveness.Knock]) -> None:
    """The broker's address answers the probe's knocks so (the last one repeating)."""
    answers = list(knocks) if isinstance(knocks, list) else [knocks]

    async def knock(url: str) -> liveness.Knock:
        return answers.pop(0) if len(answers) > 1 else answers[0]

    controller.knock = knock


async def probe(controller: QuorumController, log: ScriptedLog) -> bool:
    controller.suspect(1, log.image.brokers[1].broker_epoch)
    await asyncio.wait_for(asyncio.gather(*controller._probing.values()), 10)
    return log.image.brokers[1].fenced


async def _probe_once(
    heard_ms_ago: int,
    knocks: liveness.Knock | list[liveness.Knock],
    lease_aware: bool = True,
    **settings: Any,
) -> bool:
    """Whether broker 1 is fenced after a follower's report (controller/liveness.py)."""
    controller, log, _ = probed_controller(heard_ms_ago, lease_aware, **settings)
    knocking(controller, knocks)
    return await probe(controller, log)


REFUSED, UNANSWERED, ANSWERED = (
    liveness.Knock.REFUSED,
    liveness.Knock.UNANSWERED,
    liveness.Knock.ANSWERED,
)


async def test_a_broker_heard_from_just_now_is_not_fenced_whatever_its_port_says() -> None:
    """A refused probe is no proof while heartbeats arrive: the controller's path to the
    advertised address may refuse (a firewall's REJECT, a balancer with no backend)."""
    assert not await _probe_once(heard_ms_ago=0, knocks=REFUSED)
    assert not await _probe_once(heard_ms_ago=0, knocks=UNANSWERED)


async def test_a_silent_broker_whose_port_refuses_is_fenced_at_once() -> None:
    assert await _probe_once(heard_ms_ago=1_000, knocks=REFUSED)
    assert not await _probe_once(heard_ms_ago=5_000, knocks=ANSWERED)  # paused: the session
    # refusals must come in a row: one that answers in between is alive
    assert not await _probe_once(heard_ms_ago=1_000, knocks=[REFUSED, ANSWERED, REFUSED])


async def test_an_unreachable_broker_is_fenced_once_its_heartbeats_are_that_late() -> None:
    """Rule 4: no answer at all (a silent host) for broker.unreachable.timeout.ms."""
    assert await _probe_once(heard_ms_ago=2_600, knocks=UNANSWERED)
    # one knock answered among the silent ones: its host is there, the session decides
    assert not await _probe_once(
        heard_ms_ago=5_000, knocks=[UNANSWERED, UNANSWERED, ANSWERED, UNANSWERED]
    )


async def test_an_answered_knock_holds_off_rule_4_until_the_broker_is_heard_from() -> None:
    """A flaky link answers one probe and not the next: the next proves nothing new (the
    host was there since it was last heard from), so only its session may fence it."""
    controller, log, clock = probed_controller(heard_ms_ago=5_000)
    knocking(controller, ANSWERED)
    assert not await probe(controller, log)
    knocking(controller, [UNANSWERED] * 8 + [ANSWERED])
    assert not await probe(controller, log)
    controller.sessions.contact(1, clock.ms - 3_000)  # heard from since (then silent again)
    knocking(controller, UNANSWERED)
    assert await probe(controller, log)


async def test_an_unreachable_broker_waits_for_the_timeout_not_the_session() -> None:
    """Heard from 1 s ago: the probe keeps knocking until 2.5 s have passed since (the
    clock moves with each knock here), and fences it then, not after the 9 s session."""
    controller, log, clock = probed_controller(heard_ms_ago=1_000)
    knocked_at: list[int] = []

    async def knock(url: str) -> liveness.Knock:
        knocked_at.append(clock.ms)
        clock.ms += 250
        return UNANSWERED

    controller.knock = knock
    assert await probe(controller, log)
    silent_when_fenced = clock.ms - knocked_at[0] + 1_000
    assert 2_500 <= silent_when_fenced < 3_000


async def test_rule_4_spares_brokers_whose_lease_may_run_longer() -> None:
    """Rule 5: a broker whose heartbeats do not say its lease runs by the lease timeout (an
    older broker) keeps a session's lease; and for a session after a takeover's fallback a
    predecessor's answers may have leased that long. Neither is fenced by rule 4."""
    assert not await _probe_once(
        heard_ms_ago=5_000, knocks=[UNANSWERED] * 8 + [ANSWERED], lease_aware=False
    )
    controller, log, clock = probed_controller(heard_ms_ago=5_000)
    controller._unreachable_from_ms = clock.ms + 1  # took over less than that ago
    knocking(controller, [UNANSWERED] * 8 + [ANSWERED])
    assert not await probe(controller, log)


async def test_a_takeover_holds_rule_4_off_for_its_fallback_and_a_session() -> None:
    controller, _metadata_log, clock = make_controller()
    await controller._tick()
    assert controller._unreachable_from_ms == (
        clock.ms + LEADER_FALLBACK_TIMEOUT_MS + controller.settings.session_timeout_ms
    )


async def test_no_probe_before_the_takeover_is_done() -> None:
    """Sessions left from an earlier term look like long silences: a probe started before
    the takeover's commit (a follower's report) must not fence on them."""
    controller, log, _ = probed_controller(heard_ms_ago=60_000)
    controller._active_term = None
    knocking(controller, REFUSED)
    assert not await probe(controller, log)
    assert not controller._probing


async def test_no_unreachable_fencing_when_its_timeout_is_not_below_the_session() -> None:
    """broker.unreachable.timeout.ms at or above the session turns rule 4 off (the probe
    ends when the session fences it; here nothing does, so it is bounded by the test)."""
    assert not await _probe_once(
        heard_ms_ago=5_000,
        knocks=[UNANSWERED] * 8 + [ANSWERED],
        unreachable_timeout_ms=9_000,
    )
    assert not await _probe_once(
        heard_ms_ago=5_000, knocks=[UNANSWERED] * 8 + [ANSWERED], liveness_probes=False
    )


async def test_a_heartbeat_while_a_probe_fences_is_answered_after_the_fence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fence is decided in a thread: a heartbeat arriving meanwhile (a link healing)
    must not be answered unfenced from the image the fence is about to change."""
    controller, log, _ = probed_controller(heard_ms_ago=5_000)
    epoch = log.image.brokers[1].broker_epoch
    knocking(controller, UNANSWERED)
    deciding, go = threading.Event(), threading.Event()
    fence = liveness.fence_dead_broker

    def slow_fence(image: MetadataImage, broker_id: int, broker_epoch: int) -> Any:
        deciding.set()
        go.wait(5)
        return fence(image, broker_id, broker_epoch)

    monkeypatch.setattr(liveness, "fence_dead_broker", slow_fence)
    controller.suspect(1, epoch)
    assert await asyncio.to_thread(deciding.wait, 5)
    heartbeat = asyncio.create_task(
        controller.broker_heartbeat(1, epoch, log.image.version, False, True)
    )
    await asyncio.sleep(0.02)
    assert not heartbeat.done()  # held back until the fence is decided and committed
    go.set()
    await asyncio.gather(*controller._probing.values())
    _, version = await heartbeat
    fenced_at = next(
        p.expected_version
        for p in log.proposals
        if any(type(r).__name__ == "FenceBrokerRecord" for r in p.records)
    )
    assert version > fenced_at  # answered from after the fence, whatever it says


async def test_a_probe_deposed_while_it_waited_for_the_lock_fences_nothing() -> None:
    """Deposed and elected again while the fence waited behind a slow write: the silence
    it measured belongs to an earlier term (the takeover resets sessions after the lock)."""
    controller, log, _ = probed_controller(heard_ms_ago=5_000)
    knocking(controller, UNANSWERED)
    async with controller._write_lock:  # a slow write ahead of the fence
        controller.suspect(1, log.image.brokers[1].broker_epoch)
        await asyncio.sleep(0.3)  # its knocks are done: the fence waits for the lock
        assert controller._probing and 1 not in controller._fencing
        log.term = 3  # deposed, then elected again: not yet taken over in term 3
    await asyncio.gather(*controller._probing.values())
    assert not log.image.brokers[1].fenced


async def test_a_session_fence_fences_only_the_brokers_it_marked() -> None:
    controller, log, clock = make_controller()
    one = await register(controller, 1)
    two = await register(controller, 2)
    await controller._tick()
    for broker_id, epoch in ((1, one), (2, two)):
        await controller.broker_heartbeat(broker_id, epoch, epoch, False)
    clock.ms += controller.settings.session_timeout_ms + LEADER_FALLBACK_TIMEOUT_MS + 1
    controller.sessions.contact(2, clock.ms)  # 2 expires only later
    decided = controller._fence_expired(log.image, among=[1])
    assert decided.response == [1]
    clock.ms += controller.settings.session_timeout_ms + 1
    assert controller._fence_expired(log.image, among=[1]).response == [1]  # not 2: unmarked


async def test_a_registration_that_asked_to_shut_down_is_never_unfenced_again() -> None:
    """Heartbeats go out several at a time: one sent before the broker asked to shut down
    may arrive after; it must not undo the controlled shutdown."""
    controller, metadata_log, _ = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False, True)
    assert not metadata_log.image.brokers[1].fenced
    await controller.broker_heartbeat(1, epoch, epoch, True, True)
    assert metadata_log.image.brokers[1].fenced
    late, _ = await controller.broker_heartbeat(1, epoch, epoch, False, True)
    assert late.fenced and metadata_log.image.brokers[1].fenced
    # a new incarnation (a new registration epoch) unfences as usual
    again = await controller.register_broker(1, "inc-1b", "http://b:9092", None)
    await controller.broker_heartbeat(1, again, again, False, True)
    assert not metadata_log.image.brokers[1].fenced


async def test_a_retried_registration_is_not_taken_for_one_of_this_term() -> None:
    """The same incarnation registering again gets its epoch back with nothing committed:
    that epoch may be a predecessor's, whose answers may have leased a session."""
    controller, metadata_log, _ = make_controller()
    await controller._tick()
    epoch = await controller.register_broker(
        1, "inc-1", "http://b:9092", None, honours_lease_timeout=True
    )
    metadata_log.term = 2
    await controller._tick()
    assert (
        await controller.register_broker(
            1, "inc-1", "http://b:9092", None, honours_lease_timeout=True
        )
        == epoch
    )
    assert controller._unreachable_ms(1) is None  # held off: the epoch is the old term's


def test_leases_run_by_the_soonest_fence() -> None:
    assert ControllerSettings(1, "u", {}).lease_timeout_ms == 2_500
    assert ControllerSettings(1, "u", {}, session_timeout_ms=2_000).lease_timeout_ms == 2_000
    off = ControllerSettings(1, "u", {}, liveness_probes=False)
    assert off.lease_timeout_ms == 9_000 and off.unreachable_fencing_ms is None


# ------------------------------------------------------------------------------ membership


class MemberLog(ScriptedLog):
    """Raft's voter set as pysyncobj would hold it, apart from what metadata records."""

    membership_changes = True

    def __init__(self) -> None:
        super().__init__()
        self.raft = {"a1", "a2", "a3"}  # self = a1
        self.alive = {"a1", "a2", "a3"}
        self.raft_leader = "a1"

    def leader_address(self) -> str | None:
        return self.raft_leader

    def status(self) -> dict[str, Any]:
        return {
            "self": "a1",
            "leader": self.raft_leader,
            "term": self.term,
            "connected": {a: a in self.alive for a in self.raft - {"a1"}},
        }

    def voter_addresses(self) -> set[str]:
        return set(self.raft)

    async def add_voter(self, address: str, timeout_s: float) -> None:
        self.raft.add(address)

    async def remove_voter(self, address: str, timeout_s: float) -> None:
        self.raft.discard(address)

    def transfer_leadership(self) -> None:
        pass


def member_controller() -> tuple[QuorumController, MemberLog]:
    log = MemberLog()
    settings = ControllerSettings(
        node_id=1, url="http://c1", voters={"a1": 1, "a2": 2, "a3": 3}, request_timeout_s=0.3
    )
    return QuorumController(settings, log, FixedClock()), log  # type: ignore[arg-type]


async def test_majority_checks_count_raft_voters_even_unrecorded() -> None:
    """A Raft voter whose record never committed (the active controller died in between)
    still counts: removing 3 then 2 would leave Raft {1, 4} with 4 dead, stuck for good."""
    controller, log = member_controller()
    log.raft.add("a4")  # in Raft, not in metadata, and dead
    assert controller.voters() == {"a1": 1, "a2": 2, "a3": 3, "a4": -1}
    await controller.remove_voter(3)
    assert log.raft == {"a1", "a2", "a4"}
    with pytest.raises(KraftliteError) as refused:
        await controller.remove_voter(2)
    assert refused.value.code is ErrorCode.QUORUM_AT_RISK
    assert log.raft == {"a1", "a2", "a4"}


async def test_a_new_voter_is_named_before_it_joins_raft() -> None:
    controller, log = member_controller()
    log.alive.add("a4")
    checked: list[bool] = []

    async def verify() -> None:
        checked.append(True)

    await controller.add_voter(4, "a4", "http://c4", verify=verify)
    assert checked and log.raft == {"a1", "a2", "a3", "a4"}
    assert log.image.voters == {1: "a1", 2: "a2", 3: "a3", 4: "a4"}
    assert log.image.controllers[4] == "http://c4"
    log.raft_leader = "a4"
    assert controller.leader_id() == 4, "the new voter can be forwarded to when it leads"


async def test_a_new_voter_that_does_not_check_out_changes_nothing() -> None:
    controller, log = member_controller()
    log.alive.add("a4")

    async def verify() -> None:
        raise KraftliteError(ErrorCode.VOTER_NOT_FOUND, "no controller answers there")

    with pytest.raises(KraftliteError):
        await controller.add_voter(4, "a4", "http://c4", verify=verify)
    assert log.raft == {"a1", "a2", "a3"} and not log.image.voters


async def test_membership_changes_can_be_turned_off() -> None:
    controller, log = member_controller()
    log.membership_changes = False  # type: ignore[misc]
    for change in (controller.add_voter(4, "a4", "http://c4"), controller.remove_voter(3)):
        with pytest.raises(KraftliteError) as refused:
            await change
        assert refused.value.code is ErrorCode.POLICY_VIOLATION


async def test_a_broker_registered_in_this_term_is_not_held_off_by_the_takeover() -> None:
    """Every answer its registration got is ours: no predecessor's lease to wait out."""
    controller, metadata_log, clock = make_controller()
    await controller._tick()
    await controller.register_broker(1, "inc-1", "http://b:9092", None, honours_lease_timeout=True)
    assert controller._unreachable_ms(1) == controller.settings.unreachable_timeout_ms
    await controller.register_broker(2, "inc-2", "http://b:9093", None)  # an older broker
    assert controller._unreachable_ms(2) is None
    metadata_log.term = 2
    await controller._tick()  # a new term: what was registered before is a predecessor's
    assert controller._unreachable_ms(1) is None
    clock.ms = controller._unreachable_from_ms or 0
    assert controller._unreachable_ms(1) == controller.settings.unreachable_timeout_ms


async def test_a_heartbeat_queued_before_the_shutdown_is_decided_after_it_and_stays_fenced() -> (
    None
):
    """Arrived before the shutdown heartbeat, decided after it: whether it may unfence is
    decided with it, not on arrival."""
    controller, metadata_log, _ = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False, True)
    confirm = controller._confirm_leadership
    held = asyncio.Event()
    release = asyncio.Event()

    async def slow_confirmation() -> None:
        if not held.is_set():
            held.set()
            await release.wait()
        await confirm()

    controller._confirm_leadership = slow_confirmation  # type: ignore[method-assign]
    late = asyncio.create_task(controller.broker_heartbeat(1, epoch, epoch, False, True))
    await held.wait()  # arrived, waiting to be decided
    await controller.broker_heartbeat(1, epoch, epoch, True, True)  # the shutdown
    assert metadata_log.image.brokers[1].fenced
    release.set()
    answer, _ = await late
    assert answer.fenced and metadata_log.image.brokers[1].fenced


async def test_a_session_fence_deposed_while_it_waited_for_the_lock_fences_nothing() -> None:
    controller, metadata_log, clock = make_controller()
    epoch = await register(controller, 1)
    await controller._tick()
    await controller.broker_heartbeat(1, epoch, epoch, False)
    clock.ms += controller.settings.session_timeout_ms + LEADER_FALLBACK_TIMEOUT_MS + 1
    async with controller._write_lock:  # a slow write ahead of the fence
        tick = asyncio.create_task(controller._tick())
        await asyncio.sleep(0.01)
        metadata_log.term = 2  # deposed and elected again meanwhile
    with pytest.raises(KraftliteError):
        await tick
    assert not metadata_log.image.brokers[1].fenced


async def test_a_registration_across_a_leadership_change_is_not_taken_for_ours() -> None:
    controller, metadata_log, _ = make_controller()
    await controller._tick()
    propose = metadata_log.propose

    async def deposed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        metadata_log.term = 2  # another controller led, then we did again
        return await propose(*args, **kwargs)

    metadata_log.propose = deposed_meanwhile  # type: ignore[method-assign]
    epoch = await controller.register_broker(
        1, "inc-1", "http://b:9092", None, honours_lease_timeout=True
    )
    metadata_log.propose = propose  # type: ignore[method-assign]
    await controller._tick()  # our takeover of term 2
    assert metadata_log.image.brokers[1].broker_epoch == epoch
    assert controller._unreachable_ms(1) is None  # held off: who committed it is unknown

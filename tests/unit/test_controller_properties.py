"""Random sequences of controller events: every reachable image keeps the invariants.

Checked after every committed decision: check_invariants (leader in ISR within replicas, ISR
never empty, no fenced leader, fenced brokers out of ISRs but as last member), leader and
partition epochs never decrease, and without unclean election a new leader always comes
from the previous ISR (so an acknowledged record is never lost to an election).
"""

from __future__ import annotations

import pickle
import random

import orjson
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kraftlite.controller import decisions as d
from kraftlite.errors import KraftliteError
from kraftlite.metadata import records as r
from kraftlite.metadata.follower import MetadataFollower
from kraftlite.metadata.image import MetadataImage, apply_batch, check_invariants
from kraftlite.metadata.local_changes import LocalChanges, local_changes
from kraftlite.metadata.views import image_to_json

BROKERS = st.integers(1, 5)
TOPICS = st.sampled_from(["a", "b", "c"])


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.image = MetadataImage.EMPTY
        self.rng = random.Random(0)
        self.incarnations = 0
        # Brokers following the log: each replays the committed batches (as JSON, the way
        # they travel) at its own pace, and acts on what the batches touched.
        self.log: list[dict] = []
        self.followers = {b: MetadataFollower() for b in (1, 2, 3)}
        self.acted = dict.fromkeys(self.followers, MetadataImage.EMPTY)

    def commit(self, decide) -> None:
        try:
            result = decide()
        except KraftliteError:
            return  # refused: no records, nothing to check
        before = self.image
        batch = r.RecordBatch(before.version, result.records)
        self.image = apply_batch(before, batch)
        self.log.append(orjson.loads(r.encode_batch(batch)))
        check_invariants(self.image)
        for topic, index, now in self.image.partitions():
            old_topic = before.topics.get(topic.topic_id)
            old = None if old_topic is None else old_topic.partitions.get(index)
            if old is None:
                continue
            assert now.leader_epoch >= old.leader_epoch
            assert now.partition_epoch >= old.partition_epoch
            unclean = topic.configs.get("unclean.leader.election.enable") == "true"
            if now.leader != old.leader and now.leader != r.NO_LEADER and not unclean:
                assert now.leader in old.isr, f"unclean election {old} -> {now}"
            grown = set(now.isr) - set(old.isr)
            assert all(self.image.is_live(b) for b in grown), "a fenced broker joined an ISR"

    @rule(broker=BROKERS, restart=st.booleans())
    def register(self, broker: int, restart: bool) -> None:
        existing = self.image.brokers.get(broker)
        if existing is not None and not restart:
            incarnation = existing.incarnation_id
        else:
            self.incarnations += 1
            incarnation = f"i{self.incarnations}"
        self.commit(lambda: d.register_broker(self.image, broker, incarnation, "u", None))

    @rule(broker=BROKERS, caught_up=st.booleans(), shutdown=st.booleans())
    def heartbeat(self, broker: int, caught_up: bool, shutdown: bool) -> None:
        registration = self.image.brokers.get(broker)
        epoch = registration.broker_epoch if registration else 1
        version = self.image.version if caught_up else 0
        self.commit(lambda: d.broker_heartbeat(self.image, broker, epoch, version, shutdown))

    @rule(expired=st.sets(BROKERS, max_size=3))
    def expire(self, expired: set[int]) -> None:
        self.commit(lambda: d.fence_expired_brokers(self.image, expired))

    @rule(name=TOPICS, partitions=st.integers(1, 4), rf=st.integers(1, 3), unclean=st.booleans())
    def create(self, name: str, partitions: int, rf: int, unclean: bool) -> None:
        configs = {"unclean.leader.election.enable": unclean}
        self.commit(lambda: d.create_topic(self.image, name, partitions, rf, configs, rng=self.rng))

    @rule(name=TOPICS)
    def delete(self, name: str) -> None:
        self.commit(lambda: d.delete_topic(self.image, name))

    @rule(name=TOPICS, extra=st.integers(1, 3))
    def grow(self, name: str, extra: int) -> None:
        topic = self.image.topic(name)
        count = (len(topic.partitions) if topic else 0) + extra
        self.commit(lambda: d.create_partitions(self.image, name, count, rng=self.rng))

    @rule(data=st.data())
    def alter_isr(self, data: st.DataObject) -> None:
        partitions = list(self.image.partitions())
        if not partitions:
            return
        topic, index, p = data.draw(st.sampled_from(partitions))
        if p.leader == r.NO_LEADER:
            return
        others = [b for b in p.replicas if b != p.leader]
        chosen = data.draw(st.lists(st.sampled_from(others), unique=True)) if others else []
        request = d.AlterPartitionRequest(
            p.leader,
            self.image.brokers[p.leader].broker_epoch,
            topic.topic_id,
            index,
            p.leader_epoch,
            p.partition_epoch,
            (p.leader, *chosen),
        )
        self.commit(lambda: d.alter_partition(self.image, request))

    @rule()
    def rebalance(self) -> None:
        self.commit(lambda: d.elect_preferred_leaders(self.image))

    @rule(broker=st.sampled_from([1, 2, 3]), count=st.integers(1, 6), snapshot=st.booleans())
    def follow(self, broker: int, count: int, snapshot: bool) -> None:
        """The broker fetches up to `count` batches (or a snapshot of the image, as when it
        is behind what the controller keeps) and acts: the changes computed from what the
        records touched are exactly those of comparing the two whole images.
        """
        follower = self.followers[broker]
        if snapshot:
            follower.apply([], orjson.loads(orjson.dumps(image_to_json(self.image))))
        else:
            start = follower.image.version
            follower.apply(self.log[start : start + count], None)
            follower.apply(self.log[max(start - 1, 0) : start + 1], None)  # overlap: skipped
        assert follower.image == apply_log(self.log[: follower.image.version])
        acted = self.acted[broker]
        changes = follower.changes_since(acted, broker)
        assert _as_sets(changes) == _as_sets(local_changes(acted, follower.image, broker))
        follower.acted()
        self.acted[broker] = follower.image

    @invariant()
    def image_survives_a_snapshot(self) -> None:
        assert pickle.loads(pickle.dumps(self.image)) == self.image


def apply_log(batches: list[dict]) -> MetadataImage:
    image = MetadataImage.EMPTY
    for batch in batches:
        image = apply_batch(image, r.batch_from_json(batch))
    return image


def _as_sets(changes: LocalChanges) -> tuple[set, set, set]:
    return set(changes.leaders), set(changes.followers), set(changes.deletes)


ControllerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None
)
test_controller_invariants = ControllerMachine.TestCase

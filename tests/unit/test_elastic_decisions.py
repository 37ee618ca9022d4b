"""The elastic decisions (controller/elastic.py) at their edges: drains, forced removal,
self-healing and unclean election never lose data or break an invariant (regressions from
an independent review, each replayed into images whose invariants `commit` checks)."""

from __future__ import annotations

import pytest

from kraftlite.controller import decisions as d
from kraftlite.controller import elastic as el
from kraftlite.controller import reassignments as ra
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.metadata import records as r
from kraftlite.metadata.image import MetadataImage
from tests.unit.test_controller_decisions import brokers, commit, partition, with_topic
from tests.unit.test_reassignments import move


def fence(image: MetadataImage, *ids: int) -> MetadataImage:
    return commit(image, d.fence_expired_brokers(image, ids))


def unfence(image: MetadataImage, b: int) -> MetadataImage:
    """broker b restarts: new incarnation, then heartbeat caught up"""
    res = d.register_broker(image, b, f"inc-{b}-again-{image.version}", f"http://b{b}:9092", None)
    image = commit(image, res)
    return commit(image, d.broker_heartbeat(image, b, res.response, image.version))


def test_a_draining_broker_leads_where_it_is_the_only_live_in_sync_replica() -> None:
    # partition (1, 2), ISR (1, 2); broker 1 is drained (leadership moves to 2), the new
    # replica 3 catches up slowly (throttled). Broker 2 restarts (kill -9, or a rolling restart).
    image = with_topic(brokers(1, 2, 3), rf=2)
    assert partition(image).replicas == (1, 2)
    image = commit(image, el.drain_broker(image, 1))
    p = partition(image)
    assert p.leader == 2 and p.reassigning, p
    image = fence(image, 2)  # broker 2 dies
    image = unfence(image, 2)  # and comes back: not in the ISR any more
    image = commit(image, d.elect_offline_leaders(image))
    p = partition(image)
    # broker 1 is alive, unfenced, the only ISR member and holds everything
    assert not image.brokers[1].fenced and p.isr == (1,)
    assert p.leader != -1, f"offline with a live in-sync replica (draining 1): {p}"


def test_a_forced_removal_never_elects_a_fenced_leader() -> None:
    image = with_topic(brokers(1, 2, 3, 4), rf=3)  # (1,2,3) leader 1
    # 3 drops out of the ISR (lagging), then 1 and 2 die
    image = commit(
        image,
        d.alter_partition(
            image,
            d.AlterPartitionRequest(
                1,
                image.brokers[1].broker_epoch,
                "id-t",
                0,
                partition(image).leader_epoch,
                partition(image).partition_epoch,
                (1, 2),
            ),
        ),
    )
    image = fence(image, 1)
    image = fence(image, 2)
    p = partition(image)
    assert p.isr == (2,) and p.leader == -1, p
    image = commit(image, el.remove_broker(image, 1, force=True))
    p = partition(image)
    assert image.brokers[2].fenced
    assert p.leader != 2, f"fenced broker 2 elected leader: {p}"


def test_forcing_out_a_replica_that_was_leaving_adds_no_replacement() -> None:
    image = with_topic(brokers(1, 2, 3, 4, 5), rf=3)  # (1,2,3)
    image = move(image, [1, 2, 4])  # adding 4, removing 3
    image = fence(image, 3)
    p = partition(image)
    assert p.target == (1, 2, 4)
    image = commit(image, el.remove_broker(image, 3, force=True))
    p = partition(image)
    assert len(p.target) == 3, f"target grew to {p.target}: {p}"


def test_a_move_onto_a_draining_original_replica_completes() -> None:
    image = with_topic(brokers(1, 2, 3), rf=2)  # (1,2) leader 1, ISR (1,2)
    image = commit(
        image, d.ControllerResult((r.BrokerDrainRecord(broker_id=2, draining=True),), None)
    )
    image = move(image, [2])  # accepted: 2 is not new
    p = partition(image)
    assert not p.reassigning, f"target (2,) all in the ISR, yet moving forever: {p}"


def test_a_broker_config_of_unicode_digits_is_invalid_config() -> None:
    image = brokers(1)
    with pytest.raises(KraftliteError) as info:  # not a ValueError: the API would answer 500
        el.alter_broker_configs(image, 1, {"replication.throttled.rate": "\u00b2"})
    assert info.value.code is ErrorCode.INVALID_CONFIG


def test_unclean_election_never_picks_a_replica_still_being_added() -> None:
    image = with_topic(brokers(1, 2, 3), rf=2, unclean=True)  # (1,2)
    image = commit(image, el.drain_broker(image, 1))  # 3 adding, leadership to 2
    image = fence(image, 2)
    p = partition(image)
    # 1 (draining, alive, the only ISR member, all the data) is passed over for the
    # adding replica 3, which may hold nothing yet: acknowledged writes lost
    assert p.leader == 1 or p.leader == -1, f"unclean election of adding replica: {p}"


def test_self_healing_waits_for_a_live_in_sync_replica_to_copy_from() -> None:
    image = with_topic(brokers(1, 2, 3, 4), rf=2, unclean=True)  # (1,2) leader 1
    image = fence(image, 2)  # 2 dies: ISR (1,)
    image = fence(image, 1)  # 1 dies: ISR (1,), offline
    assert partition(image).leader == -1
    image = commit(image, el.replace_dead_brokers(image, [1, 2]))
    p = partition(image)
    # both replicas with data are dead for a while; healing re-creates them on 3 and 4
    # and elects an EMPTY new replica uncleanly: when 1 comes back it truncates to nothing
    assert p.leader == -1, f"unclean election of a brand-new replica: {p}"


def test_self_healing_places_what_it_can() -> None:
    image = with_topic(brokers(1, 2, 3, 4), name="wide", rf=4)
    image = with_topic(image, name="narrow", partitions=4, rf=2)
    image = fence(image, 4)
    holding_narrow = [i for i, p in image.topic("narrow").partitions.items() if 4 in p.replicas]
    assert holding_narrow
    # the rf=4 topic cannot be re-created on 3 live brokers: does the rf=2 one still heal?
    result = el.replace_dead_brokers(image, [4])
    moved = {m.topic for m in result.response}
    assert "narrow" in moved


def test_a_drain_can_be_undone() -> None:
    image = with_topic(brokers(1, 2, 3, 4))
    image = commit(image, el.drain_broker(image, 1))
    assert image.brokers[1].draining and not image.is_live(1)
    image = commit(image, el.stop_draining(image, 1))
    assert not image.brokers[1].draining and image.is_live(1)
    assert el.stop_draining(image, 1).records == ()


def test_removal_needs_a_stopped_broker_with_nothing_on_it() -> None:
    image = with_topic(brokers(1, 2, 3, 4))  # replicas (1, 2, 3)
    for broker_id, force in [(1, False), (1, True), (4, False)]:
        with pytest.raises(KraftliteError) as info:
            el.remove_broker(image, broker_id, force=force)  # all running
        assert info.value.code is ErrorCode.BROKER_IN_USE
    image = fence(image, 4)
    image = commit(image, el.remove_broker(image, 4, force=False))  # holds nothing
    assert 4 not in image.brokers
    with pytest.raises(KraftliteError) as info:
        el.remove_broker(image, 4, force=False)
    assert info.value.code is ErrorCode.BROKER_ID_NOT_REGISTERED


def test_no_replica_list_or_factor_below_min_insync_replicas() -> None:
    """A partition with fewer replicas than min.insync.replicas could never answer acks=all
    again: such a move or factor is refused, and nothing changes."""
    image = with_topic(brokers(1, 2, 3, 4))
    topic_id = image.topic_ids["t"]
    image = commit(
        image,
        d.ControllerResult(
            (r.ConfigRecord(topic_id=topic_id, name="min.insync.replicas", value="2"),), None
        ),
    )
    with pytest.raises(KraftliteError) as info:
        el.alter_replication_factor(image, "t", 1)
    assert info.value.code is ErrorCode.INVALID_REPLICATION_FACTOR
    with pytest.raises(KraftliteError) as info:
        ra.alter_reassignments(
            image,
            ra.parse_reassignments(
                {"partitions": [{"topic": "t", "partition": 0, "replicas": [4]}]}
            ),
        )
    assert info.value.code is ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert el.alter_replication_factor(image, "t", 2).records  # 2 is fine


def test_an_unclean_election_never_touches_an_internal_topic() -> None:
    """The brokers' own state (committed offsets) would be lost with it: left out of
    "every leaderless partition", and refused when named."""
    from kraftlite.protocol.admin_bodies import PartitionRef  # noqa: PLC0415

    image = with_topic(brokers(1, 2, 3), name="__consumer_offsets", rf=2)
    image = with_topic(image, name="plain", rf=2)
    image = fence(image, 2)  # ISR (1,)
    image = fence(image, 1)  # the last in-sync replica dies: no leader
    image = unfence(image, 2)  # the other comes back, out of the ISR
    assert partition(image, "plain").leader == -1
    assert partition(image, "__consumer_offsets").leader == -1
    result = el.elect_unclean(image, None)
    assert [(e.topic, e.error) for e in result.response] == [("plain", None)]
    named = el.elect_unclean(image, [PartitionRef("__consumer_offsets", 0)])
    (refused,) = named.response
    assert refused.error is not None and refused.error.code is ErrorCode.INVALID_REQUEST
    assert named.records == ()

"""KIP-848 groups' membership as records of the group's `__consumer_offsets` partition, so
that a coordinator move costs its members nothing (issue 28; Kafka's
ConsumerGroupMemberMetadata and ConsumerGroupCurrentMemberAssignment records play this part).
Pure: the coordinator appends what `changes` makes and replays what `parse` reads.

Rules:
1. A member record (`member_key`: the group and member id) holds everything of a
   `group.Member` but when it was last heard: subscription, session timeout, epoch,
   assignment, what it owns and since which epoch, what it confirmed, whether it reports,
   its instance id, whether it is away. A removed member is a tombstone. The records of
   one coordinator are made in the order its members changed and appended in that order
   (the coordinator's writer), so the log's last record of a member is its latest state.
2. A member's answer is sent only once every record made before it is acknowledged
   (acks=all): a member never holds what the log does not say it may. An answer that
   changed nothing waits too, for the records it read.
3. A coordinator marker (`COORDINATOR_KEY`, one per offsets partition: compaction keeps the
   last) names the leader epoch of the coordinator that wrote it and how long that
   coordinator had yet to hand out no partition when it wrote it. A coordinator writes one
   whenever it replays the partition (a takeover, or a replay after a failed write), before
   any answer: the answers wait for it, so none rests on a record the replay read but no
   in-sync replica had acknowledged. A coordinator whose freeze ends writes another, with
   none left, so the next takes no freeze over.
4. A new coordinator (leader epoch E) trusts the members it replays (`trusted`) when the
   last marker is of epoch E - 1 (its predecessor wrote records of every change it
   answered) or E (this broker, loading again in the same epoch). The first leader
   (E = 0) has no predecessor. Otherwise an epoch in between may have been led by a
   coordinator that kept membership in memory only (an older kraftlite, during a rolling
   upgrade) or never loaded the partition: the members read are stale, so they are
   tombstoned with the new marker, and the new coordinator hands out no partition for one
   maximum session (`group.Group` rule 6), as before this rule. So do members of a log
   with a member record that cannot be read, and of an offsets topic that allows unclean
   leader elections (its leader may lack what its predecessor acknowledged).
5. Trusted members come back as they were, their sessions counted from the load (Kafka's
   coordinator reschedules session timeouts on load), and the predecessor's freeze, if
   still running, goes on for as long as it had left (counted from the load: never
   shorter).
7. A member whose record would not fit one batch of the offsets topic is not recorded: the
   request that made it so is refused and the member goes back to what the log says.
8. Classic groups (JoinGroup) are recorded too (`classic_key`, Kafka's GroupMetadata): the
   name when one is made, before its first join goes on; then each generation once its
   leader sent the assignment, before any member is answered it (members, protocols,
   leader, assignments); a tombstone once it is gone. A trusted coordinator takes each
   group over Stable in its last generation, so its members heartbeat on as before; one
   that has no generation recorded handed nothing out. A snapshot too large for a batch
   goes without the dynamic members' subscriptions (the next rebalance asks them again);
   one too large even so refuses the assignment (INVALID_REQUEST). A static member replaced in a
   Stable group (its restart, rule 8 of classic.py) is recorded before it is answered.
   Classic groups are trusted as members are (rule 4), and only when the marker says its
   writer recorded them: a kraftlite that recorded members only freezes classic groups on
   a move, and its successor does too (their snapshots tombstoned).
6. Records that cannot be read are skipped by the replay (logged), as commit records are;
   an older kraftlite's replay skips these keys altogether (it reads `offset\\0` keys only).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import orjson

from kraftlite.groups.assignor import TopicPartition
from kraftlite.groups.group import Member

MEMBER_KEY_PREFIX = b"member\x00"
CLASSIC_KEY_PREFIX = b"classic\x00"
COORDINATOR_KEY = b"coordinator\x00"


class BadMemberRecordError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class MemberState:
    """Rule 1: what a member record holds."""

    client_id: str
    topics: frozenset[str]
    session_timeout_ms: int
    epoch: int
    assignment: frozenset[TopicPartition]
    owned_since: Mapping[TopicPartition, int]
    confirmed_epoch: int
    reports: bool
    instance_id: str | None
    away: bool

    @classmethod
    def of(cls, m: Member) -> MemberState:
        return cls(
            m.client_id,
            m.topics,
            m.session_timeout_ms,
            m.epoch,
            m.assignment,
            dict(m.owned_since),
            m.confirmed_epoch,
            m.reports,
            m.instance_id,
            m.away,
        )

    def same_as(self, m: Member) -> bool:
        return (
            self.epoch == m.epoch
            and self.confirmed_epoch == m.confirmed_epoch
            and self.away == m.away
            and self.assignment == m.assignment
            and self.owned_since == m.owned_since
            and self.topics == m.topics
            and self.session_timeout_ms == m.session_timeout_ms
            and self.client_id == m.client_id
            and self.reports == m.reports
            and self.instance_id == m.instance_id
        )

    def restore(self, member_id: str, now_ms: int) -> Member:
        """Rule 5: the member again, heard now."""
        return Member(
            member_id,
            self.client_id,
            self.topics,
            self.session_timeout_ms,
            now_ms,
            epoch=self.epoch,
            assignment=self.assignment,
            owned_since=dict(self.owned_since),
            confirmed_epoch=self.confirmed_epoch,
            reports=self.reports,
            instance_id=self.instance_id,
            away=self.away,
        )

    def value(self) -> bytes:
        """JSON, partitions as runs (rule 1): a member's share of a topic is mostly a few
        runs of neighbours, so a record stays small however many partitions it holds."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.assignment):
            by_topic.setdefault(topic, []).append(partition)
        owned: dict[str, list[tuple[int, int]]] = {}
        for (topic, partition), since in sorted(self.owned_since.items()):
            owned.setdefault(topic, []).append((partition, since))
        return orjson.dumps(
            {
                "client_id": self.client_id,
                "topics": sorted(self.topics),
                "session_timeout_ms": self.session_timeout_ms,
                "epoch": self.epoch,
                "assignment": {t: _runs((p, 0) for p in ps) for t, ps in by_topic.items()},
                "owned": {t: _runs(pairs) for t, pairs in owned.items()},
                "confirmed_epoch": self.confirmed_epoch,
                "reports": self.reports,
                "instance_id": self.instance_id,
                "away": self.away,
            }
        )

    @classmethod
    def from_value(cls, value: bytes) -> MemberState:
        data = orjson.loads(value)
        instance = data["instance_id"]
        return cls(
            _text(data["client_id"]),
            frozenset(_text(t) for t in data["topics"]),
            _integer(data["session_timeout_ms"]),
            _integer(data["epoch"]),
            frozenset(
                (_text(topic), p)
                for topic, runs in dict(data["assignment"]).items()
                for p, _ in _unrun(runs)
            ),
            {
                (_text(topic), p): since
                for topic, runs in dict(data["owned"]).items()
                for p, since in _unrun(runs)
            },
            _integer(data["confirmed_epoch"]),
            _boolean(data["reports"]),
            None if instance is None else _text(instance),
            _boolean(data["away"]),
        )


_MAX_RUN = 1 << 20  # no topic has this many partitions: a run past it is a bad record


def _runs(pairs: Iterable[tuple[int, int]]) -> list[list[int]]:
    """Sorted (partition, tag) pairs as [first, last, tag] runs of neighbours alike."""
    runs: list[list[int]] = []
    for partition, tag in pairs:
        if runs and runs[-1][1] == partition - 1 and runs[-1][2] == tag:
            runs[-1][1] = partition
        else:
            runs.append([partition, partition, tag])
    return runs


def _unrun(runs: object) -> Iterator[tuple[int, int]]:
    if not isinstance(runs, list):
        raise TypeError(f"{runs!r} is not a list of runs")
    for first, last, value in runs:
        if not 0 <= _integer(first) <= _integer(last) < first + _MAX_RUN:
            raise ValueError(f"bad run {first}-{last}")
        tag = _integer(value)
        for partition in range(first, last + 1):
            yield partition, tag


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _integer(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an integer")
    return value


def _boolean(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{value!r} is not a boolean")
    return value


def member_key(group: str, member_id: str) -> bytes:
    """A JSON array after the prefix, so no name can break its parsing."""
    return MEMBER_KEY_PREFIX + orjson.dumps([group, member_id])


def parse_member_record(
    key: bytes | None, value: bytes | None
) -> tuple[str, str, MemberState | None] | None:
    """(group, member id, state or None for a removal); None for other records;
    BadMemberRecordError for a member record that cannot be read."""
    if key is None or not key.startswith(MEMBER_KEY_PREFIX):
        return None
    try:
        group, member_id = orjson.loads(key[len(MEMBER_KEY_PREFIX) :])
        state = None if value is None else MemberState.from_value(value)
        return _text(group), _text(member_id), state
    except (ValueError, TypeError, KeyError) as exc:  # orjson.JSONDecodeError is a ValueError
        raise BadMemberRecordError(f"unreadable member record: {exc!r}") from None


NAME_ONLY = b"{}"  # rule 8: a classic group made, no generation formed yet


def classic_key(group: str) -> bytes:
    return CLASSIC_KEY_PREFIX + orjson.dumps([group])


@dataclass(frozen=True, slots=True)
class ClassicMemberState:
    """Rule 8: one member of a classic group's generation, as its snapshot holds it."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (assignor, subscription), preferred first
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicState:
    """Rule 8: a classic group's generation once its assignment is made (Kafka's
    GroupMetadata record)."""

    generation: int
    protocol_type: str
    protocol_name: str
    leader: str
    members: tuple[ClassicMemberState, ...]

    def value(self, *, metadata: bool = True) -> bytes:
        """JSON, bytes as base64; without `metadata`, dynamic members' subscriptions are
        left out (the next rebalance asks them again; static members', which a rebalance
        may hand the leader while they are away, stay)."""
        return orjson.dumps(
            {
                "generation": self.generation,
                "protocol_type": self.protocol_type,
                "protocol_name": self.protocol_name,
                "leader": self.leader,
                "members": [
                    {
                        "member_id": m.member_id,
                        "instance_id": m.instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "session_timeout_ms": m.session_timeout_ms,
                        "rebalance_timeout_ms": m.rebalance_timeout_ms,
                        "protocols": [
                            [
                                name,
                                base64.b64encode(
                                    data if metadata or m.instance_id else b""
                                ).decode(),
                            ]
                            for name, data in m.protocols
                        ],
                        "assignment": base64.b64encode(m.assignment).decode(),
                    }
                    for m in self.members
                ],
            }
        )

    @classmethod
    def from_value(cls, value: bytes) -> ClassicState:
        data = orjson.loads(value)
        return cls(
            _integer(data["generation"]),
            _text(data["protocol_type"]),
            _text(data["protocol_name"]),
            _text(data["leader"]),
            tuple(
                ClassicMemberState(
                    _text(m["member_id"]),
                    None if m["instance_id"] is None else _text(m["instance_id"]),
                    _text(m["client_id"]),
                    _text(m["client_host"]),
                    _integer(m["session_timeout_ms"]),
                    _integer(m["rebalance_timeout_ms"]),
                    tuple(
                        (_text(name), base64.b64decode(_text(data_), validate=True))
                        for name, data_ in m["protocols"]
                    ),
                    base64.b64decode(_text(m["assignment"]), validate=True),
                )
                for m in data["members"]
            ),
        )


def parse_classic_record(
    key: bytes | None, value: bytes | None
) -> tuple[str, bool, ClassicState | None] | None:
    """Rule 8: (group, whether it is a classic group now, its last generation's snapshot if
    one was made); None for other records; BadMemberRecordError if unreadable."""
    if key is None or not key.startswith(CLASSIC_KEY_PREFIX):
        return None
    try:
        (group,) = orjson.loads(key[len(CLASSIC_KEY_PREFIX) :])
        if value is None:
            return _text(group), False, None
        if value == NAME_ONLY:
            return _text(group), True, None
        return _text(group), True, ClassicState.from_value(value)
    except (ValueError, TypeError, KeyError, binascii.Error) as exc:
        raise BadMemberRecordError(f"unreadable classic group record: {exc!r}") from None


@dataclass(frozen=True, slots=True)
class CoordinatorMarker:
    """Rule 3."""

    leader_epoch: int
    frozen_for_ms: int  # how long its writer had yet to hand out nothing, when it wrote it
    # its writer records classic groups' generations too (rule 8; a kraftlite from before
    # that wrote markers without it)
    records_classic: bool = True

    def value(self) -> bytes:
        return orjson.dumps(
            {
                "leader_epoch": self.leader_epoch,
                "frozen_for_ms": self.frozen_for_ms,
                "classic": 1 if self.records_classic else 0,
            }
        )


def parse_coordinator_record(key: bytes | None, value: bytes | None) -> CoordinatorMarker | None:
    """The marker, or None for another record; BadMemberRecordError if unreadable."""
    if key != COORDINATOR_KEY:
        return None
    try:
        data = orjson.loads(value or b"null")
        return CoordinatorMarker(
            _integer(data["leader_epoch"]),
            _integer(data["frozen_for_ms"]),
            data.get("classic") == 1,
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise BadMemberRecordError(f"unreadable coordinator marker: {exc!r}") from None


def trusted(leader_epoch: int, marker: CoordinatorMarker | None) -> bool:
    """Rule 4: whether a coordinator of `leader_epoch` may take the members it replayed."""
    if leader_epoch == 0:
        return True
    return marker is not None and marker.leader_epoch in (leader_epoch - 1, leader_epoch)


def trusted_classic(leader_epoch: int, marker: CoordinatorMarker | None) -> bool:
    """Rule 8: and the classic groups' generations (its predecessor recorded those too)."""
    if leader_epoch == 0:
        return True
    return trusted(leader_epoch, marker) and marker is not None and marker.records_classic


def changes(
    group: str,
    members: Mapping[str, Member],
    touched: Iterable[str],
    stored: dict[str, MemberState],
    max_bytes: int,
) -> tuple[list[tuple[bytes, bytes | None]], list[str]]:
    """Rule 1: the records (key, value or None) that bring the log's view of the group
    (`stored`, updated in place) to `members`: a tombstone for each stored member that is
    gone, first (a partition it held may be given to another below), then the `touched`
    members that changed. A member whose record would be over `max_bytes` is named in the
    second list, and then nothing is recorded and `stored` is left as it was: the group
    must go back to it (rule 7)."""
    updates: list[tuple[str, MemberState, bytes, bytes]] = []
    refused: list[str] = []
    for member_id in touched:
        member = members.get(member_id)
        if member is None:
            continue
        before = stored.get(member_id)
        if before is None or not before.same_as(member):
            state = MemberState.of(member)
            key, value = member_key(group, member_id), state.value()
            if len(key) + len(value) > max_bytes:
                refused.append(member_id)
            else:
                updates.append((member_id, state, key, value))
    if refused:
        return [], refused
    records: list[tuple[bytes, bytes | None]] = []
    for member_id in [m for m in stored if m not in members]:
        del stored[member_id]
        records.append((member_key(group, member_id), None))
    for member_id, state, key, value in updates:
        stored[member_id] = state
        records.append((key, value))
    return records, []

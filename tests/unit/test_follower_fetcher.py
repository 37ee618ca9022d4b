"""The follower side of fetch sessions (broker/follower_fetcher.py), against a fake leader
whose answers the test releases one by one (from the review of issue 13's change).

A fake replica stream holds each replica fetch until the test releases it, so metadata can
move a partition while a request naming it is in flight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from kraftlite.broker.follower_fetcher import FollowerFetcher
from kraftlite.broker.partition import Role
from kraftlite.protocol import framing


@dataclass
class FakeLog:
    log_end_offset: int = 0
    latest_epoch: int = -1
    log_start_offset: int = 0


@dataclass
class FakePartition:
    topic_id: str
    index: int
    leader_id: int = 1
    leader_epoch: int = 0
    role: Role = Role.FOLLOWER
    log: FakeLog = field(default_factory=FakeLog)

    @property
    def name(self) -> str:
        return f"{self.topic_id}-{self.index}"


class HeldSession:
    """ws_connect() opens a fake replica stream whose send_bytes() records the request and
    whose receive() answers only when `release` is set."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.release = asyncio.Event()
        self.session_id = 77
        self.connects = 0
        self.posts = 0
        # what the next answers are instead of a BINARY answer (TEXT problem, CLOSE)
        self.scripted: list[aiohttp.WSMessage] = []
        self.handshake_status: int | None = None  # refuse the upgrade with this status

    async def ws_connect(self, url: str, **_: Any) -> Any:
        self.connects += 1
        outer = self
        if self.handshake_status is not None:
            raise aiohttp.WSServerHandshakeError(
                None,  # type: ignore[arg-type]
                (),
                status=self.handshake_status,
            )

        class Stream:
            closed = False

            async def send_bytes(self, data: bytes) -> None:
                outer.requests.append(orjson.loads(data))

            async def receive(self, **_: Any) -> aiohttp.WSMessage:
                await outer.release.wait()
                outer.release.clear()
                if outer.scripted:
                    message = outer.scripted.pop(0)
                    if message.type is aiohttp.WSMsgType.CLOSE:
                        self.closed = True
                    return message
                answer = framing.encode(
                    {"v": 1, "session_id": outer.session_id, "partitions": []}, []
                )
                return aiohttp.WSMessage(aiohttp.WSMsgType.BINARY, answer, None)

            async def close(self) -> None:
                self.closed = True

        return Stream()

    def post(self, url: str, data: bytes, **_: Any) -> Any:
        self.posts += 1
        self.requests.append(orjson.loads(data))
        outer = self

        class Answer:
            status = 200

            async def __aenter__(self) -> Answer:
                await asyncio.sleep(0.01)  # the leader's long-poll
                return self

            async def __aexit__(self, *exc: object) -> None:
                return None

            async def read(self) -> bytes:
                return framing.encode(
                    {"v": 1, "session_id": outer.session_id, "partitions": []}, []
                )

        return Answer()


def make_fetcher(session: HeldSession) -> FollowerFetcher:
    return FollowerFetcher(
        1,
        broker_id=2,
        broker_epoch=lambda: 5,
        leader_url=lambda _: "http://leader",
        session=session,  # type: ignore[arg-type]
        max_wait_ms=50,
    )


async def test_a_partition_removed_during_a_full_fetch_is_forgotten_by_the_leader() -> None:
    """remove() adds to `_forgotten` only keys already in `_sent`; a full request's answer
    then resets `_forgotten` and puts every listed key in `_sent`. A partition removed while
    the full request naming it is in flight stays in the leader's session for good."""
    session = HeldSession()
    fetcher = make_fetcher(session)
    p0, p1 = FakePartition("T", 0), FakePartition("T", 1)
    fetcher.add(p0)  # type: ignore[arg-type]
    fetcher.add(p1)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)  # the full request (both partitions) is in flight
    assert session.requests[-1]["session_id"] == 0
    fetcher.remove(("T", 1))  # metadata moved T-1 to another leader meanwhile
    session.release.set()
    await asyncio.sleep(0.01)  # the answer lands; the next incremental request goes out
    session.release.set()
    await asyncio.sleep(0.01)
    await fetcher.stop()
    forgotten_ever = [tuple(k) for r in session.requests for k in r["forgotten"]]
    assert ("T", 1) in forgotten_ever, (
        f"T-1 never forgotten; fetcher believes the leader holds {sorted(fetcher._sent)}"
    )


async def test_a_position_moved_by_metadata_during_a_fetch_is_sent_again() -> None:
    """add() marks a partition dirty when metadata changes it (new leader epoch), but the
    answer to the request already in flight does `_dirty -= positions.keys()`, so the new
    position is not sent until an error (FENCED_LEADER_EPOCH) and a backoff recover it."""
    session = HeldSession()
    fetcher = make_fetcher(session)
    p0 = FakePartition("T", 0, leader_epoch=3)
    fetcher.add(p0)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    session.release.set()  # the full request's answer: session 77
    await asyncio.sleep(0.01)
    p0.log.log_end_offset = 10  # we appended: the next request names T-0 again
    fetcher._dirty.add(("T", 0))
    session.release.set()  # answer the idle round in flight
    await asyncio.sleep(0.01)
    named = session.requests[-1]["partitions"]
    assert [p["leader_epoch"] for p in named] == [3]  # in flight, naming epoch 3
    p0.leader_epoch = 4  # metadata: same leader, new epoch, while that request is in flight
    fetcher.add(p0)  # type: ignore[arg-type]
    session.release.set()
    await asyncio.sleep(0.01)
    session.release.set()
    await asyncio.sleep(0.01)
    await fetcher.stop()
    sent_epochs = [p["leader_epoch"] for r in session.requests for p in r["partitions"]]
    assert 4 in sent_epochs, f"epoch 4 never named (requests named epochs {sent_epochs})"


async def test_a_log_start_moved_by_this_replicas_retention_is_told_to_the_leader() -> None:
    """The leader's DeleteRecords waits on each follower's reported log start: a follower
    whose own retention moved it must say so, even on an idle partition."""
    session = HeldSession()
    fetcher = make_fetcher(session)
    p0 = FakePartition("T", 0)
    fetcher.add(p0)  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    session.release.set()  # the full request's answer: session 77
    await asyncio.sleep(0.01)
    assert session.requests[-1]["partitions"] == []  # idle: nothing to say
    p0.log.log_start_offset = 40  # retention, on this replica
    fetcher.log_start_moved(("T", 0))
    session.release.set()  # the idle round in flight ends; the next names T-0
    await asyncio.sleep(0.01)
    await fetcher.stop()
    told = [p["log_start_offset"] for r in session.requests for p in r["partitions"]]
    assert told[-1] == 40, told


async def test_an_unfenced_broker_names_every_partition_again_in_a_new_session() -> None:
    session = HeldSession()
    fetcher = make_fetcher(session)
    fetcher.add(FakePartition("T", 0))  # type: ignore[arg-type]
    fetcher.add(FakePartition("T", 1))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    session.release.set()  # the full request's answer: session 77
    await asyncio.sleep(0.01)
    assert session.requests[-1]["session_id"] == 77 and session.requests[-1]["partitions"] == []
    fetcher.restart_session()
    session.release.set()  # the idle round in flight ends; the next one starts over
    await asyncio.sleep(0.01)
    await fetcher.stop()
    restarted = session.requests[-1]
    assert restarted["session_id"] == 0
    assert sorted(p["partition"] for p in restarted["partitions"]) == [0, 1]


async def test_a_refused_round_keeps_the_stream_and_a_closed_one_reconnects() -> None:
    """A text answer (a request refused whole) starts a new session on the same stream; a
    stream the leader closed is opened again, in a new session."""
    session = HeldSession()
    fetcher = make_fetcher(session)
    fetcher.add(FakePartition("T", 0))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    problem = orjson.dumps({"error_code": "FETCH_SESSION_ID_NOT_FOUND", "message": "gone"})
    session.scripted = [
        aiohttp.WSMessage(aiohttp.WSMsgType.TEXT, problem.decode(), None),
        aiohttp.WSMessage(aiohttp.WSMsgType.CLOSE, 1001, b"broker stopping"),
    ]
    for _ in range(3):
        session.release.set()
        await asyncio.sleep(0.15)  # past the error backoff
    await fetcher.stop()
    assert session.connects == 2, session.connects  # once at the start, once after CLOSE
    assert [r["session_id"] for r in session.requests[:3]] == [0, 0, 0]  # each a new session


async def test_a_leader_without_the_stream_route_is_fetched_from_by_post() -> None:
    """A leader of an earlier version (a rolling upgrade) answers the upgrade 404: the
    follower fetches from it by POST, one round per request."""
    session = HeldSession()
    session.handshake_status = 404
    fetcher = make_fetcher(session)
    fetcher.add(FakePartition("T", 0))  # type: ignore[arg-type]
    await asyncio.sleep(0.3)
    await fetcher.stop()
    assert session.connects == 1 and session.posts >= 2
    assert session.requests[0]["session_id"] == 0 and session.requests[1]["session_id"] == 77

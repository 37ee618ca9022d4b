"""The Python producer's idempotence bookkeeping (client/producer.py rule 5) against a fake
transport that plays a leader with real producer state (broker/producer_state.py)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kraftlite.broker.producer_state import ProducerStates
from kraftlite.client.producer import Producer
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as fmt


class FakeLeader:
    """`call` and `request` as kraftlite's Transport, answering from in-memory logs; each
    entry of `faults` is applied to the next produce: "lose" (appended, answer lost),
    "unknown" (refused: UNKNOWN_PRODUCER_ID)."""

    def __init__(self, partitions: int, faults: list[str] | None = None) -> None:
        self.partitions = partitions
        self.faults = list(faults or [])
        self.logs: dict[int, list[bytes]] = defaultdict(list)
        self.states: dict[int, ProducerStates] = defaultdict(ProducerStates)
        self.ids_given = 0

    async def call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        assert (method, path) == ("POST", "/v1/producer-ids")
        self.ids_given += 1
        return {"producer_id": 100 + self.ids_given, "producer_epoch": 0}

    def known_partition_count(self, topic: str) -> int:
        return self.partitions

    async def leader_url(self, topic: str, partition: int) -> str:
        return "http://leader"

    def invalidate(self, topic: str | None = None) -> None:
        pass

    async def close(self) -> None:
        pass

    async def request(self, url: str, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        partition = int(path.split("/")[-2])
        data: bytes = kwargs["data"]
        fault = self.faults.pop(0) if self.faults else None
        if fault == "unknown":
            raise KraftliteError(ErrorCode.UNKNOWN_PRODUCER_ID, "no state")
        header = fmt.read_header(data)
        log = self.logs[partition]
        earlier = self.states[partition].check(header, 0) if header.producer_id >= 0 else None
        if earlier is None:
            first = len(log)
            log.extend(v or b"" for v in fmt.decode(data).values)
            if header.producer_id >= 0:
                self.states[partition].record(header, first, 0)
        else:
            first = earlier.first_offset
        if fault == "lose":
            raise TimeoutError("the answer was lost")
        return {"offsets": [{"offset": first + i} for i in range(header.record_count)]}


async def test_one_producer_id_for_every_partition_and_consecutive_sequences() -> None:
    leader = FakeLeader(partitions=4)
    async with Producer("http://x", transport=leader, linger_ms=1) as producer:  # type: ignore[arg-type]
        futures = [await producer.send("t", b"v%d" % i, partition=i % 4) for i in range(80)]
        await producer.flush()
    assert leader.ids_given == 1
    assert all(f.result().offset >= 0 for f in futures)
    for partition in range(4):
        assert leader.logs[partition] == [b"v%d" % i for i in range(partition, 80, 4)]


async def test_a_refused_batch_goes_again_as_a_new_producer_and_nothing_is_lost() -> None:
    """The reviewer's case: refused (unknown producer), then the retry's answers are
    lost after it was appended: the next batch must not be taken for a duplicate."""
    leader = FakeLeader(partitions=1, faults=["unknown", "lose", "lose"])
    async with Producer(
        "http://x",
        transport=leader,  # type: ignore[arg-type]
        linger_ms=1,
        retries=1,
        retry_backoff_ms=1,
    ) as producer:
        first = await producer.send("t", b"A", partition=0)
        await producer.flush()
        second = await producer.send("t", b"B", partition=0)
        await producer.flush()
    assert isinstance(first.exception(), KraftliteError)  # its fate was unknown: an error
    assert second.result().offset == 1  # not taken for a retry of A
    assert leader.logs[0] == [b"A", b"B"]

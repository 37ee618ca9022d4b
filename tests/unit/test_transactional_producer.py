"""The Python client's transactional producer (client/producer.py rule 6) against a stand-in
for the cluster that loses answers on purpose (a lost answer cannot be had on demand from a
real one): a batch of unknown fate in an aborted transaction is never taken for one of the
next (the abort bumps the epoch, KIP-360, and sequences start over), and nothing is sent
once a commit or an abort has begun. The real cluster's side: tests/integration/
test_kafka_transactions.py::test_the_python_clients_transactions_and_a_kafka_client_fencing_it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kraftlite.client import producer as producer_module
from kraftlite.client.producer import Producer
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.retry import RetryPolicy


class Coordinator:
    """Answers a transactional producer's calls as the coordinator would (an epoch bump
    for each InitProducerId) and records each batch's (id, epoch, sequence); the first
    `lose` produce answers are lost after the batch was written."""

    def __init__(self, lose: int = 0, lose_ends: int = 0, refuse_offsets: bool = False) -> None:
        self.epoch = -1
        self.lose = lose
        self.lose_ends = lose_ends  # EndTxn answers lost (the end itself decided)
        self.refuse_offsets = refuse_offsets
        self.ends: list[bool] = []  # what each EndTxn that arrived asked
        self.sent: list[tuple[int, int, int]] = []
        self.calls: list[str] = []

    async def call(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        call = path.rsplit("/", 1)[1]
        self.calls.append(call)
        if call == "producer":
            self.epoch += 1
            return {"producer_id": 500, "producer_epoch": self.epoch}
        if call == "end":
            await asyncio.sleep(0.05)  # a commit takes a moment
            if self.ends and self.ends[-1] and not body["commit"]:  # decided: commit
                raise KraftliteError(ErrorCode.INVALID_TXN_STATE, "committed already")
            self.ends.append(body["commit"])
            if self.lose_ends:
                self.lose_ends -= 1
                raise TimeoutError("the answer was lost; the end was decided")
        if call == "offsets" and self.refuse_offsets:
            raise KraftliteError(ErrorCode.ILLEGAL_GENERATION, "a zombie member")
        return None

    def known_partition_count(self, topic: str) -> int:
        return 1

    async def leader_url(self, topic: str, partition: int) -> str:
        return "http://leader"

    def invalidate(self, topic: str | None = None) -> None:
        pass

    async def close(self) -> None:
        pass

    async def request(self, url: str, method: str, path: str, **kwargs: Any) -> Any:
        header = batch_format.read_header(kwargs["data"])
        assert batch_format.is_transactional(header)
        self.sent.append((header.producer_id, header.producer_epoch, header.base_sequence))
        if self.lose:
            self.lose -= 1
            raise TimeoutError("the answer was lost; the batch was written")
        return {"offsets": [{"offset": len(self.sent) - 1}]}


def producer(coordinator: Coordinator) -> Producer:
    return Producer(
        "http://unused",
        transport=coordinator,  # type: ignore[arg-type]
        linger_ms=1,
        retries=0,
        transactional_id="t",
    )


async def test_after_an_abort_the_next_transaction_is_a_new_epoch_from_sequence_0() -> None:
    coordinator = Coordinator(lose=1)
    writer = producer(coordinator)
    await writer.init_transactions()
    writer.begin_transaction()
    lost = await writer.send("orders", b"first", partition=0)
    with pytest.raises(KraftliteError) as failed:
        await writer.commit_transaction()
    assert failed.value.code is ErrorCode.TRANSACTION_ABORTABLE
    assert lost.exception() is not None
    await writer.abort_transaction()
    writer.begin_transaction()
    second = await writer.send("orders", b"second", partition=0)
    await writer.commit_transaction()
    assert second.result().offset == 1
    # the lost batch was (500, 0, 0): the next one must not look like a retry of it
    assert coordinator.sent == [(500, 0, 0), (500, 1, 0)]
    assert coordinator.calls == ["producer", "partitions", "end", "producer", "partitions", "end"]


async def test_nothing_is_sent_once_a_commit_has_begun() -> None:
    coordinator = Coordinator()
    writer = producer(coordinator)
    await writer.init_transactions()
    writer.begin_transaction()
    await writer.send("orders", b"in", partition=0)
    committing = asyncio.create_task(writer.commit_transaction())
    await asyncio.sleep(0.01)
    with pytest.raises(RuntimeError, match="inside an open transaction"):
        await writer.send("orders", b"late", partition=0)
    await committing
    with pytest.raises(RuntimeError, match="inside an open transaction"):
        await writer.send("orders", b"between", partition=0)
    assert coordinator.sent == [(500, 0, 0)]


async def test_a_transaction_that_sent_nothing_ends_without_the_coordinator() -> None:
    coordinator = Coordinator()
    writer = producer(coordinator)
    await writer.init_transactions()
    writer.begin_transaction()
    await writer.commit_transaction()
    writer.begin_transaction()
    await writer.abort_transaction()
    assert coordinator.calls == ["producer"]


async def test_a_commit_whose_answer_was_lost_is_committed_again_never_aborted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        producer_module, "TXN_RETRY", RetryPolicy(lambda exc: False, max_attempts=1)
    )
    coordinator = Coordinator(lose_ends=1)
    writer = producer(coordinator)
    await writer.init_transactions()
    writer.begin_transaction()
    await writer.send("orders", b"in", partition=0)
    with pytest.raises(TimeoutError):
        await writer.commit_transaction()
    with pytest.raises(KraftliteError, match="call commit_transaction again") as refused:
        await writer.abort_transaction()  # the commit may be decided: no abort
    assert refused.value.code is ErrorCode.INVALID_TXN_STATE
    await writer.commit_transaction()
    assert coordinator.ends == [True, True]


async def test_offsets_that_failed_make_the_transaction_abortable() -> None:
    coordinator = Coordinator(refuse_offsets=True)
    writer = producer(coordinator)
    await writer.init_transactions()
    writer.begin_transaction()
    out = await writer.send("orders", b"out", partition=0)
    with pytest.raises(KraftliteError):
        await writer.send_offsets_to_transaction({("in", 0): 5}, "g")
    with pytest.raises(KraftliteError) as failed:
        await writer.commit_transaction()
    assert failed.value.code is ErrorCode.TRANSACTION_ABORTABLE
    assert out.done()
    out.exception()  # sent or not, it goes with the abort
    await writer.abort_transaction()
    assert coordinator.ends == [False]

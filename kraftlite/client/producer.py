"""Producer: records batched per partition, sent as binary batches straight to leaders.

Rules (Kafka's producer, in small):
1. Partition: the record's own, else murmur2 of the key (bit for bit Kafka's), else a sticky
   partition per topic that moves on with each batch.
2. A partition's records wait up to `linger_ms` or until `max_batch_bytes`, then go as one
   batch. One batch per partition is in flight at a time, so order holds across retries.
3. Retriable errors (leader moved, timeouts, not enough replicas) are retried `retries`
   times with backoff (`retry_backoff_ms` doubling, at most 2 s; kraftlite.retry),
   refreshing metadata on NOT_LEADER_OR_FOLLOWER; others fail the batch's futures.
4. `send` returns a future of the record's (topic, partition, offset); `flush` waits for
   everything sent so far.
5. Idempotent by default (with acks=all, as Kafka's producer): the producer gets an id
   (`POST /v1/producer-ids`) and numbers each partition's records; a batch is encoded once,
   with its sequence (format v2), and sent as is on every retry, so the leader writes it
   once however often it arrives. When a batch's fate is unknown after its last retry, or
   the leader no longer knows the producer, the producer takes a new id (its sequences
   start over), as Kafka's does.
6. With a `transactional_id` (Kafka's transactional producer; docs/transactions.md):
   `init_transactions` takes the id's producer id and epoch (fencing earlier producers of
   the id), and records are sent only between `begin_transaction` and
   `commit_transaction` or `abort_transaction`. Each partition joins the transaction
   before its first batch; batches say they are transactional. A batch that fails makes
   the transaction abortable: the commit raises it, and the producer keeps its id (a new
   one would leave the transaction); only `abort_transaction` goes on from there, and it
   bumps the producer's epoch (KIP-360), so a batch of the aborted transaction whose fate
   was unknown is never taken for one of the next (sequences start over). A fenced producer
   (PRODUCER_FENCED) can do nothing more.
7. With a `compression` codec (Kafka's `compression.type`: gzip, snappy, lz4 or zstd), each
   batch goes as one compressed Kafka record batch (`KAFKA_BATCHES_TYPE`), producer id,
   sequence and transactional flag in its header as Kafka's producer writes them; the
   leader keeps it as sent where the topic's `compression.type` allows (docs/batch-format.md
   "Format 3"), so disk, replication and Kafka consumers get the compressed bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import urllib.parse
from dataclasses import dataclass, field

from aiohttp import ClientError

from kraftlite.client.credentials import Credentials
from kraftlite.client.transport import NO_FORWARD, Transport
from kraftlite.clock import Clock, SystemClock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import batch as batch_format
from kraftlite.protocol import stored
from kraftlite.protocol.headers import BATCH_TYPE, KAFKA_BATCHES_TYPE, TRANSACTIONAL_ID
from kraftlite.protocol.kafka import records as kafka_records
from kraftlite.protocol.partitioner import partition_for_key
from kraftlite.retry import Backoff, RetryPolicy, retriable

_PER_RECORD_OVERHEAD = 24  # lengths and a timestamp in the columnar body
# The leader refused the batch for its producer state, so it was not appended: a new
# producer id (sequences from 0) sends it again.
_PRODUCER_RESET = frozenset(
    {
        ErrorCode.UNKNOWN_PRODUCER_ID,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode.INVALID_PRODUCER_EPOCH,
    }
)

_NO_ANSWER = (OSError, TimeoutError, ClientError)  # the leader is down or moving
# rule 7: Kafka's compression.type names (a topic's, without "producer")
CODECS = {"none": kafka_records.Compression.NONE, **stored.CODECS}


def _produce_retriable(exc: BaseException) -> bool:
    return retriable(exc) or isinstance(exc, _NO_ANSWER)


def _unknown_fate(last: Exception) -> BaseException:
    """The error a batch fails with after its last try: a leader that never answered is a
    timeout (the batch may or may not be written, rule 5)."""
    if isinstance(last, _NO_ANSWER):
        return KraftliteError(ErrorCode.REQUEST_TIMED_OUT, repr(last))
    return last


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int  # -1 with acks=0


@dataclass
class _Transaction:
    """Rule 6: the open transaction's partitions, and the first failure in it."""

    partitions: set[tuple[str, int]] = field(default_factory=set)
    error: Exception | None = None
    asked: bool = False  # a partition was asked to join: the coordinator may have it open
    ending: bool = False  # being committed or aborted: no more records
    committing: bool = False  # its commit was sent: only a commit may follow
    aborted: bool = False  # its abort was answered


# CONCURRENT_TRANSACTIONS while the id's last transaction is being ended: asked again
TXN_RETRY = RetryPolicy(
    _produce_retriable, max_attempts=20, backoff=Backoff(0.05, 1.0), exhausted=_unknown_fate
)


@dataclass
class _Pending:
    records: list[batch_format.Record] = field(default_factory=list)
    futures: list[asyncio.Future[RecordMetadata]] = field(default_factory=list)
    size: int = 0
    timer: asyncio.TimerHandle | None = None


class Producer:
    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        acks: str = "all",
        linger_ms: int = 5,
        max_batch_bytes: int = 1 << 20,
        retries: int = 10,
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        transport: Transport | None = None,
        credentials: Credentials | None = None,
        enable_idempotence: bool | None = None,
        clock: Clock | None = None,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60_000,
        compression: str = "none",
    ) -> None:
        if acks not in {"all", "-1", "1", "0"}:
            raise ValueError("acks must be all, -1, 1 or 0")
        if compression not in CODECS:
            raise ValueError(f"compression must be one of {', '.join(CODECS)}")
        self.compression = CODECS[compression]
        if (enable_idempotence or transactional_id) and acks not in {"all", "-1"}:
            raise ValueError("an idempotent or transactional producer needs acks=all")
        if transactional_id is not None and enable_idempotence is False:
            raise ValueError("a transactional producer is idempotent")
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self._transaction: _Transaction | None = None  # rule 6: the one begun, if any
        self.idempotent = (
            acks in {"all", "-1"} if enable_idempotence is None else enable_idempotence
        )
        self._producer: tuple[int, int] | None = None  # (id, epoch), asked on first use
        self._sequences: dict[tuple[str, int], int] = {}  # next sequence, for that id
        self._id_lock = asyncio.Lock()
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.max_batch_bytes = max_batch_bytes
        self.retries = retries
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._retry = RetryPolicy(
            _produce_retriable,
            max_attempts=max(retries, 0) + 1,
            backoff=Backoff(self.retry_backoff_s, 2.0),
            exhausted=_unknown_fate,
        )
        self.request_timeout_ms = request_timeout_ms
        self._clock: Clock = clock or SystemClock()
        self._transport = transport or Transport(
            bootstrap, credentials=credentials, clock=self._clock
        )
        self._pending: dict[tuple[str, int], _Pending] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._sticky: dict[str, int] = {}
        self._round_robin = itertools.count()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._closed = False

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    # -- transactions (rule 6) ----------------------------------------------------------------

    def _transaction_path(self, call: str) -> str:
        assert self.transactional_id is not None
        return f"/v1/transactions/{urllib.parse.quote(self.transactional_id, safe='')}{call}"

    async def init_transactions(self) -> None:
        """Take the transactional id's producer id and epoch: earlier producers of the id
        are fenced and what they left open is aborted (asked again until it is)."""
        if self.transactional_id is None:
            raise RuntimeError("init_transactions needs a transactional_id")
        await self._new_epoch(None)
        self._transaction = None

    async def _new_epoch(self, current: tuple[int, int] | None) -> None:
        """InitProducerId; with `current`, KIP-360's bump of this producer's own epoch
        (after an abort: a batch of the aborted transaction whose fate was unknown must not
        be taken for the next one's, so sequences start over at a new epoch)."""
        body: dict[str, object] = {"transaction_timeout_ms": self.transaction_timeout_ms}
        if current is not None:
            body |= {"producer_id": current[0], "producer_epoch": current[1]}
        async for attempt in TXN_RETRY.run_async(self._clock):
            with attempt:
                answer = await self._transport.call(
                    "POST", self._transaction_path("/producer"), body
                )
                async with self._id_lock:
                    self._producer = (int(answer["producer_id"]), int(answer["producer_epoch"]))
                    self._sequences = {}
                return
        raise AssertionError("unreachable: the attempts end in a return or an error")

    def begin_transaction(self) -> None:
        if self.transactional_id is None or self._producer is None:
            raise RuntimeError("call init_transactions first")
        if self._transaction is not None:
            raise RuntimeError("a transaction is already open")
        self._transaction = _Transaction()

    async def commit_transaction(self, *, tag: str | None = None) -> None:
        """Send what is queued, then commit: every record sent in the transaction becomes
        visible to read_committed readers, or (any batch having failed) none, and this
        raises: call `abort_transaction`. `tag` names the commit (docs/transactions.md).
        No record may be sent from the call on."""
        transaction = self._ending()
        await self.flush()
        if transaction.error is not None:
            raise KraftliteError(
                ErrorCode.TRANSACTION_ABORTABLE,
                f"a batch of the transaction failed ({transaction.error}): abort it",
            )
        if transaction.asked:  # a transaction that added nothing has nothing to commit
            transaction.committing = True  # from here the outcome may be decided: commit
            await self._end(commit=True, tag=tag)  # again on an error, never abort
        self._transaction = None

    async def abort_transaction(self) -> None:
        """Nothing sent in the transaction becomes visible to read_committed readers; the
        producer goes on at a new epoch (`_new_epoch`). Not after a commit was sent whose
        answer did not come: its outcome may be decided, so `commit_transaction` again."""
        transaction = self._ending()
        if transaction.committing:
            raise KraftliteError(
                ErrorCode.INVALID_TXN_STATE,
                "the commit was sent and may be decided: call commit_transaction again",
            )
        await self.flush()
        if transaction.asked:
            if not transaction.aborted:
                try:
                    await self._end(commit=False, tag=None)
                except KraftliteError as exc:  # a partition asked for, never added: the
                    if exc.code is not ErrorCode.INVALID_TXN_STATE:  # bump aborts what is
                        raise
                transaction.aborted = True  # an abort called again only bumps (below)
            assert self._producer is not None
            await self._new_epoch(self._producer)
        self._transaction = None

    def _ending(self) -> _Transaction:
        if self._transaction is None:
            raise RuntimeError("no transaction is open")
        self._transaction.ending = True
        return self._transaction

    async def _end(self, *, commit: bool, tag: str | None) -> None:
        assert self._producer is not None
        body: dict[str, object] = {
            "producer_id": self._producer[0],
            "producer_epoch": self._producer[1],
            "commit": commit,
        }
        if tag is not None:
            body["tag"] = tag
        async for attempt in TXN_RETRY.run_async(self._clock):
            with attempt:
                await self._transport.call("POST", self._transaction_path("/end"), body)

    async def send_offsets_to_transaction(
        self,
        offsets: dict[tuple[str, int], int],
        group: str,
        *,
        member_id: str | None = None,
        member_epoch: int | None = None,
    ) -> None:
        """A consumer's next offsets (topic, partition) -> offset, committed to `group`
        with the open transaction (Kafka's AddOffsetsToTxn and TxnOffsetCommit): the group's
        offsets once it commits, never if it aborts. `member_id`/`member_epoch`: the
        consumer's, so a zombie of an older epoch is refused."""
        transaction = self._open_transaction()
        if transaction.error is not None:
            raise transaction.error
        try:
            await self._send_offsets(transaction, offsets, group, member_id, member_epoch)
        except Exception as exc:  # the offsets may or may not be in: abort, as Kafka's
            transaction.error = exc
            raise

    async def _send_offsets(
        self,
        transaction: _Transaction,
        offsets: dict[tuple[str, int], int],
        group: str,
        member_id: str | None,
        member_epoch: int | None,
    ) -> None:
        assert self._producer is not None
        producer = {"producer_id": self._producer[0], "producer_epoch": self._producer[1]}
        transaction.asked = True
        group_path = urllib.parse.quote(group, safe="")
        body: dict[str, object] = {
            **producer,
            "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in offsets.items()],
        }
        if member_id is not None:
            body["member_id"] = member_id
        if member_epoch is not None:
            body["member_epoch"] = member_epoch
        async for attempt in TXN_RETRY.run_async(self._clock):
            with attempt:
                await self._transport.call(
                    "POST", self._transaction_path("/groups"), {**producer, "group": group}
                )
        async for attempt in TXN_RETRY.run_async(self._clock):
            with attempt:
                await self._transport.call(
                    "POST",
                    f"/v1/groups/{group_path}/offsets",
                    body,
                    headers={TRANSACTIONAL_ID: self.transactional_id or ""},
                )

    def _open_transaction(self) -> _Transaction:
        if self._transaction is None or self._transaction.ending:
            raise RuntimeError("no transaction is open")
        return self._transaction

    async def _join(self, transaction: _Transaction, topic: str, partition: int) -> None:
        """Rule 6: `partition` in the open transaction before its first batch; nothing
        more is sent once a batch of it failed."""
        if transaction.error is not None:
            raise transaction.error
        if (topic, partition) in transaction.partitions:
            return
        assert self._producer is not None
        transaction.asked = True  # from here it may be open at the coordinator
        async for attempt in TXN_RETRY.run_async(self._clock):
            with attempt:
                await self._transport.call(
                    "POST",
                    self._transaction_path("/partitions"),
                    {
                        "producer_id": self._producer[0],
                        "producer_epoch": self._producer[1],
                        "partitions": [{"topic": topic, "partition": partition}],
                    },
                )
        transaction.partitions.add((topic, partition))

    # -- sending --------------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        headers: batch_format.Headers = (),
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the future resolves once the cluster acknowledged it.
        `headers` are (name, value) pairs; a value may be None (Kafka's null header value)."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self.transactional_id is not None and (
            self._transaction is None or self._transaction.ending
        ):
            raise RuntimeError("a transactional producer sends inside an open transaction")
        transaction = self._transaction
        count = self._transport.known_partition_count(topic)  # cached: no await per record
        if not count:
            count = len(await self._transport.partitions(topic))
            if self._transaction is not transaction or (
                transaction is not None and transaction.ending
            ):  # the transaction it was sent in ended meanwhile: not into the next one
                raise RuntimeError("the transaction ended while the record was being sent")
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, count)
            else:
                partition = self._sticky.get(topic)
                if partition is None:
                    partition = self._sticky[topic] = next(self._round_robin) % count
        elif not 0 <= partition < count:
            raise KraftliteError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has {count} partitions"
            )
        record = batch_format.Record(
            value, key, headers, self._clock.now_ms() if timestamp is None else timestamp
        )
        loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        pending = self._pending.get((topic, partition))
        if pending is None:
            pending = self._pending[topic, partition] = _Pending()
        pending.records.append(record)
        pending.futures.append(future)
        pending.size += len(value or b"") + len(key or b"") + _PER_RECORD_OVERHEAD
        if headers:
            pending.size += sum(len(n) + len(v or b"") for n, v in headers)
        if pending.size >= self.max_batch_bytes:
            self._ship(topic, partition)
        elif pending.timer is None:
            pending.timer = loop.call_later(self.linger_s, self._ship, topic, partition)
        return future

    def _ship(self, topic: str, partition: int) -> None:
        pending = self._pending.pop((topic, partition), None)
        if pending is None or not pending.records:
            return
        if pending.timer is not None:
            pending.timer.cancel()
        if self._sticky.get(topic) == partition:  # the next records go elsewhere
            count = max(self._transport.known_partition_count(topic), 1)
            self._sticky[topic] = next(self._round_robin) % count
        task = asyncio.get_running_loop().create_task(self._send_batch(topic, partition, pending))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _send_batch(self, topic: str, partition: int, pending: _Pending) -> None:
        lock = self._locks.setdefault((topic, partition), asyncio.Lock())
        async with lock:  # one batch per partition in flight: order holds across retries
            transaction = self._transaction
            try:
                if transaction is not None:
                    await self._join(transaction, topic, partition)
                offsets = await self._produce_with_retries(topic, partition, pending.records)
            except Exception as exc:  # noqa: BLE001 - every waiting future learns why
                if transaction is not None and transaction.error is None:
                    transaction.error = exc
                for future in pending.futures:
                    if not future.done():
                        future.set_exception(exc)
                return
            for future, offset in zip(pending.futures, offsets, strict=True):
                if not future.done():
                    future.set_result(RecordMetadata(topic, partition, offset))

    async def _producer_id(self) -> tuple[int, int] | None:
        """Rule 5: this producer's (id, epoch), asked of any broker once (one request
        however many partitions ship at once); a new id starts every partition at
        sequence 0. A cluster without producer ids (older brokers) gets plain batches."""
        if not self.idempotent:
            return None
        async with self._id_lock:
            if self._producer is None:
                try:
                    answer = await self._transport.call("POST", "/v1/producer-ids")
                except KraftliteError as exc:
                    if exc.code is not ErrorCode.INVALID_REQUEST:  # (404: no such route)
                        raise
                    self.idempotent = False
                    return None
                self._producer = (int(answer["producer_id"]), int(answer["producer_epoch"]))
                self._sequences = {}
            return self._producer

    def _forget(self, producer: tuple[int, int] | None) -> None:
        """The next batches go as a new producer, unless another batch did that already
        (never a transactional one: rule 6)."""
        if self.transactional_id is not None:
            return
        if producer is not None and self._producer == producer:
            self._producer = None

    async def _encode(
        self, topic: str, partition: int, records: list[batch_format.Record]
    ) -> tuple[bytes, tuple[int, int] | None]:
        """The batch as it is sent, and sent again on retries, with the producer it was
        numbered for (rule 5)."""
        now = self._clock.now_ms()
        producer = await self._producer_id()
        if self.compression is not kafka_records.Compression.NONE:  # rule 7
            return self._kafka_batch(topic, partition, records, now, producer), producer
        if producer is None:
            return batch_format.encode_records(records, now_ms=now), None
        body = batch_format.encode_batch(
            [r.value for r in records],
            keys=[r.key for r in records],
            timestamps=[now if r.timestamp is None else r.timestamp for r in records],
            headers=[r.headers for r in records],
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=self._sequences.get((topic, partition), 0),
            transactional=self.transactional_id is not None,
        )
        return body, producer

    def _kafka_batch(
        self,
        topic: str,
        partition: int,
        records: list[batch_format.Record],
        now: int,
        producer: tuple[int, int] | None,
    ) -> bytes:
        """Rule 7: the records as one compressed Kafka batch, numbered as rule 5 says."""
        return kafka_records.encode_batch(
            [
                kafka_records.KafkaRecord(
                    i, now if r.timestamp is None else r.timestamp, r.key, r.value, r.headers
                )
                for i, r in enumerate(records)
            ],
            producer_id=kafka_records.NO_PRODUCER_ID if producer is None else producer[0],
            producer_epoch=-1 if producer is None else producer[1],
            base_sequence=-1 if producer is None else self._sequences.get((topic, partition), 0),
            compression=self.compression,
            is_transactional=self.transactional_id is not None,
        )

    async def _produce_with_retries(
        self, topic: str, partition: int, records: list[batch_format.Record]
    ) -> list[int]:
        """Rule 3 and 5: the same bytes on each retry; the partition's sequence moves on
        once they are acknowledged (under the producer id they carried, if it is still
        this producer's); any failure means a new producer id, and a refusal for the
        producer's state (nothing appended) is sent once more as that new producer."""
        for again in (True, False):
            body, producer = await self._encode(topic, partition, records)
            try:
                offsets = await self._attempts(topic, partition, body)
            except KraftliteError as exc:
                self._forget(producer)
                transactional = self.transactional_id is not None
                if (
                    again
                    and producer is not None
                    and exc.code in _PRODUCER_RESET
                    and not transactional
                ):
                    continue
                raise
            except BaseException:
                self._forget(producer)
                raise
            if producer is not None and self._producer == producer:
                key = (topic, partition)
                self._sequences[key] = (self._sequences.get(key, 0) + len(records)) % 2**31
            return offsets
        raise AssertionError("unreachable")

    async def _attempts(self, topic: str, partition: int, body: bytes) -> list[int]:
        path = f"/v1/topics/{topic}/partitions/{partition}/records"
        params = {"acks": self.acks, "timeout_ms": str(self.request_timeout_ms)}
        async for attempt in self._retry.run_async(self._clock):
            with attempt:
                try:
                    url = await self._transport.leader_url(topic, partition)
                    answer = await self._transport.request(
                        url,
                        "POST",
                        path,
                        params=params,
                        data=body,
                        headers={
                            "Content-Type": BATCH_TYPE
                            if self.compression is kafka_records.Compression.NONE
                            else KAFKA_BATCHES_TYPE,
                            **NO_FORWARD,
                            **self._txn_header,
                        },
                    )
                except _NO_ANSWER:
                    self._transport.invalidate(topic)  # leader down: who leads now?
                    raise
                return [-1 if o.get("offset") is None else o["offset"] for o in answer["offsets"]]
        raise AssertionError("unreachable: the attempts end in a return or an error")

    @property
    def _txn_header(self) -> dict[str, str]:
        return {} if self.transactional_id is None else {TRANSACTIONAL_ID: self.transactional_id}

    async def flush(self) -> None:
        """Send everything queued now and wait until it is acknowledged (or failed)."""
        for topic, partition in list(self._pending):
            self._ship(topic, partition)
        while self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def close(self) -> None:
        if self._closed:
            return
        with contextlib.suppress(Exception):
            await self.flush()
        self._closed = True
        await self._transport.close()

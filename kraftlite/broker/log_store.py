"""The port a broker's replicas keep their logs through: what `Partition`, `ReplicaManager`
and `Broker` (and the service, the Kafka edge and the group coordinator, through
`Partition.log`) ask of partition storage, and nothing more.

Two adapters, one contract (tests/contract/test_partition_log_contract.py runs the same
scenarios over both):

- `kraftlite.storage.log.LogStorage` / `PartitionLog`: LMDB, one environment per broker
  (production; docs/adr/0001).
- `kraftlite.storage.memory.MemoryLogStorage` / `MemoryPartitionLog`: plain Python lists, for
  in-process tests of the broker, the service and the edges (tests/harness/inprocess.py).

The contract (storage/log.py's rules, as a caller sees them):
1. Offsets only grow: a leader's append assigns the log end offset and stamps its leader
   epoch; a follower's keeps the leader's stamps, at the log end, or (`allow_gaps`, which
   brokers pass) across a gap the leader's compaction left (`rewrite_batches`; never
   inside a batch). An append is all or nothing.
2. Leader epochs never decrease; `epochs()` says where each starts (KIP-101) and
   `end_offset_for` where one ends.
3. The high watermark stays within [log start, log end]; `checkpoint_high_watermark`
   makes it durable (what a restart finds).
4. Retention removes whole batches from the head, never one ending above the limit (the
   high watermark by default); truncation removes whole batches from the tail.
5. A deleted partition's log refuses everything with UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from kraftlite.protocol.batch import BatchHeader
from kraftlite.storage.log import AppendInfo, BatchRewrite, StorageConfig


class ReplicaLog(Protocol):
    """One partition's replica log. Mutations are serialized by the adapter; reads may
    come from any thread (retention, checkpoints and producer-state rebuilds run in worker
    threads) and see the last committed state."""

    @property
    def name(self) -> str: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def size_bytes(self) -> int:
        """The stored batches' bytes."""
        ...

    @property
    def latest_epoch(self) -> int:
        """The leader epoch of the last batch (-1 with no epoch cache)."""
        ...

    def epochs(self) -> list[tuple[int, int]]:
        """The leader-epoch cache: (leader_epoch, start_offset), oldest first."""
        ...

    def append(self, batch: bytes | bytearray | memoryview, leader_epoch: int) -> AppendInfo:
        """Leader path: validate a producer's batch, assign it the log end offset, stamp
        `leader_epoch` (CORRUPT_MESSAGE, INVALID_REQUEST, FENCED_LEADER_EPOCH)."""
        ...

    def append_replicated(
        self, data: bytes | bytearray | memoryview, *, allow_gaps: bool = False
    ) -> AppendInfo | None:
        """Follower path: stored batches as the leader stamped them, the first at the log
        end offset; with `allow_gaps` (a compacted log's gaps) a batch may start above the
        previous one's end. None for no batches."""
        ...

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> bytes:
        """The stored batches from the one holding `offset`: at least one if any, then whole
        batches within `max_bytes`, none ending above `max_offset` (OFFSET_OUT_OF_RANGE
        outside [log start, log end])."""
        ...

    def offset_for_time(
        self, timestamp: int, max_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped at or after `timestamp`, below
        `max_offset`."""
        ...

    @property
    def indexed_offset(self) -> int:
        """Where the key index ends (storage/log.py rule 8)."""
        ...

    def index_keys(self, max_bytes: int) -> int:
        """Index about `max_bytes` of batches more, up to the high watermark; the new
        `indexed_offset`."""
        ...

    def key_offset(self, key: bytes) -> int | None:
        """The offset of `key`'s latest record below `indexed_offset`, if any."""
        ...

    def index_page(self, after: bytes | None, limit: int) -> list[tuple[bytes, int]]:
        """Up to `limit` entries (index key, offset of its record) after the index key
        `after` (storage/keys.py), in index order."""
        ...

    def batch_headers(self, start: int = 0) -> list[BatchHeader]:
        """The header of every stored batch from the one holding `start` on, first to last
        (header bytes only)."""
        ...

    def producer_headers(self) -> list[BatchHeader]:
        """The headers of every stored idempotent-producer (v2) batch, first to last."""
        ...

    def end_offset_for(self, leader_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for a follower asking where `leader_epoch` ends."""
        ...

    def set_high_watermark(self, offset: int) -> None: ...

    def checkpoint_high_watermark(self) -> None: ...

    def truncate_to(self, offset: int) -> None: ...

    def truncate_fully_and_start_at(self, offset: int) -> None: ...

    def advance_log_start(self, offset: int) -> int:
        """Move the log start up to `offset` (never past the high watermark), whole
        batches below it deleted, a batch holding it kept; the records no longer readable."""
        ...

    @property
    def cleaned_offset(self) -> int:
        """Where the cleaner's last pass ended: below it the log was cleaned (Kafka's
        cleaner checkpoint, written with the pass's last rewrite)."""
        ...

    @property
    def truncations(self) -> int:
        """Truncations and resets since the log was opened."""
        ...

    def rewrite_batches(
        self,
        rewrites: Sequence[BatchRewrite],
        cleaned_to: int | None = None,
        truncations: int | None = None,
    ) -> int:
        """Log compaction: stored batches replaced by the runs of their records the cleaner
        keeps (offsets kept, gaps between batches), each batch as it was or as rewritten
        after a crash; the newest, one not ending below the high watermark and one changed
        since the cleaner read it are left. LogChanged (storage/log.py), nothing written,
        when the log was truncated since it held `truncations` or one of the batches now
        holds the log start. The bytes freed."""
        ...

    def apply_retention(
        self,
        now_ms: int,
        retention_ms: int,
        retention_bytes: int,
        max_offset: int | None = None,
        before_offset: int | None = None,
    ) -> int: ...


class LogStore(Protocol):
    """All replica logs of one broker, by name (`replica_manager.log_name`)."""

    @property
    def config(self) -> StorageConfig:
        """Where the logs live (`path`; the memory adapter's is ":memory:")."""
        ...

    def open_partition(self, name: str) -> ReplicaLog:
        """The log of partition `name`, created empty if it does not exist."""
        ...

    def partition_names(self) -> list[str]: ...

    def delete_partition(self, name: str) -> None: ...


if TYPE_CHECKING:  # mypy checks that both adapters keep the port (no runtime import)
    from kraftlite.storage.log import LogStorage
    from kraftlite.storage.memory import MemoryLogStorage

    def _lmdb_keeps_the_port(storage: LogStorage) -> LogStore:
        return storage

    def _memory_keeps_the_port(storage: MemoryLogStorage) -> LogStore:
        return storage

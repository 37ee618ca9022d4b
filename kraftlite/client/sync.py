"""A thin synchronous facade over the async client, for scripts, the CLI and Spark
executors: one event loop on a daemon thread per facade object runs the async client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from kraftlite import eventloop
from kraftlite.client.admin import Admin
from kraftlite.client.consumer import Consumer, ConsumerRecord
from kraftlite.client.producer import Producer, RecordMetadata

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = eventloop.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def _on_loop(loop: _LoopThread, method: Any) -> Any:
    """`method` called on the facade's loop thread; coroutines run to their result."""

    def call(*args: Any, **kwargs: Any) -> Any:
        async def run() -> Any:
            result = method(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return loop.run(run())

    return call


class SyncAdmin:
    def __init__(self, bootstrap: str | list[str], **settings: Any) -> None:
        self._loop = _LoopThread()
        self._admin = Admin(bootstrap, **settings)

    def __enter__(self) -> SyncAdmin:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return _on_loop(self._loop, getattr(self._admin, name))

    def close(self) -> None:
        self._loop.run(self._admin.close())
        self._loop.stop()


class SyncProducer:
    def __init__(self, bootstrap: str | list[str], **settings: Any) -> None:
        self._loop = _LoopThread()
        self._producer = Producer(bootstrap, **settings)

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(
        self, topic: str, value: bytes | None, key: bytes | None = None, **kwargs: Any
    ) -> concurrent.futures.Future[RecordMetadata]:
        """Queue a record (in call order); the future resolves when it is acknowledged."""
        queued = self._loop.run(self._producer.send(topic, value, key, **kwargs))

        async def acknowledged() -> RecordMetadata:
            return await queued

        return asyncio.run_coroutine_threadsafe(acknowledged(), self._loop.loop)

    def flush(self) -> None:
        self._loop.run(self._producer.flush())

    # a transactional producer's calls (producer.py rule 6)
    def init_transactions(self) -> None:
        self._loop.run(self._producer.init_transactions())

    def begin_transaction(self) -> None:
        async def begin() -> None:
            self._producer.begin_transaction()

        self._loop.run(begin())

    def commit_transaction(self, *, tag: str | None = None) -> None:
        self._loop.run(self._producer.commit_transaction(tag=tag))

    def abort_transaction(self) -> None:
        self._loop.run(self._producer.abort_transaction())

    def send_offsets_to_transaction(
        self, offsets: dict[tuple[str, int], int], group: str, **member: Any
    ) -> None:
        self._loop.run(self._producer.send_offsets_to_transaction(offsets, group, **member))

    def close(self) -> None:
        self._loop.run(self._producer.close())
        self._loop.stop()


class SyncConsumer:
    def __init__(self, bootstrap: str | list[str], **settings: Any) -> None:
        self._loop = _LoopThread()
        self._consumer = Consumer(bootstrap, **settings)

    def __enter__(self) -> SyncConsumer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def poll(self, timeout_ms: int = 1000) -> list[ConsumerRecord]:
        return self._loop.run(self._consumer.poll(timeout_ms))

    def __getattr__(self, name: str) -> Any:
        return _on_loop(self._loop, getattr(self._consumer, name))

    def close(self) -> None:
        self._loop.run(self._consumer.close())
        self._loop.stop()

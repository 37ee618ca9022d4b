"""Our Kafka codec (kraftlite/protocol/kafka/messages.py) beside kio's on the hot path.

The numbers behind docs/adr/0004-typed-kafka-bodies.md. Each figure is the median of
`--runs` runs; a run times about `--seconds` of calls in a row and reports the mean per
call (µs). Ours and kio's alternate within each run, so drift on this machine hits both.

Cases (frames and bodies are built once; the same bytes go to both codecs, and before
timing anything the script checks that both read the same values and write the same bytes):
  produce-v9-decode       a Produce v9 request: 1 topic, 1 partition, a 16 KiB record set
  produce-v9-encode       its answer (1 partition)
  fetch-v12-decode-N      a Fetch v12 request for N partitions (N/10 topics of 10 at most)
  fetch-v12-encode-N      its answer: N partitions, each 1 KiB of records
  metadata-v12-decode     a Metadata v12 request naming 1,000 topics
  metadata-v12-encode     its answer: 3 brokers, 1,000 topics of 1 partition (3 replicas)
Answers are timed twice: encoding a body already built ("encode"), and building the body
too ("build+encode": our dicts, kio's frozen dataclasses of typed primitives), since a
handler pays for both. A "decode" includes the request header.

Our decoder is timed as the listener runs it, with its item budget on (array items and
tagged fields counted, wire.py rule 2); kio's decoder has no such bound.

Run (kio beside ours; kio is no dependency of kraftlite, so it lives in a venv of its own):
    python3.11 -m venv /tmp/kiovenv && /tmp/kiovenv/bin/pip install kio==0.6.5
    PYTHONPATH=. /tmp/kiovenv/bin/python scripts/bench_kafka_codec.py
With only .venv (kio not importable) it prints our figures alone and says so:
    .venv/bin/python scripts/bench_kafka_codec.py
"""

from __future__ import annotations

import argparse
import datetime
import io
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kraftlite.protocol.kafka import messages
from kraftlite.protocol.kafka.messages import ApiKey

try:  # kio is optional: a venv of its own (see above)
    import kio
    from kio.schema.errors import ErrorCode
    from kio.schema.fetch.v12 import request as kio_fetch_request
    from kio.schema.fetch.v12 import response as kio_fetch
    from kio.schema.metadata.v12 import request as kio_metadata_request
    from kio.schema.metadata.v12 import response as kio_metadata
    from kio.schema.produce.v9 import request as kio_produce_request
    from kio.schema.produce.v9 import response as kio_produce
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.schema.response_header.v1.header import ResponseHeader
    from kio.schema.types import BrokerId, TopicName
    from kio.serial import entity_reader, entity_writer
    from kio.static.primitive import Records, i32, i32Timedelta, i64
except ImportError:
    kio = None

PRODUCE_RECORDS = os.urandom(16 << 10)
FETCH_RECORDS = os.urandom(1 << 10)
METADATA_TOPICS = 1000
CORRELATION_ID = 7
CLIENT_ID = "bench-client"
Run = Callable[[], object]


def _layout(partitions: int) -> list[tuple[str, list[int]]]:
    """(topic, partitions) of a fetch: 10 partitions a topic at most."""
    topics = max(1, partitions // 10)
    return [(f"topic-{t}", list(range(partitions // topics))) for t in range(topics)]


# ---------------------------------------------------------------------------------- ours


def _produce_request() -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 30_000,
        "topic_data": [
            {"name": "bench", "partition_data": [{"index": 0, "records": PRODUCE_RECORDS}]}
        ],
    }


def _produce_answer() -> dict[str, Any]:
    partition = {
        "index": 0,
        "error_code": 0,
        "base_offset": 123_456,
        "log_append_time_ms": -1,
        "log_start_offset": 0,
    }
    return {"responses": [{"name": "bench", "partition_responses": [partition]}]}


def _fetch_request(partitions: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": 52_428_800,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": 3,
                        "fetch_offset": 1_000_000,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1_048_576,
                    }
                    for p in indexes
                ],
            }
            for topic, indexes in _layout(partitions)
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def _fetch_answer(partitions: int) -> dict[str, Any]:
    return {
        "error_code": 0,
        "session_id": 12345,
        "responses": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": 0,
                        "high_watermark": 1_000_000,
                        "last_stable_offset": 1_000_000,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        "records": FETCH_RECORDS,
                    }
                    for p in indexes
                ],
            }
            for topic, indexes in _layout(partitions)
        ],
    }


def _metadata_request() -> dict[str, Any]:
    return {
        "topics": [
            {"topic_id": uuid.UUID(int=0), "name": f"topic-{n:05d}"} for n in range(METADATA_TOPICS)
        ],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }


def _metadata_answer() -> dict[str, Any]:
    return {
        "brokers": [
            {"node_id": n, "host": f"broker-{n}.example", "port": 9092, "rack": None}
            for n in (1, 2, 3)
        ],
        "cluster_id": "bench-cluster",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": f"topic-{n:05d}",
                "topic_id": uuid.UUID(int=n + 1),
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": 1 + n % 3,
                        "leader_epoch": 4,
                        "replica_nodes": [1, 2, 3],
                        "isr_nodes": [1, 2, 3],
                        "offline_replicas": [],
                    }
                ],
                "topic_authorized_operations": -(2**31),
            }
            for n in range(METADATA_TOPICS)
        ],
    }


def _frame(key: ApiKey, version: int, body: dict[str, Any]) -> bytes:
    return messages.encode_request(key, version, CORRELATION_ID, CLIENT_ID, body)


FRAMES: dict[str, bytes] = {
    "produce-v9-decode": _frame(ApiKey.PRODUCE, 9, _produce_request()),
    "fetch-v12-decode-1": _frame(ApiKey.FETCH, 12, _fetch_request(1)),
    "fetch-v12-decode-100": _frame(ApiKey.FETCH, 12, _fetch_request(100)),
    "metadata-v12-decode": _frame(ApiKey.METADATA, 12, _metadata_request()),
}
# answers: name -> (api key, version, a builder of the body)
ANSWERS: dict[str, tuple[ApiKey, int, Callable[[], dict[str, Any]]]] = {
    "produce-v9": (ApiKey.PRODUCE, 9, _produce_answer),
    "fetch-v12-1": (ApiKey.FETCH, 12, lambda: _fetch_answer(1)),
    "fetch-v12-100": (ApiKey.FETCH, 12, lambda: _fetch_answer(100)),
    "metadata-v12": (ApiKey.METADATA, 12, _metadata_answer),
}


def _encode_name(answer: str, build: bool) -> str:
    """`fetch-v12-100` -> `fetch-v12-encode-100` (or `-build+encode-`)."""
    api, version, *rest = answer.split("-")
    return "-".join([api, version, "build+encode" if build else "encode", *rest])


def _ours() -> dict[str, Run]:
    cases: dict[str, Run] = {}
    for name, frame in FRAMES.items():
        cases[name] = lambda frame=frame: messages.decode_request(frame)
    for name, (key, version, build) in ANSWERS.items():
        built = build()
        cases[_encode_name(name, False)] = lambda key=key, version=version, built=built: (
            messages.encode_response(key, version, CORRELATION_ID, built)
        )
        cases[_encode_name(name, True)] = lambda key=key, version=version, build=build: (
            messages.encode_response(key, version, CORRELATION_ID, build())
        )
    return cases


# ----------------------------------------------------------------------------------- kio


def _kio_builders() -> dict[str, Callable[[], Any]]:
    """kio's entity for each answer, built as typed code must build it."""
    no_throttle = i32Timedelta.parse(datetime.timedelta(0))

    def produce() -> Any:
        partition = kio_produce.PartitionProduceResponse(
            index=i32(0),
            error_code=ErrorCode.none,
            base_offset=i64(123_456),
            log_append_time=None,
            log_start_offset=i64(0),
            record_errors=(),
        )
        topic = kio_produce.TopicProduceResponse(
            name=TopicName("bench"), partition_responses=(partition,)
        )
        return kio_produce.ProduceResponse(responses=(topic,), throttle_time=no_throttle)

    def fetch(partitions: int) -> Any:
        return kio_fetch.FetchResponse(
            throttle_time=no_throttle,
            error_code=ErrorCode.none,
            session_id=i32(12345),
            responses=tuple(
                kio_fetch.FetchableTopicResponse(
                    topic=TopicName(topic),
                    partitions=tuple(
                        kio_fetch.PartitionData(
                            partition_index=i32(p),
                            error_code=ErrorCode.none,
                            high_watermark=i64(1_000_000),
                            last_stable_offset=i64(1_000_000),
                            log_start_offset=i64(0),
                            aborted_transactions=None,
                            preferred_read_replica=BrokerId(-1),
                            records=Records(FETCH_RECORDS),
                        )
                        for p in indexes
                    ),
                )
                for topic, indexes in _layout(partitions)
            ),
        )

    def metadata() -> Any:
        replicas = (BrokerId(1), BrokerId(2), BrokerId(3))
        return kio_metadata.MetadataResponse(
            throttle_time=no_throttle,
            brokers=tuple(
                kio_metadata.MetadataResponseBroker(
                    node_id=BrokerId(n), host=f"broker-{n}.example", port=i32(9092), rack=None
                )
                for n in (1, 2, 3)
            ),
            cluster_id="bench-cluster",
            controller_id=BrokerId(1),
            topics=tuple(
                kio_metadata.MetadataResponseTopic(
                    error_code=ErrorCode.none,
                    name=TopicName(f"topic-{n:05d}"),
                    topic_id=uuid.UUID(int=n + 1),
                    is_internal=False,
                    partitions=(
                        kio_metadata.MetadataResponsePartition(
                            error_code=ErrorCode.none,
                            partition_index=i32(0),
                            leader_id=BrokerId(1 + n % 3),
                            leader_epoch=i32(4),
                            replica_nodes=replicas,
                            isr_nodes=replicas,
                            offline_replicas=(),
                        ),
                    ),
                    topic_authorized_operations=i32(-(2**31)),
                )
                for n in range(METADATA_TOPICS)
            ),
        )

    return {
        "produce-v9": produce,
        "fetch-v12-1": lambda: fetch(1),
        "fetch-v12-100": lambda: fetch(100),
        "metadata-v12": metadata,
    }


def _kio() -> dict[str, Run]:
    read_header = entity_reader(RequestHeader)
    readers = {
        "produce-v9-decode": entity_reader(kio_produce_request.ProduceRequest),
        "fetch-v12-decode-1": entity_reader(kio_fetch_request.FetchRequest),
        "fetch-v12-decode-100": entity_reader(kio_fetch_request.FetchRequest),
        "metadata-v12-decode": entity_reader(kio_metadata_request.MetadataRequest),
    }
    writers = {
        "produce-v9": entity_writer(kio_produce.ProduceResponse),
        "fetch-v12-1": entity_writer(kio_fetch.FetchResponse),
        "fetch-v12-100": entity_writer(kio_fetch.FetchResponse),
        "metadata-v12": entity_writer(kio_metadata.MetadataResponse),
    }
    write_header = entity_writer(ResponseHeader)
    header = ResponseHeader(correlation_id=i32(CORRELATION_ID))

    def decode(name: str) -> Run:
        frame, read = FRAMES[name], readers[name]

        def run() -> object:
            parsed, size = read_header(frame, 0)
            body, _ = read(frame, size)
            return parsed, body

        return run

    def encode(name: str, build: Callable[[], Any]) -> Run:
        write = writers[name]

        def run() -> bytes:
            buffer = io.BytesIO()
            write_header(buffer, header)
            write(buffer, build())
            return buffer.getvalue()

        return run

    cases = {name: decode(name) for name in FRAMES}
    for name, build in _kio_builders().items():
        built = build()
        cases[_encode_name(name, False)] = encode(name, lambda built=built: built)
        cases[_encode_name(name, True)] = encode(name, build)
    return cases


def _check_same(ours: dict[str, Run], theirs: dict[str, Run]) -> None:
    """The same bytes out of both encoders, the same values out of both decoders."""
    for name in ANSWERS:
        for build in (False, True):
            case = _encode_name(name, build)
            assert theirs[case]() == ours[case](), f"{case}: kio and ours write different bytes"
    produce: Any = ours["produce-v9-decode"]()
    _, kio_produce_body = theirs["produce-v9-decode"]()
    records = kio_produce_body.topic_data[0].partition_data[0].records
    assert bytes(records) == produce.body["topic_data"][0]["partition_data"][0]["records"]
    fetch: Any = ours["fetch-v12-decode-100"]()
    _, kio_fetch_body = theirs["fetch-v12-decode-100"]()
    assert [p.fetch_offset for t in kio_fetch_body.topics for p in t.partitions] == [
        p["fetch_offset"] for t in fetch.body["topics"] for p in t["partitions"]
    ]
    metadata: Any = ours["metadata-v12-decode"]()
    _, kio_metadata_body = theirs["metadata-v12-decode"]()
    assert [t.name for t in kio_metadata_body.topics] == [
        t["name"] for t in metadata.body["topics"]
    ]


# ------------------------------------------------------------------------------- running


def _per_call_us(run: Run, number: int) -> float:
    started = time.perf_counter()
    for _ in range(number):
        run()
    return (time.perf_counter() - started) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (the median)")
    parser.add_argument("--seconds", type=float, default=0.2, help="time per run, roughly")
    args = parser.parse_args()
    ours = _ours()
    theirs = _kio() if kio is not None else {}
    if theirs:
        _check_same(ours, theirs)
    print(f"python {sys.version.split()[0]}, medians of {args.runs} runs, µs per call")
    if kio is None:
        print("kio is not importable here: our figures only (the docstring says how to add kio)")
    else:
        print(f"kio {kio.__version__}: the same bytes written and values read as ours")
    print(f"{'case':28} {'ours':>10} {'kio':>10} {'kio/ours':>9}")
    for name, run in ours.items():
        number = max(1, int(args.seconds / max(_per_call_us(run, 3) / 1e6, 1e-7)))
        mine: list[float] = []
        other: list[float] = []
        for _ in range(args.runs):
            mine.append(_per_call_us(run, number))
            if theirs:
                other.append(_per_call_us(theirs[name], number))
        ours_us = statistics.median(mine)
        if other:
            kio_us = statistics.median(other)
            print(f"{name:28} {ours_us:10.1f} {kio_us:10.1f} {kio_us / ours_us:9.2f}")
        else:
            print(f"{name:28} {ours_us:10.1f} {'-':>10} {'-':>9}")


if __name__ == "__main__":
    main()

"""What the trust boundary costs: the same load against a plain cluster and against one with
TLS on every listener and node call, client authentication and ACLs (a non-super user whose
every request is checked), interleaved run by run in one process, medians printed side by
side (issue 12's benchmark; goal: batched produce within 15 % of plain).

Each cluster: 3 controllers + 3 brokers (tests/harness), one topic of 3 partitions, RF 3.
  produce   --producers concurrent binary batches of --batch x --size bytes, acks=all,
            straight to each partition's leader
  kafka     the same load over the Kafka listener: pre-encoded Kafka batches, one
            connection per producer to the partition's leader (SASL PLAIN over TLS as the
            same user on the secure cluster), so both edges' gate costs show (issue 24)
  latency   one record per request, acks=all, JSON through the topic endpoint: p50 / p99
  consume   binary fetches of everything produced, from each leader
The secure user authenticates with HTTP Basic on the first request (the broker remembers a
good check) - what the Python client does.

Run: python scripts/bench_security.py [--runs 3] [--seconds 5]; the last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import trustme

from kraftlite.protocol import batch as fmt

try:
    from kraftlite.protocol.kafka import messages, records
except ImportError:  # a tree from before issue 24 (for before/after figures)
    from kraftlite.kafka import messages, records  # type: ignore[no-redef]
from tests.harness.processes import TLS_CONTEXT, Cluster, http

BATCH = "application/vnd.kraftlite.batch"
ADMIN = ("admin", "bench-admin-pw")
USER = ("bench", "bench-user-pw")


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def start_plain(root: Path) -> Cluster:
    cluster = Cluster(root / "plain", kafka=True)
    cluster.start()
    return cluster


def start_secure(root: Path, ca: trustme.CA) -> tuple[Cluster, ssl.SSLContext]:
    certs = root / "certs"
    certs.mkdir(parents=True)
    node = ca.issue_cert("127.0.0.1", "localhost")
    node.private_key_and_cert_chain_pem.write_to_path(str(certs / "node.pem"))
    node.private_key_pem.write_to_path(str(certs / "node.key"))
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    settings = {
        "tls.cert.file": str(certs / "node.pem"),
        "tls.key.file": str(certs / "node.key"),
        "tls.ca.file": str(certs / "ca.pem"),
        "auth.required": True,
        "super.users": ["User:admin"],
    }
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    TLS_CONTEXT.append(context)
    cluster = Cluster(
        root / "secure",
        scheme="https",
        kafka=True,
        broker_config=settings,
        controller_config={
            **settings,
            "auth.bootstrap.user": ADMIN[0],
            "auth.bootstrap.password": ADMIN[1],
        },
    )
    cluster.start()
    return cluster, context


def prepare(cluster: Cluster, topic: str, headers: dict[str, str], user: str | None) -> None:
    url = cluster.urls[1]
    deadline = time.monotonic() + 30
    while True:
        status, answer = http(
            "POST",
            url + "/v1/topics",
            {"name": topic, "partitions": 3, "replication_factor": 3},
            headers=headers,
        )
        if status == 201 or time.monotonic() > deadline:
            break
        time.sleep(0.3)  # the bootstrap user appears once a controller is active
    assert status == 201, answer
    if user is not None:
        status, answer = http(
            "POST", url + "/v1/users", {"name": USER[0], "password": USER[1]}, headers=headers
        )
        assert status == 201, answer
        for operation in ("WRITE", "READ"):
            status, answer = http(
                "POST",
                url + "/v1/acls",
                {
                    "principal": f"User:{USER[0]}",
                    "operation": operation,
                    "resource_type": "TOPIC",
                    "resource_name": topic,
                },
                headers=headers,
            )
            assert status == 201, answer


def leaders(cluster: Cluster, topic: str, headers: dict[str, str]) -> dict[int, int]:
    """partition -> the broker id that leads it."""
    deadline = time.monotonic() + 30
    while True:
        status, described = http("GET", cluster.urls[1] + f"/v1/topics/{topic}", headers=headers)
        status_c, view = http("GET", cluster.urls[1] + "/v1/cluster", headers=headers)
        if status == 200 and status_c == 200:
            ids = {b["id"] for b in view["brokers"]}
            found = {
                p["partition"]: p["leader"] if p["leader"] in ids else None
                for p in described["partitions"]
            }
            if all(found.values()) and all(
                p["high_watermark"] is not None for p in described["partitions"]
            ):
                return {k: v for k, v in found.items() if v is not None}
        if time.monotonic() > deadline:
            raise SystemExit(f"no leaders for {topic}: {described}")
        time.sleep(0.2)


async def kafka_produce(
    cluster: Cluster,
    topic: str,
    leader_ids: dict[int, int],
    login: tuple[str, str] | None,
    context: ssl.SSLContext | None,
    args: argparse.Namespace,
) -> float:
    """Records/s acknowledged for pre-encoded Kafka batches (acks=all), one connection per
    producer, each turning over the partitions as `produce` does."""
    now_ms = int(time.time() * 1000)
    batch = records.encode_batch(
        [records.KafkaRecord(i, now_ms, None, b"x" * args.size, ()) for i in range(args.batch)]
    )
    sent = 0
    deadline = time.monotonic() + args.seconds

    async def call(
        stream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        api_key: int,
        version: int,
        body: dict[str, Any],
    ) -> dict[str, Any]:
        reader, writer = stream
        request = messages.encode_request(api_key, version, 1, "bench", body)
        writer.write(len(request).to_bytes(4, "big") + request)
        size = int.from_bytes(await reader.readexactly(4), "big")
        return messages.decode_response(api_key, version, await reader.readexactly(size)).body

    async def worker(worker_id: int) -> None:
        nonlocal sent
        streams: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        i = worker_id
        try:
            while time.monotonic() < deadline:
                partition = i % len(leader_ids)
                i += args.producers
                leader = leader_ids[partition]
                if leader not in streams:
                    host, port = cluster.kafka_addresses[leader].rsplit(":", 1)
                    streams[leader] = await asyncio.open_connection(host, int(port), ssl=context)
                    if login is not None:
                        await call(streams[leader], 17, 1, {"mechanism": "PLAIN"})
                        token = f"\0{login[0]}\0{login[1]}".encode()
                        answer = await call(streams[leader], 36, 2, {"auth_bytes": token})
                        assert answer["error_code"] == 0, answer
                body = {
                    "transactional_id": None,
                    "acks": -1,
                    "timeout_ms": 30_000,
                    "topic_data": [
                        {"name": topic, "partition_data": [{"index": partition, "records": batch}]}
                    ],
                }
                answer = await call(streams[leader], 0, 9, body)
                code = answer["responses"][0]["partition_responses"][0]["error_code"]
                assert code == 0, answer
                sent += args.batch
        finally:
            for _, writer in streams.values():
                writer.close()

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(args.producers)))
    return sent / (time.monotonic() - started)


async def produce(
    session: aiohttp.ClientSession,
    topic: str,
    leader_urls: dict[int, str],
    headers: dict[str, str],
    args: argparse.Namespace,
) -> float:
    now_ms = int(time.time() * 1000)
    batch = fmt.encode_batch([b"x" * args.size] * args.batch, timestamps=[now_ms] * args.batch)
    sent = 0
    deadline = time.monotonic() + args.seconds

    async def worker(worker_id: int) -> None:
        nonlocal sent
        i = worker_id
        while time.monotonic() < deadline:
            partition = i % len(leader_urls)
            i += args.producers
            url = f"{leader_urls[partition]}/v1/topics/{topic}/partitions/{partition}/records"
            async with session.post(
                url,
                data=batch,
                params={"acks": "all"},
                headers={"Content-Type": BATCH, "X-Kraftlite-No-Forward": "1", **headers},
            ) as response:
                await response.read()
                assert response.status == 200, response.status
            sent += args.batch

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(args.producers)))
    return sent / (time.monotonic() - started)


async def latency(
    session: aiohttp.ClientSession, url: str, topic: str, headers: dict[str, str], count: int
) -> tuple[float, float]:
    samples = []
    body = json.dumps({"records": [{"value": "x" * 100}]})
    for _ in range(count):
        started = time.perf_counter()
        async with session.post(
            f"{url}/v1/topics/{topic}/records",
            data=body,
            params={"acks": "all"},
            headers={"Content-Type": "application/json", **headers},
        ) as response:
            await response.read()
            assert response.status == 200, response.status
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


async def consume(
    session: aiohttp.ClientSession, topic: str, leader_urls: dict[int, str], headers: dict[str, str]
) -> float:
    total = 0
    started = time.monotonic()
    for partition, url in leader_urls.items():
        offset = 0
        while True:
            async with session.get(
                f"{url}/v1/topics/{topic}/partitions/{partition}/records",
                params={"offset": str(offset), "max_bytes": str(4 << 20)},
                headers={"Accept": BATCH, "X-Kraftlite-No-Forward": "1", **headers},
            ) as response:
                data = await response.read()
                assert response.status == 200, response.status
                hw = int(response.headers["X-Kraftlite-High-Watermark"])
            records, position = 0, 0
            while position < len(data):  # headers only: what a consumer must read first
                header = fmt.read_header(memoryview(data)[position:])
                records += header.record_count
                offset = header.next_offset
                position += header.batch_length
            total += records
            if not records or offset >= hw:
                break
    return total / (time.monotonic() - started)


async def one_run(
    cluster: Cluster,
    topic: str,
    headers: dict[str, str],
    login: tuple[str, str] | None,
    context: ssl.SSLContext | None,
    args: argparse.Namespace,
) -> dict[str, float]:
    leader_ids = leaders(cluster, topic, headers)
    leader_urls = {p: cluster.urls[b] for p, b in leader_ids.items()}
    connector = aiohttp.TCPConnector(limit=64, ssl=context if context is not None else True)
    async with aiohttp.ClientSession(connector=connector) as session:
        produced = await produce(session, topic, leader_urls, headers, args)
        kafka = await kafka_produce(cluster, topic, leader_ids, login, context, args)
        p50, p99 = await latency(session, cluster.urls[2], topic, headers, args.latency_records)
        consumed = await consume(session, topic, leader_urls, headers)
    return {
        "produce": produced,
        "kafka_produce": kafka,
        "latency_p50_ms": p50,
        "latency_p99_ms": p99,
        "consume": consumed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--latency-records", type=int, default=300)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kraftlite-bench-security-"))
    ca = trustme.CA()
    plain = start_plain(root)
    secure, context = start_secure(root, ca)
    results: dict[str, list[dict[str, float]]] = {"plain": [], "secure": []}
    try:
        prepare(plain, "bench", {}, None)
        prepare(secure, "bench", _basic(*ADMIN), USER[0])
        for run in range(args.runs):
            for name, cluster, headers, login, ctx in (
                ("plain", plain, {}, None, None),
                ("secure", secure, _basic(*USER), USER, context),
            ):
                figures = asyncio.run(one_run(cluster, "bench", headers, login, ctx, args))
                results[name].append(figures)
                print(
                    f"run {run + 1} {name}: "
                    + ", ".join(f"{k} {v:,.1f}" for k, v in figures.items())
                )
    finally:
        plain.stop()
        secure.stop()
    medians = {
        name: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        for name, runs in results.items()
    }
    print(f"{'':24}{'plain':>14}{'TLS + auth + ACLs':>20}{'cost':>10}")
    for key in medians["plain"]:
        base, secured = medians["plain"][key], medians["secure"][key]
        higher_is_better = not key.startswith("latency")
        cost = (1 - secured / base) if higher_is_better else (secured / base - 1)
        print(f"{key:24}{base:>14,.1f}{secured:>20,.1f}{cost:>+10.0%}")
    print(json.dumps({"medians": medians, "runs": args.runs, "seconds": args.seconds}))


if __name__ == "__main__":
    main()

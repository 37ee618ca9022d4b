"""`kraftlite dev`: a whole local cluster in the foreground, every node its own process.

Separate processes rather than KRaft's combined mode: a node is then exactly what runs in
production, kill -9 of one broker is a real fault, and the two cores share the load.

Layout under the data dir: `controller-N/` (Raft journal), `broker-N/` (LMDB), `logs/*.log`,
and `cluster-secret` (generated once, mode 0600: every node signs its calls to the others
with it, and the Raft password is derived from it, so a restart on the same data rejoins).
Ports from `--base-port P` (default 9092): brokers P, P+1, ...; their Kafka listeners
P+100+i (9192...); controller HTTP P+309+i (9401...), Raft P+209+i (9301...), the same
numbers the contract's examples use.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import click

from kraftlite.clock import SystemClock

CONTROLLER_HTTP_OFFSET = 309
CONTROLLER_RAFT_OFFSET = 209
KAFKA_OFFSET = 100  # each broker's Kafka listener: P+100+i (9192...)


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    url: str
    args: tuple[str, ...]
    kafka: str | None = None  # a broker's Kafka listener, "host:port"


def plan(data_dir: Path, controllers: int, brokers: int, base_port: int) -> list[Node]:
    """Every node's command line; pure."""
    raft = [f"127.0.0.1:{base_port + CONTROLLER_RAFT_OFFSET + i}" for i in range(controllers)]
    quorum = ",".join(f"{i + 1}@{address}" for i, address in enumerate(raft))
    controller_urls = [
        f"http://127.0.0.1:{base_port + CONTROLLER_HTTP_OFFSET + i}" for i in range(controllers)
    ]
    nodes = []
    for i in range(controllers):
        listen = controller_urls[i].removeprefix("http://")
        nodes.append(
            Node(
                f"controller-{i + 1}",
                controller_urls[i],
                (
                    "controller",
                    "--node-id",
                    str(i + 1),
                    "--listen",
                    listen,
                    "--raft",
                    raft[i],
                    "--quorum",
                    quorum,
                    "--data-dir",
                    str(data_dir / f"controller-{i + 1}"),
                ),
            )
        )
    for i in range(brokers):
        listen = f"127.0.0.1:{base_port + i}"
        kafka = f"127.0.0.1:{base_port + KAFKA_OFFSET + i}"
        nodes.append(
            Node(
                f"broker-{i + 1}",
                f"http://{listen}",
                (
                    "broker",
                    "--broker-id",
                    str(i + 1),
                    "--listen",
                    listen,
                    "--kafka-listen",
                    kafka,
                    "--controllers",
                    ",".join(controller_urls),
                    "--data-dir",
                    str(data_dir / f"broker-{i + 1}"),
                ),
                kafka,
            )
        )
    return nodes


def free_base_port(first: int = 20_000, last: int = 40_000) -> int:
    """A base port for which every port `plan` uses (brokers' HTTP and Kafka, controller HTTP
    and Raft, for
    3 + 3 nodes) is free on 127.0.0.1 right now; for tests and benchmarks.
    """
    for base in range(first, last, 997):
        ports = [base + i for i in range(3)] + [
            base + offset + i
            for offset in (KAFKA_OFFSET, CONTROLLER_RAFT_OFFSET, CONTROLLER_HTTP_OFFSET)
            for i in range(3)
        ]
        sockets: list[socket.socket] = []
        try:
            for port in ports:
                sockets.append(socket.socket())
                sockets[-1].bind(("127.0.0.1", port))
        except OSError:
            continue
        else:
            return base
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no free port range in {first}-{last}")


def cluster_secret(data_dir: Path) -> str:
    """The cluster's secret (kraftlite/security/cluster_auth.py), made once per data dir and
    readable by its owner only; the Raft password is derived from it.
    """
    path = data_dir / "cluster-secret"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as file:
            file.write(secrets.token_hex(32))
    return path.read_text().strip()


def _ready(url: str) -> bool:
    try:
        # S310: the URL is one `plan` built, always http://127.0.0.1
        with urllib.request.urlopen(url + "/readyz", timeout=1) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class _Stop(Exception):
    pass


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def run(data_dir: Path, controllers: int, brokers: int, base_port: int) -> int:
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "logs").mkdir(exist_ok=True)
    env = {**os.environ, "KRAFTLITE_CLUSTER_SECRET": cluster_secret(data_dir)}
    env.pop("KRAFTLITE_RAFT_PASSWORD", None)  # derived from the secret on every voter
    nodes = plan(data_dir, controllers, brokers, base_port)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        for node in nodes:
            with (data_dir / "logs" / f"{node.name}.log").open("ab") as log:
                processes[node.name] = subprocess.Popen(  # noqa: S603 - our own command
                    [sys.executable, "-m", "kraftlite", "--log-format", "json", *node.args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,  # Ctrl-C reaches us only; we stop them in order
                )
        clock = SystemClock()
        started = clock.monotonic_ms()
        waiting = list(nodes)
        while waiting:
            waiting = [n for n in waiting if not _ready(n.url)]
            for name, process in processes.items():
                if process.poll() is not None:
                    log_file = data_dir / "logs" / f"{name}.log"
                    click.echo(f"kraftlite dev: {name} exited; see {log_file}", err=True)
                    return 1
            time.sleep(0.1)
        seconds = (clock.monotonic_ms() - started) / 1000
        click.echo(f"kraftlite dev: ready in {seconds:.1f}s, data in {data_dir}")
        for node in nodes:
            kafka = f"  kafka {node.kafka}" if node.kafka else ""
            click.echo(f"  {node.name:<13} {node.url}{kafka}")
        bootstrap = ",".join(n.kafka for n in nodes if n.kafka)
        if bootstrap:
            click.echo(f"Kafka clients: bootstrap.servers={bootstrap}")
        console = next((n.url for n in nodes if n.kafka), nodes[0].url)
        click.echo(f"Console: {console}/ui/ (every node serves it)")
        click.echo("Ctrl-C stops the cluster; run again with the same --data-dir to resume.")
        while True:
            for name, process in processes.items():
                if process.poll() is not None:
                    click.echo(f"kraftlite dev: {name} exited ({process.returncode})", err=True)
                    return 1
            time.sleep(0.5)
    except (KeyboardInterrupt, _Stop):
        click.echo("kraftlite dev: stopping (brokers first, then controllers)")
        return 0
    finally:
        _stop_all(processes, nodes)


def _stop_all(processes: dict[str, subprocess.Popen[bytes]], nodes: list[Node]) -> None:
    """Brokers first (controlled shutdown needs the controllers), then the controllers."""
    order = [n.name for n in nodes if n.name.startswith("broker")] + [
        n.name for n in nodes if n.name.startswith("controller")
    ]
    for group in ("broker", "controller"):
        members = [processes[n] for n in order if n.startswith(group) and n in processes]
        for process in members:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in members:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                process.wait()

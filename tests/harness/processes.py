"""Real kraftlite processes on loopback for multi-process tests: start, kill -9, restart."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraftlite.security.cluster_auth import (
    CLIENT_HOST_HEADER,
    HEADER,
    PRINCIPAL_HEADER,
    Signer,
    derive_key,
)
from tests.harness.hosts import Host, TestNet
from tests.harness.network import FaultProxy

PASSWORD = "harness-secret"
CLUSTER_SECRET = "harness-cluster-secret-0123456789"
# Controller settings for tests that wait out broker sessions: a dead broker is fenced in 3 s.
FAST_SESSIONS = {"broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500}


# Every port a test server listens on comes from below Linux's ephemeral range (32768 up),
# from which the kernel picks the ports of outgoing connections and of bind(0). A port
# probed free and released there could be taken by any connection opened before its server
# starts (a controller's, the proxy's), and the server would then fail to bind. Proxy ports
# come from a band below every node's port, so they sort below them as text too (the Raft
# scheme in `ControllerQuorum._raft_views` needs that).
PROXY_PORTS = range(10_000, 20_000)
NODE_PORTS = range(20_000, 32_768)
_handed_out: set[int] = set()


def _free_port_in(band: range) -> int:
    """A free port from `band`, not handed out before in this test session."""
    for _ in range(10_000):
        port = random.choice(band)
        if port in _handed_out:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port in {band}")


def proxy_port() -> int:
    return _free_port_in(PROXY_PORTS)


def free_ports(count: int) -> list[int]:
    """`count` distinct ports for nodes to listen on, free now."""
    return [_free_port_in(NODE_PORTS) for _ in range(count)]


# The ports nodes listen on when each has a test host (a TestNet) of its own.
BROKER_PORT, KAFKA_PORT, CONTROLLER_PORT, RAFT_PORT = 8080, 9092, 8090, 9093

# Trusted for https:// URLs by `http` (a test CA, set by tests that turn TLS on).
TLS_CONTEXT: list[ssl.SSLContext] = []


def http(
    method: str,
    url: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = 15,
) -> tuple[int, Any]:
    """(status, parsed JSON body or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        url,
        data=data,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        context = TLS_CONTEXT[-1] if TLS_CONTEXT and url.startswith("https:") else None
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as error:
        raw = error.read()
        error.close()
        return error.code, json.loads(raw) if raw else None


def signed_http(
    method: str, url: str, body: Any = None, timeout: float = 15, principal: str = ""
) -> tuple[int, Any]:
    """`http`, signed with the harness's cluster secret as a node would (acting for itself,
    or for `principal` from 127.0.0.1)."""
    data = b"" if body is None else json.dumps(body).encode()
    parts = urllib.parse.urlsplit(url)
    path_qs = parts.path + (f"?{parts.query}" if parts.query else "")
    host = "127.0.0.1" if principal else ""
    acting = f"{principal}\n{host}" if principal else ""
    signer = Signer(derive_key(CLUSTER_SECRET, "internal http"), "test-harness")
    headers = {
        HEADER: signer.header(
            method,
            path_qs,
            data,
            now_ms=int(time.time() * 1000),
            nonce=os.urandom(8).hex(),
            principal=acting,
        )
    }
    if principal:
        headers |= {PRINCIPAL_HEADER: principal, CLIENT_HOST_HEADER: host}
    return http(method, url, body, headers, timeout)


def http_retry(
    method: str, url: str, body: Any = None, timeout_s: float = 20, *, signed: bool = False
) -> tuple[int, Any]:
    """`http` (`signed_http` if `signed`), retried while the answer is NOT_CONTROLLER
    (leadership moving), as clients do."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, answer = (signed_http if signed else http)(method, url, body)
        retriable = status == 503 and isinstance(answer, dict) and answer.get("retriable")
        if not retriable or time.monotonic() > deadline:
            return status, answer
        time.sleep(0.2)


@dataclass
class Process:
    name: str
    args: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    paused: bool = False
    host: Host | None = None  # on a test host (its namespace), else on this machine's
    # The kraftlite variables it gets instead of the harness's secrets (an operator's own)
    environment: dict[str, str] | None = None

    def start(self) -> None:
        if self.environment is None:
            env = {
                **os.environ,
                "KRAFTLITE_RAFT_PASSWORD": PASSWORD,
                "KRAFTLITE_CLUSTER_SECRET": CLUSTER_SECRET,
            }
        else:
            outside = {k: v for k, v in os.environ.items() if not k.startswith("KRAFTLITE_")}
            env = {**outside, **self.environment}
        env["PYTHONUNBUFFERED"] = "1"
        command = [sys.executable, "-m", "kraftlite", "--log-format", "json", *self.args]
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                command if self.host is None else self.host.command(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)
            self.popen.wait(timeout=20)
        self.popen = None
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: a hung node (its sockets stay open, it answers nothing)."""
        assert self.popen is not None
        self.popen.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.popen is not None
        self.popen.send_signal(signal.SIGCONT)
        self.paused = False

    def terminate(self) -> int | None:
        if self.popen is None:
            return None
        self.popen.send_signal(signal.SIGTERM)
        try:
            code = self.popen.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            code = self.popen.wait()
        self.popen = None
        return code

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 20) -> str:
        """The end of its log, for a failure message."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def serving(self) -> bool:
        """Alive and not paused: it can answer."""
        return self.alive and not self.paused


def toml_lines(settings: dict[str, Any]) -> str:
    return "".join(f'"{k}" = {json.dumps(v)}\n' for k, v in settings.items())


@dataclass
class ControllerQuorum:
    root: Path
    size: int = 3
    config: dict[str, Any] = field(default_factory=dict)  # extra TOML keys
    scheme: str = "http"  # https when the config turns TLS on
    # off loopback (on test hosts) a node refuses listeners without TLS and authentication
    # unless told --insecure
    insecure: bool = False
    # With a proxy, Raft links between controllers go through it (see `_raft_views`); on
    # test hosts (a TestNet), controller N runs on host "controller-N", at its own address.
    network: FaultProxy | TestNet | None = None
    processes: dict[int, Process] = field(default_factory=dict)
    urls: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        config_file = self.root / "controller.toml"
        settings = {"cluster.id": self.root.name, **self.config}
        if isinstance(self.network, FaultProxy):  # voters list each other at proxy addresses
            settings.setdefault("quorum.membership.changes.enable", False)
        config_file.write_text(toml_lines(settings))
        hosts = {i: self._host(i) for i in range(1, self.size + 1)}
        if isinstance(self.network, TestNet):
            raft = {i: f"{host.address}:{RAFT_PORT}" for i, host in hosts.items() if host}
            listens = {i: f"{host.address}:{CONTROLLER_PORT}" for i, host in hosts.items() if host}
        else:
            ports = free_ports(2 * self.size)
            raft = {i + 1: f"127.0.0.1:{ports[i]}" for i in range(self.size)}
            listens = {i + 1: f"127.0.0.1:{ports[self.size + i]}" for i in range(self.size)}
        views = self._raft_views(raft)
        for node_id, raft_address in raft.items():
            quorum = ",".join(f"{i}@{address}" for i, address in views[node_id].items())
            listen = listens[node_id]
            self.urls[node_id] = f"{self.scheme}://{listen}"
            self.processes[node_id] = Process(
                f"controller-{node_id}",
                [
                    "controller",
                    "--config",
                    str(config_file),
                    "--node-id",
                    str(node_id),
                    "--listen",
                    listen,
                    "--raft",
                    raft_address,
                    "--quorum",
                    quorum,
                    "--data-dir",
                    str(self.root / f"controller-{node_id}"),
                    *(["--insecure"] if self.insecure else []),
                ],
                self.root / f"controller-{node_id}.log",
                host=hosts[node_id],
            )

    def _host(self, node_id: int) -> Host | None:
        return self.network[f"controller-{node_id}"] if isinstance(self.network, TestNet) else None

    def _raft_views(self, raft: dict[int, str]) -> dict[int, dict[int, str]]:
        """Each voter's quorum: the Raft address it reaches every voter at.

        pysyncobj opens one connection per pair, from the voter whose address sorts higher
        (as text), which names itself by its own address; the other accepts it only under
        an address in its quorum. So a voter lists the voters it connects to (lower
        addresses) at their proxy port, and those that connect to it at their real address.
        Proxy ports are chosen below every Raft port, so each pair still agrees who
        connects. The pair's one connection is the link (higher, lower): cutting it cuts
        Raft between them both ways; `isolate(..., both=True)` cuts it whichever node is
        named first.
        """
        if not isinstance(self.network, FaultProxy):
            return {node_id: raft for node_id in raft}
        proxied = {}
        for node_id, address in raft.items():
            upstream = int(address.rsplit(":", 1)[1])
            port = self.network.add_route(f"controller-{node_id}", upstream, proxy_port())
            proxied[node_id] = f"127.0.0.1:{port}"
        # What the scheme needs: every proxy address sorts below every real one.
        assert max(proxied.values()) < min(raft.values()), (proxied, raft)
        return {
            me: {other: proxied[other] if raft[other] < raft[me] else raft[other] for other in raft}
            for me in raft
        }

    def start(self) -> None:
        for process in self.processes.values():
            process.start()

    def stop(self) -> None:
        for process in self.processes.values():
            process.kill()

    def leader(
        self,
        timeout_s: float = 30,
        among: list[int] | None = None,
        get: Callable[..., tuple[int, Any]] = http,
    ) -> int:
        """The node id every live controller agrees leads, with its URL registered. `get`
        asks (`http`, or one that logs in where clients must)."""
        deadline = time.monotonic() + timeout_s
        candidates = among or list(self.processes)
        while time.monotonic() < deadline:
            seen = set()
            for node_id in candidates:
                if not self.processes[node_id].alive:
                    continue
                try:
                    status, body = get("GET", self.urls[node_id] + "/v1/quorum", timeout=2)
                except OSError:
                    seen.add(None)
                    continue
                seen.add(body["leader_id"] if status == 200 else None)
            if len(seen) == 1 and None not in seen:
                leader = int(seen.pop())
                if leader in candidates and self.processes[leader].alive:
                    try:
                        status, _ = get("GET", self.urls[leader] + "/readyz", timeout=2)
                    except OSError:
                        status = 0
                    if status == 200:
                        return leader
            time.sleep(0.1)
        raise AssertionError(f"no agreed leader; logs in {self.root}")


@dataclass
class Cluster:
    """A controller quorum and `brokers` brokers, each its own process.

    With `faults=True` brokers reach the controllers and each other only through a
    FaultProxy (`self.network`; nodes are named like their processes: "broker-1",
    "controller-2"), which can cut those links. `urls` stay direct: the test's own requests
    are never cut. Raft links between controllers go through it too.

    With `net` (a TestNet with hosts named like the processes, and "client"), each node
    runs on its own host at that host's address, and `self.network` is the TestNet: the
    same cuts act on packets, and the links can be shaped. The test reaches the nodes from
    inside a host (`with net.inside("client")`), from before `start` to after `close`.
    """

    root: Path
    brokers: int = 3
    broker_config: dict[str, Any] = field(default_factory=dict)  # extra TOML keys
    controller_config: dict[str, Any] = field(default_factory=dict)
    faults: bool = False
    scheme: str = "http"  # https when the configs turn TLS on
    kafka: bool = False  # give every broker a Kafka listener (kafka.listen)
    net: TestNet | None = None
    insecure: bool = True  # on test hosts: plain listeners (--insecure); False for the guide's
    quorum: ControllerQuorum = field(init=False)
    network: FaultProxy | TestNet | None = field(init=False, default=None)
    processes: dict[int, Process] = field(default_factory=dict)
    urls: dict[int, str] = field(default_factory=dict)
    kafka_addresses: dict[int, str] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        """Kafka clients' bootstrap.servers: every broker's Kafka listener."""
        return ",".join(self.kafka_addresses.values())

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: dict[str, Any] | None = None,
    ) -> dict[int, int]:
        """Create `name` (over HTTP, through broker 1) and wait until every partition is
        led as broker 1 sees it; partition -> leader."""
        body: dict[str, Any] = {"name": name, "partitions": partitions}
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = configs
        status, answer = http_retry("POST", self.urls[1] + "/v1/topics", body)
        assert status == 201, answer
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status, described = http("GET", self.urls[1] + f"/v1/topics/{name}")
            parts = described.get("partitions", []) if status == 200 else []
            if parts and all(p["high_watermark"] is not None for p in parts):
                return {p["partition"]: p["leader"] for p in parts}
            time.sleep(0.05)
        raise AssertionError(f"{name} has no leaders")

    def __post_init__(self) -> None:
        if self.faults:
            assert self.net is None, "faults=True is the proxy; a TestNet has faults of its own"
            self.network = FaultProxy(self.pids)
        elif self.net is not None:
            self.network = self.net
            if self.insecure:  # what loopback gives: no authentication asked
                self.broker_config = {"auth.required": False, **self.broker_config}
                self.controller_config = {"auth.required": False, **self.controller_config}
        self.quorum = ControllerQuorum(
            self.root,
            config=self.controller_config,
            network=self.network,
            scheme=self.scheme,
            insecure=self.net is not None and self.insecure,
        )
        controller_urls = list(self.quorum.urls.values())
        if self.faults:
            controller_urls = [
                self._proxied(f"controller-{node_id}", url)
                for node_id, url in self.quorum.urls.items()
            ]
        controllers = ",".join(controller_urls)
        hosts = {b: self._host(b) for b in range(1, self.brokers + 1)}
        if self.net is None:
            ports = free_ports(self.brokers * 2)
            listens = {b: f"127.0.0.1:{ports[b - 1]}" for b in hosts}
            kafka_listens = {b: f"127.0.0.1:{ports[self.brokers + b - 1]}" for b in hosts}
        else:
            listens = {b: f"{host.address}:{BROKER_PORT}" for b, host in hosts.items() if host}
            kafka_listens = {b: f"{h.address}:{KAFKA_PORT}" for b, h in hosts.items() if h}
        for broker_id, listen in listens.items():
            self.urls[broker_id] = f"{self.scheme}://{listen}"
            config = self.root / f"broker-{broker_id}.toml"
            settings = dict(self.broker_config)
            if self.kafka:
                kafka_listen = kafka_listens[broker_id]
                settings["kafka.listen"] = kafka_listen
                self.kafka_addresses[broker_id] = kafka_listen
                if self.faults:  # Kafka clients reach it through the proxy: cut(CLIENT, ...)
                    assert isinstance(self.network, FaultProxy)
                    proxied = self.network.add_route(
                        f"broker-{broker_id}-kafka",
                        int(kafka_listen.rsplit(":", 1)[1]),
                        proxy_port(),
                    )
                    self.kafka_addresses[broker_id] = f"127.0.0.1:{proxied}"
                    settings["kafka.advertised.listener"] = self.kafka_addresses[broker_id]
            if self.faults:
                settings["advertised.url"] = self._proxied(f"broker-{broker_id}", listen)
                # only through the proxy: the controllers' own URLs would bypass its cuts
                settings.setdefault("controllers.discovery.enable", False)
            config.write_text(toml_lines(settings))
            self.processes[broker_id] = Process(
                f"broker-{broker_id}",
                [
                    "broker",
                    "--config",
                    str(config),
                    "--broker-id",
                    str(broker_id),
                    "--listen",
                    listen,
                    "--controllers",
                    controllers,
                    "--data-dir",
                    str(self.root / f"broker-{broker_id}"),
                    *(["--insecure"] if self.net is not None and self.insecure else []),
                ],
                self.root / f"broker-{broker_id}.log",
                host=hosts[broker_id],
            )

    def _host(self, broker_id: int) -> Host | None:
        return None if self.net is None else self.net[f"broker-{broker_id}"]

    def _proxied(self, name: str, address: str) -> str:
        assert isinstance(self.network, FaultProxy)
        port = self.network.add_route(name, int(address.rsplit(":", 1)[1]), proxy_port())
        return f"http://127.0.0.1:{port}"

    def pids(self) -> dict[int, str]:
        """Live node processes by pid, for the proxy to name connections."""
        every = [*self.processes.values(), *self.quorum.processes.values()]
        # read once: the test's thread may kill a node (popen = None) while the proxy asks
        return {popen.pid: p.name for p in every if (popen := p.popen) is not None}

    def cut_from_controllers(self, broker_id: int, mode: str = "reset") -> None:
        """The broker can no longer reach any controller (controllers never call brokers)."""
        assert self.network is not None
        for node_id in self.quorum.processes:
            self.network.cut(f"broker-{broker_id}", f"controller-{node_id}", mode)

    def cut_from_other_controllers(self, node_id: int, mode: str = "reset") -> None:
        """The controller's Raft links to the other voters are cut (both ways)."""
        assert self.network is not None
        others = [f"controller-{n}" for n in self.quorum.processes if n != node_id]
        self.network.isolate(f"controller-{node_id}", others, mode)

    def cut_between_brokers(self, a: int, b: int, mode: str = "reset") -> None:
        """Neither broker can reach the other (fetches, forwarded requests)."""
        assert self.network is not None
        self.network.cut(f"broker-{a}", f"broker-{b}", mode)
        self.network.cut(f"broker-{b}", f"broker-{a}", mode)

    def heal(self) -> None:
        assert self.network is not None
        self.network.heal()

    def close(self) -> None:
        """Stop everything, the proxy too (a TestNet is its owner's to close)."""
        self.stop()
        if isinstance(self.network, FaultProxy):
            self.network.close()
        self.network = None

    def start(self, broker_ids: list[int] | None = None) -> None:
        """The quorum and the brokers (`broker_ids` only, if given: the rest can join the
        cluster later with `start_broker`)."""
        self.quorum.start()
        for broker_id in broker_ids or list(self.processes):
            self.processes[broker_id].start()
        try:
            self.wait_ready(broker_ids)
        except BaseException:  # a fixture whose start fails leaves no process behind
            self.stop()
            raise

    def start_broker(self, broker_id: int) -> None:
        self.processes[broker_id].start()
        self.wait_ready([broker_id])

    def wait_ready(self, broker_ids: list[int] | None = None, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        for broker_id in broker_ids or list(self.processes):
            while True:
                try:
                    status, _ = http("GET", self.urls[broker_id] + "/readyz", timeout=2)
                except OSError:
                    status = 0
                if status == 200:
                    break
                process = self.processes[broker_id]
                if not process.alive or time.monotonic() > deadline:
                    state = "not ready" if process.alive else "exited"
                    raise AssertionError(
                        f"broker {broker_id} {state}; logs in {self.root}\n{process.tail()}"
                    )
                time.sleep(0.1)

    def stop(self) -> None:
        for process in self.processes.values():
            process.kill()
        self.quorum.stop()

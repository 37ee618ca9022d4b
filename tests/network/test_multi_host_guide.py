"""docs/operations.md "A cluster across hosts", run as written on six test hosts and a
seventh for the clients (tests/harness/hosts.py), behind a firewall that allows only the
guide's ports: its certificate commands, its two config files (the others derived from them
as it says), nodes started with no --insecure and the operator's own secrets, its user and
ACL commands, and its clients: curl, the Python client, librdkafka and Spark."""

from __future__ import annotations

import os
import re
import secrets
import ssl
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.hosts import Allow, TestNet
from tests.harness.processes import TLS_CONTEXT, Process, http, toml_lines

pytestmark = [pytest.mark.integration, pytest.mark.network, pytest.mark.timeout(300)]
REPO = Path(__file__).resolve().parents[2]
CONTROLLERS = ("controller-1", "controller-2", "controller-3")
BROKERS = ("broker-1", "broker-2", "broker-3")
# The guide's table "Which ports each host must reach", as firewall rules
FIREWALL = (
    Allow(CONTROLLERS, CONTROLLERS, 9093),
    Allow((*CONTROLLERS, *BROKERS), CONTROLLERS, 8090),
    Allow(("client", *BROKERS, *CONTROLLERS), BROKERS, 8080),
    Allow(("client",), BROKERS, 9092),
)


def section() -> str:
    """docs/operations.md's "A cluster across hosts"."""
    text = (REPO / "docs" / "operations.md").read_text()
    return text.split("## A cluster across hosts", 1)[1].split("\n## ", 1)[0]


def guide() -> list[tuple[str, str]]:
    """The section's code blocks: (language, text)."""
    blocks = re.findall(r"```(\w*)\n(.*?)```", section(), re.S)
    return [(lang, dedent(body)) for lang, body in blocks]


def dedent(block: str) -> str:
    lines = block.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines) + "\n"


def block(lang: str, containing: str) -> str:
    found = [body for kind, body in guide() if kind == lang and containing in body]
    assert len(found) == 1, f"the guide has no single {lang} block with {containing!r}"
    return found[0]


class Site:
    """Where the guide's absolute paths live in this test, and its secrets."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pki = root / "pki"  # the admin machine's, copied to /etc/kraftlite on each host
        self.admin_password = secrets.token_hex(12)
        self.app_password = secrets.token_hex(12)
        self.cluster_secret = secrets.token_hex(32)

    def local(self, text: str) -> str:
        return text.replace("/etc/kraftlite/", f"{self.pki}/").replace(
            "/var/lib/kraftlite/", f"{self.root}/data/"
        )

    def bash(self, script: str, **env: str) -> str:
        """A block of the guide run by bash (on the calling thread's host)."""
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.local(script)],
            cwd=self.root,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("KRAFTLITE_")},
                "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
                **env,
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
        return done.stdout


def configs(site: Site) -> dict[str, dict[str, Any]]:
    """Every node's config: the guide's controller-1 and broker-1, and the others changed
    as it says (the id, the addresses, the file names)."""
    controller = tomllib.loads(site.local(block("toml", "# controller-1")))
    broker = tomllib.loads(site.local(block("toml", "# broker-1")))
    made = {}
    for n in (1, 2, 3):
        made[f"controller-{n}"] = _renamed(controller, "controller", n, {"node.id": n})
        made[f"broker-{n}"] = _renamed(broker, "broker", n, {"broker.id": n})
    return made


def _renamed(config: dict[str, Any], kind: str, n: int, ids: dict[str, int]) -> dict[str, Any]:
    first, mine = (1, n) if kind == "controller" else (4, 3 + n)
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in {"listen", "raft", "kafka.listen"}:
            out[key] = value.replace(f"10.88.{first}.2:", f"10.88.{mine}.2:")
        elif isinstance(value, str):
            out[key] = value.replace(f"{kind}-1", f"{kind}-{n}")
        else:
            out[key] = value
    return {**out, **ids}


@pytest.fixture
def site(tmp_path: Path, net: TestNet) -> Iterator[Site]:
    here = Site(tmp_path)
    net.shape_all(delay_ms=1)
    with net.outside():  # the admin machine: not a host of the cluster
        here.bash(block("bash", "kraftlite certs ca"))
    net.firewall(FIREWALL)
    processes = []
    try:
        for name, config in configs(here).items():
            path = tmp_path / f"{name}.toml"
            path.write_text(toml_lines(config))
            kind = name.split("-")[0]
            environment = {"KRAFTLITE_CLUSTER_SECRET": here.cluster_secret}
            if kind == "controller":
                environment["KRAFTLITE_BOOTSTRAP_PASSWORD"] = here.admin_password
            process = Process(
                name,
                [kind, "--config", str(path)],
                tmp_path / f"{name}.log",
                host=net[name],
                environment=environment,
            )
            process.start()
            processes.append(process)
        client = ssl.create_default_context(cafile=str(here.pki / "ca.pem"))
        TLS_CONTEXT.append(client)
        try:
            _wait_ready(processes)
            yield here
        finally:
            TLS_CONTEXT.remove(client)
    finally:
        for process in processes:
            process.kill()


def _wait_ready(processes: list[Process]) -> None:
    deadline = time.monotonic() + 90
    for n in (1, 2, 3):
        while True:
            try:
                status, _ = http("GET", f"https://10.88.{3 + n}.2:8080/readyz", timeout=2)
            except OSError:
                status = 0
            if status == 200:
                break
            dead = [p.name for p in processes if not p.alive]
            assert not dead and time.monotonic() < deadline, (
                f"not ready; dead: {dead}\n" + "\n".join(p.tail(5) for p in processes)
            )
            time.sleep(0.2)


def test_the_guide_runs_across_six_hosts_behind_its_firewall(site: Site, net: TestNet) -> None:
    # 6. users and ACLs, from the client host as the admin (the test runs inside it)
    admin = block("bash", "kraftlite users create app").replace(
        "KRAFTLITE_PASSWORD=...", f"KRAFTLITE_PASSWORD={site.admin_password}"
    )
    deadline = time.monotonic() + 30
    while True:  # the bootstrap admin exists once a controller has been active a moment
        try:
            site.bash(admin, APP_PASSWORD=site.app_password)
            break
        except AssertionError:
            assert time.monotonic() < deadline
            time.sleep(1)

    # 7. curl, as the guide writes it
    curl = next(line.split("`")[1] for line in guide_lines() if line.startswith("- curl:"))
    shown = site.bash(curl.replace("ca.pem", f"{site.pki}/ca.pem"), APP_PASSWORD=site.app_password)
    assert '"name":"orders"' in shown.replace(" ", ""), shown

    # the Python client
    from kraftlite.client import Credentials, SyncConsumer, SyncProducer  # noqa: PLC0415

    urls = [f"https://10.88.{3 + n}.2:8080" for n in (1, 2, 3)]
    credentials = Credentials("app", site.app_password, ca_file=str(site.pki / "ca.pem"))
    with SyncProducer(urls, credentials=credentials) as producer:
        for n in range(6):
            producer.send("orders", f"python-{n}".encode(), partition=n % 3)
        producer.flush()

    # librdkafka, with the guide's properties
    from confluent_kafka import Consumer, Producer  # noqa: PLC0415

    properties = dict(
        line.split("=", 1)
        for line in site.local(block("properties", "SASL_SSL")).splitlines()
        if "=" in line
    )
    properties["sasl.password"] = site.app_password
    kafka_producer = Producer({**properties, "acks": "all"})
    for n in range(6):
        kafka_producer.produce("orders", f"kafka-{n}".encode(), partition=n % 3)
    assert kafka_producer.flush(30) == 0
    consumer = Consumer(
        {**properties, "group.id": "orders-readers", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["orders"])
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while len(seen) < 12 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(message.value().decode())
    consumer.close()
    assert sorted(seen) == sorted(
        [f"python-{n}" for n in range(6)] + [f"kafka-{n}" for n in range(6)]
    )

    # the Python client reads them back too
    with SyncConsumer(
        urls, credentials=credentials, group_id="orders-python", auto_offset_reset="earliest"
    ) as reader:
        reader.subscribe(["orders"])
        read: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(read) < 12 and time.monotonic() < deadline:
            read.extend(record.value for record in reader.poll(1000))
    assert len(read) == 12

    # Spark on the client host, with the guide's options
    assert spark_count(site) == 12
    # nobody was let through the firewall who should not have been: a client cannot reach
    # the controllers at all
    with pytest.raises(OSError):
        http("GET", "https://10.88.1.2:8090/readyz", timeout=2)


def guide_lines() -> list[str]:
    return section().splitlines()


SPARK_READ = """
import sys
from kraftlite.spark.local import local_spark
spark = local_spark("guide")
frame = (
    spark.read.format("kraftlite")
    .option("kraftlite.bootstrap", "https://10.88.4.2:8080")
    .option("subscribe", "orders")
    .option("kraftlite.auth.user", "app")
    .option("kraftlite.auth.password", sys.argv[1])
    .option("kraftlite.auth.ca.file", sys.argv[2])
    .load()
)
print("COUNT", frame.count())
spark.stop()
"""


def spark_count(site: Site) -> int:
    for option in ("kraftlite.bootstrap", "kraftlite.auth.user", "kraftlite.auth.ca.file"):
        assert any(option in line for line in guide_lines()), option
    done = subprocess.run(
        [sys.executable, "-c", SPARK_READ, site.app_password, str(site.pki / "ca.pem")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    counted = [line for line in done.stdout.splitlines() if line.startswith("COUNT ")]
    assert counted, done.stderr[-3000:]
    return int(counted[0].split()[1])

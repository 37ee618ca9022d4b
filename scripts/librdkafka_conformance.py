"""librdkafka's own integration tests against a `kraftlite dev` cluster (issue 25).

What it does, each step cached under .cache/librdkafka/ (git-ignored):

1. Source: Debian's source package of librdkafka (sid, 2.14.2-1). Reads the .dsc for the
   upstream tarball's name and SHA-256, checks both against the values pinned below (the
   mirror is plain HTTP), downloads the tarball, verifies it and unpacks it. Nothing of
   librdkafka's is kept in this repository.
2. Build: the Debian packages it needs (BUILD_DEPS; installed with apt-get when missing and
   this runs as root or with passwordless sudo), `./configure` with the system's libraries,
   `make libs`, then `make -C tests build`, which makes tests/test-runner.
3. Cluster: `kraftlite dev` (its processes, ports and ordered stop: kraftlite/dev.py) on free
   ports under the run's directory, its brokers given the settings of librdkafka's test
   scenario (SCENARIOS: as its trivup clusters, num.partitions=4, which tests such as 0012
   rely on), or --bootstrap HOST:PORT,... for a cluster you run. Stopped again at the end,
   on errors, Ctrl-C and SIGTERM.
4. Tests: test.conf names the bootstrap servers; TEST_KAFKA_VERSION says what broker to
   expect (3.7.0: the APIs kraftlite serves, no transactions); each test number runs alone
   (TESTS=NNNN, `-L`: not librdkafka's broker-less "local" tests, `-p1`: its variants one
   after another), under a timeout; a few in parts (SPLIT). KAFKA_PATH points at a stand-in
   for Kafka's bin/kafka-topics.sh (this script again, over the Kafka Admin API with
   confluent-kafka), which some tests call to add partitions or delete topics.

Which tests apply: every test that needs a broker, except NOT_APPLICABLE below (each with its
reason), those librdkafka itself does not run (TEST_F_KNOWN_ISSUE, manual tests) and those of
its "ak23" scenario (an Apache Kafka 2.3 cluster). The "noautocreate" scenario's tests run
after the others, on a cluster of their own. `--list` prints the classification.

Run:
  .venv/bin/python scripts/librdkafka_conformance.py --slice ci      # CI's bounded slice
  .venv/bin/python scripts/librdkafka_conformance.py --all           # every applicable test
  .venv/bin/python scripts/librdkafka_conformance.py --tests 0001,0081 [--json out.json]
  .venv/bin/python scripts/librdkafka_conformance.py --tests 0081 --subtests do_test_DeleteRecords
  .venv/bin/python scripts/librdkafka_conformance.py --build-only | --list

Prints a table and the pass rate (passed / (passed + failed) over the test variants run);
exits 1 if any failed (2 if it could not run). Each run's logs (the runner's, per test number,
and kraftlite's node logs) stay in .cache/librdkafka/runs/<time>-<pid>/ (the last 30 runs).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "librdkafka"

# Debian's source package (sid). The .dsc names the upstream tarball and its SHA-256; both
# are pinned here too, so a mirror (plain HTTP) cannot hand us other code.
VERSION = "2.14.2"
DEBIAN_VERSION = "2.14.2-1"
DEBIAN_POOL = "http://deb.debian.org/debian/pool/main/libr/librdkafka/"
DSC = f"librdkafka_{DEBIAN_VERSION}.dsc"
ORIG = f"librdkafka_{VERSION}.orig.tar.gz"
ORIG_SHA256 = "4d53568c13717b167d12c7b2a0fe12aeb5d6bfe02de53df5b68f86d870a81b33"

# Debian packages the build needs (dpkg names); `./configure` finds them with pkg-config.
BUILD_DEPS = (
    "build-essential",  # gcc, g++, make
    "pkg-config",
    "python3",  # configure and the Makefiles run small Python helpers
    "zlib1g-dev",  # gzip
    "libssl-dev",  # SSL, SASL SCRAM
    "libsasl2-dev",  # SASL GSSAPI/PLAIN via Cyrus
    "libzstd-dev",  # zstd
    "liblz4-dev",  # lz4 (else its bundled copy)
    "libcurl4-openssl-dev",  # OAUTHBEARER OIDC
    "rapidjson-dev",  # the tests that check the statistics JSON (0053, 0110)
)

# What the tests are told the broker is (TEST_KAFKA_VERSION): the version whose APIs and
# behaviour kraftlite follows, for the tests that branch on it.
KAFKA_VERSION = "3.7.0"

# librdkafka's test scenarios (its tests/scenarios/*.json: the broker settings trivup gives
# the cluster), as kraftlite broker config. Its tests assume them: 0012, for one, produces to
# two partitions of a topic it lets the broker create.
SCENARIOS: dict[str, dict[str, object]] = {
    "default": {"num.partitions": 4, "default.replication.factor": 3},
    "noautocreate": {
        "num.partitions": 4,
        "default.replication.factor": 3,
        "auto.create.topics.enable": False,
    },
}

# Tests that cannot apply to kraftlite, by test number (or variant name): why.
NOT_APPLICABLE: dict[str, str] = {
    # Transactions: the next issue (kraftlite answers no transactional API).
    "0098": "transactions: a transactional Java producer (tests/java) and read_committed",
    "0103": "transactions: the transactional producer API end to end",
    "0129": "transactions: reads around an aborted transaction",
    # Kafka features kraftlite does not have.
    "0052": (
        "broker-assigned timestamps: creates topics with message.timestamp.type="
        "LogAppendTime, a topic config kraftlite does not have (CreateTime only)"
    ),
    "0077": (
        "log compaction, but its topics are created with Kafka's kafka-topics.sh (KAFKA_PATH) "
        "and configs kraftlite does not have (segment.ms, segment.bytes, "
        "file.delete.delay.ms): tests/integration/test_compaction.py covers the same"
    ),
    "0092": (
        "message format v1 (MsgVersion 1, Produce v2 and older), which kraftlite never served "
        "and Kafka 4.0 removed (KIP-896; the test skips itself on Kafka 4.0)"
    ),
    "0101": (
        "fetch from follower (KIP-392): needs brokers with racks and a replica selector; "
        "kraftlite serves fetches from leaders only (preferred_read_replica is always -1)"
    ),
    # Set-ups this run does not make (the cluster is plaintext, without SASL or SSL).
    "0097": "SSL: needs the SSL_* certificates and listener trivup sets up (skips itself)",
    "0115": (
        "ACLs for unauthenticated clients: adds a DENY ACL for User:* (kafka-acls.sh) and "
        "expects it enforced; kraftlite applies ACLs only with auth.required, which needs "
        "SASL, and the test skips itself when SASL is configured"
    ),
    "0119": "ACLs for unauthenticated clients, as 0115 (consumer side)",
    "0126": "SASL OAUTHBEARER with an OIDC token endpoint (skips itself without SASL)",
    "0135": "SASL PLAIN or SCRAM credentials in test.conf (skips itself without)",
    "0142": "SASL re-authentication (KIP-368) (skips itself without SASL)",
    # Not about the broker: librdkafka's built-in mock cluster only, though not flagged local.
    "0068": "runs only against librdkafka's mock cluster (never the configured broker)",
    "0139": "runs only against librdkafka's mock cluster (never the configured broker)",
    "0150": "runs only against librdkafka's mock cluster (never the configured broker)",
}

# Tests run in parts (SUBTESTS=<filter>, one run each): to leave out a part that cannot
# apply, or so that one part's failure does not hide the parts after it.
ADMIN_APIS = (  # 0081's sub-tests, by the function that runs each (both client types)
    "unclean_destroy",
    "CreateTopics",
    "DeleteTopics",
    "CreatePartitions",
    "CreateAcls",
    "DescribeAcls",
    "DeleteAcls",
    # AlterConfigs and IncrementalAlterConfigs: see ADMIN_APIS_NOT_APPLICABLE
    "DescribeConfigs",
    "DescribeConfigs_groups",
    "DeleteRecords",
    "ListConsumerGroups",
    "DescribeConsumerGroups",
    "DescribeConsumerGroups_with_authorized_ops",
    "DescribeTopics",
    "DescribeCluster",
    "DeleteGroups",
    "DeleteConsumerGroupOffsets",
    "ListOffsets",
    "AlterConsumerGroupOffsets",
    "ListConsumerGroupOffsets",
    "UserScramCredentials",
)
# 0081's sub-tests that cannot apply: each alters Kafka's own broker configs, which kraftlite
# does not have and refuses (INVALID_CONFIG) rather than take and ignore
ADMIN_APIS_NOT_APPLICABLE: dict[str, str] = {
    "AlterConfigs": "sets broker config sasl.kerberos.min.time.before.relogin (GSSAPI is not "
    "served) and topic config flush.ms (kraftlite fsyncs per broker, log.flush.interval.ms)",
    "IncrementalAlterConfigs": "sets broker configs background.threads, log.cleanup.policy and "
    "sasl.kerberos.min.time.before.relogin and group config consumer.session.timeout.ms "
    "(kraftlite has none of them)",
}
SPLIT: dict[str, tuple[tuple[str, ...], str]] = {
    "0055": (
        (
            "standard settings",
            "low linger.ms (0ms)",
            "microsecond linger.ms",
            "high linger.ms",
            "linger.ms < 1000",
            "no acks",
            "idempotence (10ms)",
        ),
        'without its "transactions (35ms)" case (transactions)',
    ),
    "0061": (("without transactions",), 'without its "with transactions" case'),
    "0081": (
        tuple(f"do_test_{api}:" for api in ADMIN_APIS),
        "per admin API (SUBTESTS=do_test_<API>:), one run each, so that one API's failure "
        "does not hide the others; without "
        + "; ".join(f"do_test_{api} ({why})" for api, why in ADMIN_APIS_NOT_APPLICABLE.items()),
    ),
    "0137": (
        ("with_seek", "different_batch", "same_batch", "store_offset", "eof_position"),
        "without do_test_consume_batch_control_msgs (transactions)",
    ),
}

# Tests run as for another broker version, to leave out what cannot apply.
VERSION_OVERRIDES: dict[str, tuple[str, str]] = {
    "0109": (
        "2.0.0",
        "as for Kafka 2.0, so its unauthorized-topic cases (kafka-acls.sh, as 0115) are skipped",
    ),
}

# CI's bounded slice: fast tests across producing, consuming, groups, offsets and admin.
CI_SLICE = (
    "0001",  # producers created and destroyed, on an auto-created topic
    "0002",  # producing to a partition that does not exist
    "0005",  # the order of 50,000 messages
    "0012",  # produce to partitions of an auto-created topic, then consume each
    "0017",  # compression: gzip, snappy, lz4, zstd
    "0031",  # query_watermark_offsets, offsets_for_times (ListOffsets)
    "0035",  # ApiVersions
    "0040",  # a consumer group on an IO event queue
    "0044",  # CreatePartitions while producing
    "0056",  # a balanced consumer group, multi-threaded
    "0063",  # the cluster id (Metadata)
    "0085",  # headers (C++)
    "0090",  # the idempotent producer
    "0099",  # committed offsets with metadata
    "0118",  # an offset commit on revoke, during a rebalance
)

# The outer timeout per test number, seconds (the runner enforces each test's own first).
DEFAULT_TIMEOUT = 900
TIMEOUTS = {"0038": 1800, "0081": 1800, "0113": 1800}

TEST_F_LOCAL = "TEST_F_LOCAL"
TEST_F_KNOWN_ISSUE = "TEST_F_KNOWN_ISSUE"
TEST_F_MANUAL = "TEST_F_MANUAL"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def log(message: str) -> None:
    print(f"librdkafka-conformance: {message}", file=sys.stderr, flush=True)


class Failure(Exception):
    """A step that cannot go on; its message is the one line to print."""


class Stop(Exception):
    """SIGTERM: stop as for Ctrl-C."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop


# ------------------------------------------------------------------------------------------
# Source and build


def download(url: str, path: Path) -> None:
    log(f"downloading {url}")
    tmp = path.with_suffix(path.suffix + ".part")
    with urllib.request.urlopen(url, timeout=120) as response, tmp.open("wb") as out:
        shutil.copyfileobj(response, out)
    tmp.replace(path)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def dsc_checksums(text: str) -> dict[str, str]:
    """The Checksums-Sha256 field of a .dsc: {file name: sha256}."""
    sums: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("Checksums-Sha256:"):
            inside = True
            continue
        if inside:
            if not line.startswith(" "):
                break
            digest, _size, name = line.split()
            sums[name] = digest
    return sums


def safe_members(archive: tarfile.TarFile, top: str) -> Iterator[tarfile.TarInfo]:
    """Every member, refusing any that would land outside `top` (for Pythons without
    tarfile's data filter)."""
    for member in archive.getmembers():
        parts = Path(member.name).parts
        if member.name.startswith("/") or ".." in parts or not parts or parts[0] != top:
            raise Failure(f"{ORIG}: unexpected member {member.name!r}")
        if (member.issym() or member.islnk()) and (
            member.linkname.startswith("/") or ".." in Path(member.linkname).parts
        ):
            raise Failure(f"{ORIG}: link {member.name!r} -> {member.linkname!r} leaves the tree")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            raise Failure(f"{ORIG}: special file {member.name!r}")
        yield member


def fetch_source(mirror: str) -> Path:
    """The unpacked source tree, downloaded and verified on first use."""
    source = CACHE / f"librdkafka-{VERSION}"
    if (source / "configure").exists():
        return source
    CACHE.mkdir(parents=True, exist_ok=True)
    dsc = CACHE / DSC
    if not dsc.exists():
        download(mirror + DSC, dsc)
    sums = dsc_checksums(dsc.read_text())
    if sums.get(ORIG) != ORIG_SHA256:
        raise Failure(f"{DSC} names {ORIG} with SHA-256 {sums.get(ORIG)}, not {ORIG_SHA256}")
    tarball = CACHE / ORIG
    if not tarball.exists() or sha256(tarball) != ORIG_SHA256:
        download(mirror + ORIG, tarball)
    actual = sha256(tarball)
    if actual != ORIG_SHA256:
        tarball.unlink()
        raise Failure(f"{ORIG}: SHA-256 {actual}, expected {ORIG_SHA256} (from {DSC})")
    log(f"{ORIG}: SHA-256 verified; unpacking")
    unpack = Path(tempfile.mkdtemp(prefix="unpack-", dir=CACHE))
    try:
        with tarfile.open(tarball) as archive:
            tops = {Path(m.name).parts[0] for m in archive.getmembers() if m.name}
            if len(tops) != 1:
                raise Failure(f"{ORIG}: expected one top directory, found {sorted(tops)}")
            top = tops.pop()
            members = list(safe_members(archive, top))
            if hasattr(tarfile, "data_filter"):
                archive.extractall(unpack, members=members, filter="data")
            else:
                archive.extractall(unpack, members=members)
        (unpack / top).rename(source)
    finally:
        shutil.rmtree(unpack, ignore_errors=True)
    return source


def missing_packages() -> list[str]:
    if shutil.which("dpkg-query") is None:
        return []
    missing = []
    for package in BUILD_DEPS:
        status = subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", package],
            capture_output=True,
            text=True,
            check=False,
        )
        if "install ok installed" not in status.stdout:
            missing.append(package)
    return missing


def install_build_deps() -> None:
    """As scripts/_bootstrap.sh's apt_install: when apt-get is there and we may use it."""
    missing = missing_packages()
    if not missing:
        return
    sudo: list[str] = []
    if os.geteuid() != 0:
        if (
            shutil.which("sudo") is None
            or subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False).returncode
        ):
            log(f"missing Debian packages (install them): {' '.join(missing)}")
            return
        sudo = ["sudo", "-n"]
    if shutil.which("apt-get") is None:
        log(f"missing packages, and no apt-get: {' '.join(missing)}")
        return
    log(f"installing {' '.join(missing)} (apt-get)")
    install = [*sudo, "apt-get", "install", "-y", "-q", *missing]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if subprocess.run(install, capture_output=True, env=env, check=False).returncode:
        subprocess.run([*sudo, "apt-get", "update", "-q"], capture_output=True, check=False)
        result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
        if result.returncode:
            log(f"apt-get install failed: {result.stderr.strip().splitlines()[-1:]}")


def run_logged(command: Sequence[str], cwd: Path, log_file: Path, what: str) -> None:
    with log_file.open("ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        result = subprocess.run(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=False)
        if result.returncode:
            tail = log_file.read_text(errors="replace").splitlines()[-15:]
            raise Failure(f"{what} failed (log: {log_file}):\n" + "\n".join(tail))


def build(source: Path, jobs: int) -> Path:
    """tests/test-runner, built once, and again when BUILD_DEPS change (make is incremental)."""
    runner = source / "tests" / "test-runner"
    stamp = source / ".kraftlite-built"
    wanted = f"{VERSION} {' '.join(BUILD_DEPS)}\n"
    if runner.exists() and stamp.exists() and stamp.read_text() == wanted:
        return runner
    install_build_deps()
    build_log = CACHE / "build.log"
    started = time.monotonic()
    log("./configure (the system's libraries)")
    run_logged(["./configure"], source, build_log, "./configure")
    log(f"make libs, then make -C tests build (-j{jobs}; log: {build_log})")
    run_logged(["make", f"-j{jobs}", "libs"], source, build_log, "make libs")
    run_logged(["make", f"-j{jobs}", "-C", "tests", "build"], source, build_log, "make tests")
    stamp.write_text(wanted)
    log(f"built in {time.monotonic() - started:.0f}s")
    return runner


# ------------------------------------------------------------------------------------------
# The tests librdkafka declares, and which apply


@dataclasses.dataclass(frozen=True, slots=True)
class Variant:
    name: str  # e.g. 0045_subscribe_update
    flags: str
    scenario: str

    @property
    def number(self) -> str:
        return self.name[:4]


def declared_tests(source: Path) -> list[Variant]:
    """The `tests[]` table of tests/test.c: every test function with its flags."""
    text = (source / "tests" / "test.c").read_text()
    table = text[text.index("struct test tests[]") :]
    table = table[: table.index("{NULL}")]
    table = re.sub(r"/\*.*?\*/", "", table, flags=re.DOTALL)
    variants = []
    for start in (m.end() for m in re.finditer(r"\b_TEST\(", table)):
        depth, end = 1, start
        while depth:  # to the parenthesis that closes _TEST( (strings hold none here)
            depth += {"(": 1, ")": -1}.get(table[end], 0)
            end += 1
        name, flags, rest = ([*table[start : end - 1].split(",", 2), ""])[:3]
        scenario = re.search(r'\.scenario\s*=\s*"([^"]*)"', rest)
        variants.append(
            Variant(
                name.strip(),
                " ".join(flags.split()),
                scenario.group(1) if scenario else "default",
            )
        )
    if len(variants) < 100:
        raise Failure(f"read only {len(variants)} tests from tests/test.c")
    return variants


def flag_set(variant: Variant) -> set[str]:
    return {f.strip() for f in variant.flags.split("|")}


def classify(variant: Variant) -> tuple[str, str]:
    """("run" | "local" | "n/a", why)."""
    flags = flag_set(variant)
    if TEST_F_MANUAL in flags:
        return "n/a", "a manual test (librdkafka runs it only by hand)"
    if TEST_F_LOCAL in flags:
        return "local", "needs no broker (librdkafka alone or its mock cluster)"
    if TEST_F_KNOWN_ISSUE in flags:
        return "n/a", "librdkafka marks it a known issue (TEST_F_KNOWN_ISSUE) and does not run it"
    if scenario_of(variant) is None:
        return "n/a", f'scenario "{variant.scenario}" only (a cluster of Apache Kafka 2.3)'
    for key in (variant.name, variant.number):
        if key in NOT_APPLICABLE:
            return "n/a", NOT_APPLICABLE[key]
    return "run", ""


def scenario_of(variant: Variant) -> str | None:
    """The scenario (SCENARIOS) this variant runs in, None if none of ours."""
    return next((s for s in SCENARIOS if s in variant.scenario.split(",")), None)


# ------------------------------------------------------------------------------------------
# The cluster


def _proc_start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, starttime


def _children(pid: int) -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid:
            found.append((int(entry.name), fields[19]))
    return found


class DevCluster:
    """`kraftlite dev` in a data dir of its own, with every process it started."""

    def __init__(self, data_dir: Path, scenario: str) -> None:
        self.data_dir = data_dir
        self.scenario = scenario
        self.process: subprocess.Popen[bytes] | None = None
        self.nodes: list[tuple[int, str]] = []
        self.bootstrap = ""

    def start(self) -> str:
        from kraftlite.dev import free_base_port  # noqa: PLC0415 - only when we start one

        base = free_base_port()
        out = self.data_dir / "dev.out"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "broker.toml"
        config.write_text(
            f"# librdkafka's test scenario {self.scenario!r}\n"
            + "".join(
                f'"{key}" = {json.dumps(value)}\n'
                for key, value in SCENARIOS[self.scenario].items()
            )
        )
        command = [
            sys.executable,
            str(Path(__file__).resolve()),
            "kraftlite-dev",
            "--data-dir",
            str(self.data_dir),
            "--base-port",
            str(base),
            "--broker-config",
            str(config),
        ]
        log(
            f"starting kraftlite dev --base-port {base}, scenario {self.scenario} "
            f"(data: {self.data_dir})"
        )
        with out.open("wb") as file:
            self.process = subprocess.Popen(
                command, stdout=file, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            match = re.search(r"bootstrap\.servers=(\S+)", out.read_text(errors="replace"))
            if match:
                self.bootstrap = match.group(1)
                self.nodes = _children(self.process.pid)
                return self.bootstrap
            if self.process.poll() is not None:
                raise Failure(f"kraftlite dev exited: {out.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        raise Failure("kraftlite dev was not ready within 180 s")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM to `kraftlite dev` (it stops its brokers, then its controllers); whatever
        is left after 90 s is killed."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pid, started in self.nodes:
            if _proc_start_time(pid) == started:  # still that process, not a reused pid
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process = None


# ------------------------------------------------------------------------------------------
# Running the tests


@dataclasses.dataclass(slots=True)
class Result:
    test: str  # the variant, with [part] for a split test
    state: str  # PASSED, FAILED, SKIPPED
    seconds: float
    reason: str = ""
    log: str = ""


def kafka_tools(directory: Path) -> Path:
    """KAFKA_PATH for the tests: bin/kafka-topics.sh runs this script's stand-in."""
    bin_dir = directory / "kafka" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "kafka-topics.sh"
    script.write_text(
        f"#!/bin/sh\nexec '{sys.executable}' '{Path(__file__).resolve()}' kafka-topics \"$@\"\n"
    )
    script.chmod(0o755)
    return bin_dir.parent


def parse_log(text: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """From a runner's output: {variant: first failure}, {variant: skip reason} and
    {variant: state} (its end-of-test lines, for a runner that did not finish)."""
    text = ANSI.sub("", text)
    failures: dict[str, str] = {}
    for match in re.finditer(
        r'### Test "(\S+?)(?: \((.*?)\))?" failed at (\S+) at [^\n]*?: ###\n([^\n]*)', text
    ):
        name, subtest, where, message = match.groups()
        where = ":".join(where.split(":")[:2])  # file:line
        reason = f"{subtest}: {message.strip()}" if subtest else message.strip()
        failures.setdefault(name, f"{reason[:300]} [{where}]")
    skips = {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^\|\s*(\d{4}\w*)\s*\|\s*SKIPPED\s*\|[^|]*\|\s*(.*)$", text, re.M)
    }
    states = {
        m.group(1): m.group(2)
        for m in re.finditer(r"================= Test (\S+) (PASSED|FAILED|SKIPPED) =", text)
    }
    return failures, skips, states


def run_one(
    runner: Path,
    number: str,
    variants: list[Variant],
    env: dict[str, str],
    log_dir: Path,
    subtests: str | None = None,
) -> list[Result]:
    """One test number (all its variants that apply) in one runner process."""
    label = number if subtests is None else f"{number}[{subtests}]"
    safe = re.sub(r"[^\w.-]+", "_", label)
    log_file = log_dir / f"{safe}.log"
    report = log_dir / f"{safe}.report.json"
    env = {**env, "TESTS": number, "TEST_REPORT": str(report)}
    if subtests is not None:
        env["SUBTESTS"] = subtests
    if number in VERSION_OVERRIDES:
        env["TEST_KAFKA_VERSION"] = VERSION_OVERRIDES[number][0]
    timeout = TIMEOUTS.get(number, DEFAULT_TIMEOUT)
    command = [str(runner), "-L", "-p1"]
    if shutil.which("stdbuf"):  # the summary table survives the runner's abort() on failure
        command = ["stdbuf", "-oL", "-eL", *command]
    started = time.monotonic()
    exit_note = ""
    with log_file.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=runner.parent,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=timeout)
            if code < 0 and code != -signal.SIGABRT:  # abort() is how it ends on failure
                exit_note = f"runner killed by signal {-code}"
        except subprocess.TimeoutExpired:
            exit_note = f"still running after {timeout}s (killed)"
        finally:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    seconds = time.monotonic() - started
    text = log_file.read_text(errors="replace")
    failures, skips, end_states = parse_log(text)
    states: dict[str, tuple[str, float]] = {}
    with contextlib.suppress(OSError, ValueError):
        for name, entry in json.loads(report.read_text())["tests"].items():
            states[name] = (str(entry["state"]), float(entry["duration"]))
    results = []
    for variant in variants:
        name = variant.name if subtests is None else f"{variant.name}[{subtests}]"
        state, duration = states.get(variant.name, (end_states.get(variant.name, ""), seconds))
        if variant.name in failures:
            state = "FAILED"
        reason = failures.get(variant.name, "")
        if state not in ("PASSED", "FAILED", "SKIPPED"):
            state = "FAILED"
        if exit_note and state != "PASSED":
            state = "FAILED"
            reason = f"{exit_note}; {reason}" if reason else exit_note
        if state == "SKIPPED":
            reason = skips.get(variant.name, "")
        if state == "FAILED" and not reason:
            lines = [ln for ln in ANSI.sub("", text).splitlines() if ln.strip()]
            reason = lines[-1][:200] if lines else "no output"
        results.append(Result(name, state, round(duration, 1), reason, str(log_file)))
    return results


@dataclasses.dataclass(frozen=True, slots=True)
class Planned:
    scenario: str
    number: str
    variants: tuple[Variant, ...]


def select(args: argparse.Namespace, variants: list[Variant]) -> list[Planned]:
    """What to run: per scenario, the test numbers with the variants of each that apply, or,
    for --tests, every variant that needs a broker (a test listed as not applicable runs when
    asked for by number)."""
    if args.tests:
        numbers = [t.strip().zfill(4) for t in args.tests.split(",") if t.strip()]
        unknown = sorted(set(numbers) - {v.number for v in variants})
        if unknown:
            raise Failure(f"no such test: {', '.join(unknown)}")

        def wanted(v: Variant) -> bool:
            return classify(v)[0] != "local"
    else:
        numbers = list(CI_SLICE) if args.slice == "ci" else sorted({v.number for v in variants})

        def wanted(v: Variant) -> bool:
            return classify(v)[0] == "run"

    plan = []
    for scenario in SCENARIOS:
        if args.slice == "ci" and scenario != "default":
            continue
        for number in numbers:
            group = tuple(
                v
                for v in variants
                if v.number == number
                and wanted(v)
                and scenario_of(v) == scenario
                and TEST_F_MANUAL not in flag_set(v)
            )
            if group:
                plan.append(Planned(scenario, number, group))
    return plan


def write_test_conf(path: Path, bootstrap: str, multiplier: float) -> None:
    path.write_text(
        "# librdkafka's test.conf for a kraftlite cluster (scripts/librdkafka_conformance.py)\n"
        f"bootstrap.servers={bootstrap}\n"
        "broker.address.family=v4\n"
        # kraftlite is Python on whatever the machine has left: the tests' own timeouts, longer
        f"test.timeout.multiplier={multiplier}\n"
    )


def print_classification(variants: list[Variant]) -> None:
    rows = [(v.name, *classify(v)) for v in variants]
    for name, kind, why in rows:
        extra = ""
        variant = next(v for v in variants if v.name == name)
        if kind == "run" and name[:4] in SPLIT:
            extra = "run " + SPLIT[name[:4]][1]
        elif kind == "run" and name[:4] in VERSION_OVERRIDES:
            extra = "run " + VERSION_OVERRIDES[name[:4]][1]
        elif kind == "run" and scenario_of(variant) != "default":
            extra = f"in scenario {scenario_of(variant)}: {SCENARIOS[str(scenario_of(variant))]}"
        print(f"{name:<48} {kind:<6} {why or extra}")
    counts = {k: sum(1 for _, kind, _ in rows if kind == k) for k in ("run", "local", "n/a")}
    print(
        f"\n{len(rows)} variants: {counts['run']} apply, {counts['n/a']} cannot apply, "
        f"{counts['local']} need no broker"
    )


def summarize(results: list[Result], variants: list[Variant], elapsed: float) -> dict[str, object]:
    passed = [r for r in results if r.state == "PASSED"]
    failed = [r for r in results if r.state == "FAILED"]
    skipped = [r for r in results if r.state == "SKIPPED"]
    width = max((len(r.test) for r in results), default=10)
    print()
    print(f"{'test':<{width}}  {'result':<7} {'seconds':>8}  reason")
    for r in results:
        print(f"{r.test:<{width}}  {r.state:<7} {r.seconds:>8.1f}  {r.reason}")
    ran = len(passed) + len(failed)
    rate = len(passed) / ran if ran else 0.0
    print(
        f"\nlibrdkafka {VERSION} (Debian {DEBIAN_VERSION}), TEST_KAFKA_VERSION={KAFKA_VERSION}: "
        f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped; "
        f"pass rate {len(passed)}/{ran} = {rate:.0%} (in {elapsed / 60:.1f} min)"
    )
    return {
        "librdkafka": VERSION,
        "debian_package": DEBIAN_VERSION,
        "kafka_version": KAFKA_VERSION,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "passed": len(passed),
        "failed": len(failed),
        "skipped": len(skipped),
        "pass_rate": round(rate, 4),
        "seconds": round(elapsed),
        "results": [dataclasses.asdict(r) for r in results],
        "not_applicable": {v.name: classify(v)[1] for v in variants if classify(v)[0] == "n/a"},
        "split": {number: why for number, (_parts, why) in SPLIT.items()},
    }


def run(args: argparse.Namespace) -> int:
    source = fetch_source(args.mirror)
    variants = declared_tests(source)
    if args.list:
        print_classification(variants)
        return 0
    runner = build(source, args.jobs)
    if args.build_only:
        print(runner)
        return 0
    plan = select(args, variants)
    run_dir = CACHE / "runs" / f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=True)
    log(f"logs: {run_dir}")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "TESTS", "SUBTESTS", "TESTS_SKIP", "TEST_KAFKA_VERSION", "TEST_SCENARIO")
    }
    env.update(
        {
            "TEST_KAFKA_VERSION": KAFKA_VERSION,
            "LD_LIBRARY_PATH": f"{source / 'src'}:{source / 'src-cpp'}",
            "KAFKA_PATH": str(kafka_tools(run_dir)),
            "RDKAFKA_GITVER": f"{VERSION} (Debian {DEBIAN_VERSION})",
        }
    )
    if args.group_protocol:
        env["TEST_CONSUMER_GROUP_PROTOCOL"] = args.group_protocol
    results: list[Result] = []
    started = time.monotonic()
    for scenario in SCENARIOS:
        planned = [p for p in plan if p.scenario == scenario]
        if planned:
            results += run_scenario(args, runner, scenario, planned, env, run_dir)
    summary = summarize(results, variants, time.monotonic() - started)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    prune_runs(keep=30)
    return 1 if summary["failed"] or not results else 0


def run_scenario(
    args: argparse.Namespace,
    runner: Path,
    scenario: str,
    planned: list[Planned],
    env: dict[str, str],
    run_dir: Path,
) -> list[Result]:
    """The planned tests of one scenario, on a cluster of their own (or --bootstrap's)."""
    if args.bootstrap and scenario != "default":
        log(f"--bootstrap: not running the {scenario} scenario's tests (they need its cluster)")
        return []
    cluster = None if args.bootstrap else DevCluster(run_dir / f"cluster-{scenario}", scenario)
    conf = run_dir / f"test-{scenario}.conf"
    env = {**env, "TEST_SCENARIO": scenario, "RDKAFKA_TEST_CONF": str(conf)}
    results: list[Result] = []
    try:
        bootstrap = args.bootstrap or (cluster.start() if cluster else "")
        write_test_conf(conf, bootstrap, args.timeout_multiplier)
        env["BROKERS"] = bootstrap
        for index, item in enumerate(planned, 1):
            if cluster is not None and not cluster.alive():
                log("the cluster exited; starting a new one")
                cluster.stop()
                bootstrap = cluster.start()
                write_test_conf(conf, bootstrap, args.timeout_multiplier)
                env["BROKERS"] = bootstrap
            parts: Sequence[str | None] = (None,)
            if args.subtests:
                parts = (args.subtests,)
            elif item.number in SPLIT:
                parts = SPLIT[item.number][0]
            for part in parts:
                shown = item.number + (f" [{part}]" if part else "")
                log(f"[{scenario} {index}/{len(planned)}] {shown}")
                for result in run_one(runner, item.number, list(item.variants), env, run_dir, part):
                    results.append(result)
                    log(
                        f"    {result.test}: {result.state} ({result.seconds:.1f}s) {result.reason}"
                    )
    finally:
        if cluster is not None:
            log("stopping the cluster")
            cluster.stop()
            for child in cluster.data_dir.iterdir() if cluster.data_dir.exists() else ():
                if child.is_dir() and child.name != "logs":  # keep the node logs
                    shutil.rmtree(child, ignore_errors=True)
    return results


def prune_runs(keep: int) -> None:
    runs = sorted((CACHE / "runs").glob("*T*Z*"))
    for old in runs[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def kraftlite_dev(argv: list[str]) -> int:
    """`kraftlite dev` itself (kraftlite/dev.py: the same processes, ports, readiness, output
    and ordered stop), but every broker also reads --broker-config: the scenario's settings,
    which `kraftlite dev` has no flag for."""
    import kraftlite.dev  # noqa: PLC0415 - only the cluster process needs kraftlite

    parser = argparse.ArgumentParser(prog="kraftlite-dev")
    parser.add_argument("--data-dir", required=True, type=Path)
    parser.add_argument("--base-port", required=True, type=int)
    parser.add_argument("--broker-config", required=True)
    args = parser.parse_args(argv)
    plan = kraftlite.dev.plan

    def plan_with_config(
        data_dir: Path, controllers: int, brokers: int, base_port: int
    ) -> list[kraftlite.dev.Node]:
        return [
            dataclasses.replace(node, args=(*node.args, "--config", args.broker_config))
            if node.args[0] == "broker"
            else node
            for node in plan(data_dir, controllers, brokers, base_port)
        ]

    kraftlite.dev.plan = plan_with_config
    return kraftlite.dev.run(args.data_dir, 3, 3, args.base_port)


# ------------------------------------------------------------------------------------------
# The stand-in for Kafka's bin/kafka-topics.sh (KAFKA_PATH), over the Kafka Admin API


def kafka_topics(argv: list[str]) -> int:
    # imported here: only the stand-in needs confluent-kafka
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415
    from confluent_kafka.cimpl import NewPartitions, NewTopic  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="kafka-topics.sh")
    parser.add_argument("--bootstrap-server", required=True)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true")
    action.add_argument("--alter", action="store_true")
    action.add_argument("--delete", action="store_true")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int)
    parser.add_argument("--replication-factor", type=int)
    parser.add_argument("--config", action="append", default=[])
    args = parser.parse_args(argv)
    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    if args.create:
        configs = dict(c.split("=", 1) for c in args.config)
        topic = NewTopic(
            args.topic,
            num_partitions=args.partitions or -1,
            replication_factor=args.replication_factor or -1,
            config=configs,
        )
        futures = admin.create_topics([topic], operation_timeout=30)
    elif args.alter:
        if args.partitions is None:
            parser.error("--alter needs --partitions")
        futures = admin.create_partitions([NewPartitions(args.topic, args.partitions)])
    else:
        futures = admin.delete_topics([args.topic], operation_timeout=30)
    try:
        for future in futures.values():
            future.result(timeout=60)
    except Exception as error:
        print(f"kafka-topics.sh (kraftlite stand-in): {error}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["kafka-topics"]:
        return kafka_topics(argv[1:])
    if argv[:1] == ["kraftlite-dev"]:
        return kraftlite_dev(argv[1:])
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--slice", choices=["ci"], help="the bounded slice CI runs")
    which.add_argument("--all", action="store_true", help="every applicable test")
    which.add_argument("--tests", help="test numbers, comma-separated (e.g. 0001,0081)")
    which.add_argument("--build-only", action="store_true", help="fetch and build, run nothing")
    which.add_argument("--list", action="store_true", help="which tests apply, and why not")
    parser.add_argument(
        "--subtests", help="SUBTESTS: run only the sub-tests whose name contains this"
    )
    parser.add_argument("--json", help="write the summary as JSON to this path")
    parser.add_argument("--bootstrap", help="HOST:PORT,... of a running cluster to use instead")
    parser.add_argument("--jobs", type=int, default=2, help="make -j (default 2)")
    parser.add_argument(
        "--timeout-multiplier",
        type=float,
        default=2.0,
        help="test.timeout.multiplier: scales the tests' own timeouts (default 2)",
    )
    parser.add_argument(
        "--group-protocol",
        choices=["classic", "consumer"],
        help="TEST_CONSUMER_GROUP_PROTOCOL (default: the runner's, classic)",
    )
    parser.add_argument(
        "--mirror", default=DEBIAN_POOL, help=f"Debian pool directory (default {DEBIAN_POOL})"
    )
    args = parser.parse_args(argv)
    if not (args.slice or args.all or args.tests or args.build_only or args.list):
        parser.error("choose --slice ci, --all, --tests, --build-only or --list")
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        return run(args)
    except Failure as failure:
        log(str(failure))
        return 2
    except (KeyboardInterrupt, Stop):
        log("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())

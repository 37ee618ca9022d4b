"""Test hosts: real network hosts on one machine, in Linux network namespaces, with link faults.

`TestNet(["controller-1", ..., "client"])` makes one namespace per host and a hub namespace
that routes between them: each host has one link, a veth pair whose host end is `eth0` with
the address 10.88.<i>.2/24 and whose hub end is 10.88.<i>.1, the host's default gateway. The
range exists only inside these namespaces; the machine's own namespace gets no address and no
route, so nothing reaches or leaves the test network except through the test's own processes.
Every packet between two hosts crosses the hub, where the faults act on it:

- `cut_link(host)`: the link goes down (its carrier with it), as a pulled cable;
- `silence(host)`: every packet to or from the host is dropped, as a dead switch port or a
  firewall that drops: peers see no refusal, only timeouts;
- `cut(src, dst, mode)`: connections src opens to dst (open ones and new ones) are dropped
  (`"hang"`) or answered with a TCP reset (`"reset"`); dst can still open connections to src.
  `isolate` and `partition` build on it. The same interface as the fault proxy's
  (network.py), so the nemesis and the chaos tests run on either;
- `shape(host, delay_ms, jitter_ms, loss_pct)`: the link delays each packet, both ways, by
  `delay ± jitter` (uniform) and drops `loss_pct` of them, as `tc netem` would;
- `heal()`: every fault removed, links up;
- `firewall(allowed)`: besides faults, only the connections the rules allow (source
  hosts, target hosts, port) may be opened, as a data centre's firewall would.

Drops, resets and loss are nftables rules in the hub (one table, rendered from the faults set
and replaced atomically: `ruleset`). Delay needs `sch_netem`, which this machine's kernel
lacks (`netem_available` probes it), so the hub routes packets through a TUN device served by
a small forwarder (tests/harness/linkd.py) while any link has a delay; docs/fault-injection.md
says what that costs.

Processes run on a host with `host.command(args)` (`ip netns exec`); the test itself reaches
the hosts from inside one (`with net.inside("client"): ...` moves the calling thread, and the
threads and processes it starts, into that host's namespace). Needs root, iproute2 and
nftables (scripts/_bootstrap.sh installs them); `available()` says whether this machine can.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNET = 0x40000000
SUBNET = "10.88"
TABLE = "kraftlite_testnet"
DELAY_TABLE = 200  # the hub's routing table that sends forwarded packets to the forwarder
NETNS_DIR = Path("/var/run/netns")
REPO = Path(__file__).resolve().parents[2]


def run(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def available() -> str | None:
    """Why test hosts cannot be built here, or None if they can."""
    if os.geteuid() != 0:
        return "test hosts need root (network namespaces)"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"test hosts need `{tool}` (scripts/_bootstrap.sh installs iproute2, nftables)"
    if not Path("/dev/net/tun").exists():
        return "test hosts need /dev/net/tun"
    return None


def netem_available() -> bool:
    """Whether the kernel has `sch_netem` (then `tc netem` could delay links; here it never has)."""
    name = f"klprobe-{os.getpid()}"
    try:
        run("ip", "netns", "add", name)
        run("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "netem")
    except RuntimeError:
        return False
    else:
        return True
    finally:
        with contextlib.suppress(RuntimeError):
            run("ip", "netns", "del", name)


def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


@dataclass(frozen=True)
class Host:
    name: str
    index: int
    namespace: str
    link: str  # the hub's end of its veth

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.index}.2"

    def command(self, args: list[str]) -> list[str]:
        """`args` run on this host."""
        return ["ip", "netns", "exec", self.namespace, *args]


@dataclass(frozen=True)
class Shape:
    delay_ms: float = 0.0
    jitter_ms: float = 0.0
    loss_pct: float = 0.0


@dataclass(frozen=True)
class Allow:
    """A firewall rule: hosts `sources` may open connections to `port` on hosts `targets`."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]
    port: int


@dataclass
class Faults:
    """What is broken now; `ruleset` renders the drops and resets, `delays` the delays."""

    silenced: set[str] = field(default_factory=set)
    cuts: dict[tuple[str, str], str] = field(default_factory=dict)  # (src, dst) -> mode
    shapes: dict[str, Shape] = field(default_factory=dict)
    links_down: set[str] = field(default_factory=set)
    # With a firewall, a new connection not allowed by one of its rules is dropped; it stays
    # through `heal` (it is the network's configuration, not a fault).
    firewall: tuple[Allow, ...] | None = None


def ruleset(hosts: dict[str, Host], faults: Faults) -> str:
    """The hub's nftables table for `faults` (pure: tested without a network).

    One forward chain. Conntrack is on for every packet (`ct state new` counts), so a cut
    knows each connection's direction, including connections opened before it. A packet
    through the delay forwarder is forwarded twice (into the TUN device, then out of it):
    rules match a link by `iifname` (its first pass) or `oifname` (its second), so each
    applies once."""
    rules = ["ct state new counter"]
    for name in sorted(faults.silenced):
        link = hosts[name].link
        rules += [f'iifname "{link}" drop', f'oifname "{link}" drop']
    for (src, dst), mode in sorted(faults.cuts.items()):
        a, b = hosts[src].address, hosts[dst].address
        opened = f"ct original ip saddr {a} ct original ip daddr {b}"  # both directions
        if mode == "reset":
            rules.append(f"{opened} meta l4proto tcp reject with tcp reset")
        rules.append(f"{opened} drop")
    for name, shape in sorted(faults.shapes.items()):
        if shape.loss_pct > 0:
            link = hosts[name].link
            per_10k = round(shape.loss_pct * 100)
            rules += [
                f'iifname "{link}" numgen random mod 10000 < {per_10k} drop',
                f'oifname "{link}" numgen random mod 10000 < {per_10k} drop',
            ]
    if faults.firewall is not None:
        for allow in faults.firewall:
            sources = ", ".join(hosts[name].address for name in allow.sources)
            targets = ", ".join(hosts[name].address for name in allow.targets)
            rules.append(
                f"ct state new ip saddr {{ {sources} }} ip daddr {{ {targets} }} "
                f"tcp dport {allow.port} accept"
            )
        rules.append("ct state new drop")
    body = "\n".join(f"    {rule}" for rule in rules)
    return (
        f"table inet {TABLE}\ndelete table inet {TABLE}\n"
        f"table inet {TABLE} {{\n  chain forward {{\n"
        f"    type filter hook forward priority 0; policy accept;\n{body}\n  }}\n}}\n"
    )


def delays(hosts: dict[str, Host], faults: Faults) -> dict[str, tuple[float, float]]:
    """The forwarder's delays: host address -> (delay ms, jitter ms), for shaped links."""
    return {
        hosts[name].address: (shape.delay_ms, shape.jitter_ms)
        for name, shape in faults.shapes.items()
        if shape.delay_ms > 0 or shape.jitter_ms > 0
    }


class TestNet:
    """Hosts named `names` (one namespace each) around a hub; `close()` removes them all."""

    __test__ = False  # not a pytest test class

    def __init__(self, names: Iterable[str]) -> None:
        sweep_stale()
        self.token = secrets.token_hex(2)
        prefix = f"kl{self.token}-{os.getpid()}"
        self.hub = f"{prefix}-hub"
        self.tun = f"kl{self.token}tun"
        self.hosts = {
            name: Host(name, index, f"{prefix}-{name}", f"kl{self.token}v{index}")
            for index, name in enumerate(names, start=1)
        }
        self.faults = Faults()
        self._outside = os.open("/proc/thread-self/ns/net", os.O_RDONLY)  # where we were built
        self._forwarder: subprocess.Popen[str] | None = None
        self._delaying = False
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    # -- building and removing -----------------------------------------------------------

    def _build(self) -> None:
        run("ip", "netns", "add", self.hub)
        hub = ["ip", "netns", "exec", self.hub]
        for key in ("all", "default"):  # the forwarder's packets come back on another device
            run(*hub, "sysctl", "-qw", f"net.ipv4.conf.{key}.rp_filter=0")
        run(*hub, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        run("ip", "-n", self.hub, "link", "set", "lo", "up")
        for host in self.hosts.values():
            run("ip", "netns", "add", host.namespace)
            peer = f"kl{self.token}p{host.index}"
            run("ip", "link", "add", host.link, "type", "veth", "peer", "name", peer)
            run("ip", "link", "set", host.link, "netns", self.hub)
            run("ip", "link", "set", peer, "netns", host.namespace)
            inside = ["ip", "-n", host.namespace]
            run(*inside, "link", "set", peer, "name", "eth0")
            run(*inside, "addr", "add", f"{host.address}/24", "dev", "eth0")
            run(*inside, "link", "set", "eth0", "up")
            run(*inside, "link", "set", "lo", "up")
            run(*inside, "route", "add", "default", "via", f"{SUBNET}.{host.index}.1")
            run(
                "ip", "-n", self.hub, "addr", "add", f"{SUBNET}.{host.index}.1/24", "dev", host.link
            )
            run("ip", "-n", self.hub, "link", "set", host.link, "up")
        self._forwarder = subprocess.Popen(
            [*hub, sys.executable, "-m", "tests.harness.linkd", self.tun],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self._forwarder_said_ok()
        run("ip", "-n", self.hub, "link", "set", self.tun, "up")
        # what comes out of the forwarder goes on to its host; everything else forwarded goes
        # into it while table DELAY_TABLE has a route (only while some link has a delay)
        run("ip", "-n", self.hub, "rule", "add", "pref", "100", "iif", self.tun, "lookup", "main")
        run("ip", "-n", self.hub, "rule", "add", "pref", "200", "lookup", str(DELAY_TABLE))
        self._apply()

    def _forwarder_said_ok(self) -> None:
        assert self._forwarder is not None and self._forwarder.stdout is not None
        answer = self._forwarder.stdout.readline().strip()
        if answer != "ok":
            raise RuntimeError(f"the link forwarder did not start: {answer!r}")

    def close(self) -> None:
        if self._forwarder is not None:
            with contextlib.suppress(OSError):
                assert self._forwarder.stdin is not None
                self._forwarder.stdin.close()
            try:
                self._forwarder.wait(5)
            except subprocess.TimeoutExpired:
                self._forwarder.kill()
                self._forwarder.wait()
            if self._forwarder.stdout is not None:
                self._forwarder.stdout.close()
            self._forwarder = None
        for namespace in [self.hub, *(h.namespace for h in self.hosts.values())]:
            with contextlib.suppress(RuntimeError):
                run("ip", "netns", "del", namespace)
        if self._outside >= 0:
            os.close(self._outside)
            self._outside = -1

    # -- reaching the hosts --------------------------------------------------------------

    @contextlib.contextmanager
    def inside(self, name: str) -> Iterator[Host]:
        """The calling thread (and what it starts) in host `name`'s namespace until the end."""
        host = self.hosts[name]
        there = os.open(NETNS_DIR / host.namespace, os.O_RDONLY)
        try:
            with self._moved_to(there):
                yield host
        finally:
            os.close(there)

    @contextlib.contextmanager
    def outside(self) -> Iterator[None]:
        """The calling thread back in the namespace the hosts were built from, until the end."""
        with self._moved_to(self._outside):
            yield

    @contextlib.contextmanager
    def _moved_to(self, namespace_fd: int) -> Iterator[None]:
        here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            _libc_setns(namespace_fd)
            try:
                yield
            finally:
                _libc_setns(here)
        finally:
            os.close(here)

    # -- faults --------------------------------------------------------------------------

    def cut(self, src: str, dst: str, mode: str = "reset") -> None:
        """Connections `src` opens to `dst` fail: reset (`"reset"`) or silent (`"hang"`)."""
        assert mode in {"reset", "hang"}, mode
        self.faults.cuts[(src, dst)] = mode
        self._apply()

    def isolate(
        self, node: str, others: Iterable[str], mode: str = "reset", both: bool = True
    ) -> None:
        for other in others:
            self.faults.cuts[(node, other)] = mode
            if both:
                self.faults.cuts[(other, node)] = mode
        self._apply()

    def partition(self, side: Iterable[str], other_side: Iterable[str], mode: str = "hang") -> None:
        """No connection between the two sets, either way."""
        others = list(other_side)
        for name in side:
            self.isolate(name, others, mode)

    def silence(self, name: str) -> None:
        self.faults.silenced.add(name)
        self._apply()

    def shape(
        self, name: str, delay_ms: float = 0, jitter_ms: float = 0, loss_pct: float = 0
    ) -> None:
        """The link of `name` delays (`delay_ms ± jitter_ms`) and loses packets, both ways."""
        self.faults.shapes[name] = Shape(delay_ms, jitter_ms, loss_pct)
        self._apply()

    def shape_all(self, delay_ms: float = 0, jitter_ms: float = 0, loss_pct: float = 0) -> None:
        for name in self.hosts:
            self.faults.shapes[name] = Shape(delay_ms, jitter_ms, loss_pct)
        self._apply()

    def firewall(self, allowed: Iterable[Allow] | None) -> None:
        """Only the connections `allowed` names may be opened (None: any), as a data
        centre's firewall would; faults come first."""
        self.faults.firewall = None if allowed is None else tuple(allowed)
        self._apply()

    def cut_link(self, name: str) -> None:
        self.faults.links_down.add(name)
        run("ip", "-n", self.hub, "link", "set", self.hosts[name].link, "down")

    def heal(self, shapes: bool = False) -> None:
        """Every cut, silence and downed link removed; link shapes too with `shapes`."""
        for name in self.faults.links_down:
            run("ip", "-n", self.hub, "link", "set", self.hosts[name].link, "up")
        self.faults = Faults(
            shapes={} if shapes else self.faults.shapes, firewall=self.faults.firewall
        )
        self._apply()

    def _apply(self) -> None:
        run(
            "ip",
            "netns",
            "exec",
            self.hub,
            "nft",
            "-f",
            "-",
            stdin=ruleset(self.hosts, self.faults),
        )
        wanted = delays(self.hosts, self.faults)
        assert self._forwarder is not None and self._forwarder.stdin is not None
        self._forwarder.stdin.write(json.dumps({"delays": wanted}) + "\n")
        self._forwarder.stdin.flush()
        self._forwarder_said_ok()
        route = ["ip", "-n", self.hub, "route"]
        if wanted and not self._delaying:
            run(*route, "add", f"{SUBNET}.0.0/16", "dev", self.tun, "table", str(DELAY_TABLE))
            self._delaying = True
        elif not wanted and self._delaying:
            run(*route, "del", f"{SUBNET}.0.0/16", "table", str(DELAY_TABLE))
            self._delaying = False


def sweep_stale() -> None:
    """Remove namespaces left by test processes that died before closing their TestNet."""
    if not NETNS_DIR.is_dir():
        return
    for entry in NETNS_DIR.iterdir():
        parts = entry.name.split("-")
        if len(parts) < 3 or not parts[0].startswith("kl") or not parts[1].isdigit():
            continue
        if not Path(f"/proc/{parts[1]}").exists():
            with contextlib.suppress(RuntimeError):
                run("ip", "netns", "del", entry.name)

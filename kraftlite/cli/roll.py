"""`kraftlite cluster roll`: restart (or upgrade) a running cluster node by node, each only
once the cluster is whole again: Kafka's rolling-restart practice, which Redpanda's
maintenance mode and Strimzi's rolling updates follow.

Rules:
1. Controllers first, then brokers (a newer broker may need newer metadata). Controllers
   that follow go before the active one, which goes last, so leadership of the quorum
   moves once (chosen again before each: leadership may have moved). Brokers in id order.
2. Before each node, the cluster must be whole (`problems`): the quorum has a leader and
   every voter follows it within `MAX_VOTER_LAG` entries; every registered broker is
   unfenced and not shutting down; no partition is under-replicated or offline (from the
   controllers' metadata, internal topics included). The roll waits for that, up to its
   timeout, and stops (exit 1) if it does not come. Whole means whole twice, a second
   apart: the leader's view of a voter that just restarted may be from before.
3. A node restarts through `POST /v1/node/restart` (api/restart.py: a broker's controlled
   shutdown moves its leaders and group coordinators first; the same process starts again
   on its command line, so an upgrade is: install the new version on every host, then
   roll), or, with `--command`, by running the operator's own command for it (systemd,
   ssh, kubectl), with `{kind}`, `{id}`, `{name}`, `{url}` and `{host}` filled in.
4. A node is back once its `GET /readyz` is ready under a new `boot_id` (another start of
   its process). Then rule 2 again: the next node waits until every partition is fully
   replicated, so no acknowledged write depends on the node about to stop.
5. Progress goes to stderr as it happens; the last line (or `--output json`) is each
   node's times.
"""

from __future__ import annotations

import shlex
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import click
from rich.console import Console

from kraftlite.cli.common import (
    EXIT_API_ERROR,
    Connection,
    api_errors,
    bootstrap_option,
    fail,
    output_option,
    print_json,
)
from kraftlite.client import KraftliteError, SyncAdmin
from kraftlite.clock import SystemClock

MAX_VOTER_LAG = 50  # rule 2: committed entries a voter may lack and count as following
POLL_S = 0.5
SETTLE_S = 1.0  # rule 2: the cluster seen whole again this much later


class RollError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Target:
    kind: str  # "controller" or "broker"
    node_id: int
    url: str

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.node_id}"


def plan(
    quorum: Mapping[str, Any], cluster: Mapping[str, Any], kinds: Iterable[str]
) -> list[Target]:
    """Rule 1: the order of the roll. A voter without a URL cannot be asked: it is
    refused (ValueError) rather than skipped."""
    targets: list[Target] = []
    if "controller" in kinds:
        leader = quorum.get("leader_id")
        voters = sorted(quorum["voters"], key=lambda v: (v["id"] == leader, v["id"]))
        for voter in voters:
            if not voter.get("url"):
                raise ValueError(f"controller {voter['id']} has no URL in the metadata")
            targets.append(Target("controller", int(voter["id"]), str(voter["url"])))
    if "broker" in kinds:
        targets += [
            Target("broker", int(b["id"]), str(b["url"]))
            for b in sorted(cluster["brokers"], key=lambda b: b["id"])
        ]
    return targets


def problems(
    quorum: Mapping[str, Any], cluster: Mapping[str, Any], stats: Mapping[str, Any]
) -> list[str]:
    """Rule 2: why the cluster is not whole (nothing: it is)."""
    found = []
    if quorum.get("leader_id") is None:
        found.append("the controller quorum has no leader")
    for voter in quorum.get("voters", []):
        lag = voter.get("lag")
        if voter.get("state") not in {"leader", "follower"}:
            found.append(f"controller {voter['id']} is {voter.get('state', 'unknown')}")
        elif lag is None:
            found.append(f"controller {voter['id']}'s lag is not known yet")
        elif lag > MAX_VOTER_LAG:
            found.append(f"controller {voter['id']} lags {lag} entries")
    for broker in cluster.get("brokers", []):
        if broker.get("fenced"):
            found.append(f"broker {broker['id']} is fenced")
        elif broker.get("in_controlled_shutdown"):
            found.append(f"broker {broker['id']} is shutting down")
    for key, what in (
        ("under_replicated_partitions", "under-replicated"),
        ("offline_partitions", "offline"),
    ):
        if stats.get(key):
            found.append(f"{stats[key]} partitions {what}")
    return found


def restart_command(template: str, target: Target) -> list[str]:
    """Rule 3: the operator's command for one node. The template is split as a shell
    would, then each word filled in, so what the cluster reports (a node's URL) is always
    data inside one word, never syntax, and never an option (a value starting with "-" is
    refused)."""
    host = urllib.parse.urlsplit(target.url).hostname or ""
    values = {
        "kind": target.kind,
        "id": str(target.node_id),
        "name": target.name,
        "url": target.url,
        "host": host,
    }
    for key in ("url", "host"):
        if values[key].startswith("-"):
            raise RollError(f"{target.name}'s {key} {values[key]!r} looks like an option")
    try:
        argv = [word.format(**values) for word in shlex.split(template)]
    except (ValueError, KeyError, IndexError) as exc:  # unbalanced quotes or braces
        raise RollError(
            f"--command {template!r}: {exc!r} (only {{kind}}, {{id}}, {{name}}, {{url}}, "
            "{host} are filled in; write other braces twice)"
        ) from None
    if not argv:
        raise RollError("--command is empty")
    return argv


class _Roll:
    def __init__(self, admin: SyncAdmin, timeout_s: float, console: Console) -> None:
        self.admin, self.timeout_s, self.console = admin, timeout_s, console
        self.clock = SystemClock()

    def problems(self) -> list[str]:
        return problems(
            self.admin.leader_quorum(), self.admin.cluster(), self.admin.cluster_stats()
        )

    def wait(self, what: str, check: Callable[[], str | None]) -> float:
        """Poll `check` (None: done, else what it waits for) until done; the seconds."""
        started = self.clock.monotonic_ms() / 1000
        deadline = started + self.timeout_s
        with self.console.status(what) as status:
            while True:
                try:
                    waiting = check()
                except KraftliteError as exc:  # a node restarting: ask again
                    waiting = f"{exc.code.name}: {exc.message}"
                if waiting is None:
                    return self.clock.monotonic_ms() / 1000 - started
                if self.clock.monotonic_ms() / 1000 >= deadline:
                    raise RollError(f"{what}: not within {self.timeout_s:g} s ({waiting})")
                status.update(f"{what}: {waiting}")
                time.sleep(POLL_S)

    def whole(self) -> str | None:
        """Rule 2, seen whole twice SETTLE_S apart (a voter's lag as the leader last heard
        it may be from before the voter restarted)."""
        found = self.problems()
        if not found:
            time.sleep(SETTLE_S)
            found = self.problems()
        return "; ".join(found) if found else None

    def next_controller(self, remaining: list[Target]) -> Target:
        """Rule 1 at each step: a controller that does not lead, while one is left (the
        quorum's leader may have moved since the roll began)."""
        leader = self.admin.leader_quorum().get("leader_id")
        return next((t for t in remaining if t.node_id != leader), remaining[0])

    def restart(self, target: Target, command: str | None) -> dict[str, Any]:
        self.wait("waiting for the cluster to be whole", self.whole)
        before = self.admin.node_status(target.url)
        if before is None:
            raise RollError(f"{target.name} at {target.url} does not answer")
        started = self.clock.monotonic_ms() / 1000
        self.console.print(f"{target.name}: restarting")
        if command is None:
            try:
                self.admin.restart_node(target.url)
            except (KraftliteError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                raise RollError(f"{target.name}: the restart was not taken ({exc})") from None
        else:
            argv = restart_command(command, target)
            try:
                finished = subprocess.run(argv, check=False)  # noqa: S603 - the operator's own
            except OSError as exc:
                raise RollError(f"{target.name}: {argv[0]}: {exc}") from None
            if finished.returncode != 0:
                raise RollError(f"{target.name}: {argv[0]} exited {finished.returncode}")

        def back() -> str | None:
            now = self.admin.node_status(target.url)
            if now is None:
                return "stopped"
            if now.get("boot_id") == before.get("boot_id"):
                return "stopping"
            return None if now.get("ready") else "starting"

        self.wait(f"{target.name}: coming back", back)
        back_s = self.clock.monotonic_ms() / 1000 - started
        whole_s = self.wait(f"{target.name}: back; waiting for full replication", self.whole)
        self.console.print(
            f"{target.name}: back in {back_s:.1f} s, cluster whole {whole_s:.1f} s later"
        )
        return {"node": target.name, "back_s": round(back_s, 2), "whole_s": round(whole_s, 2)}


@click.command("roll")
@click.option(
    "--only",
    type=click.Choice(["controllers", "brokers"]),
    help="Roll only the controllers or only the brokers (default: both, controllers first).",
)
@click.option(
    "--command",
    "command",
    help="Restart each node with this command instead of the API, e.g. "
    "'ssh {host} sudo systemctl restart kraftlite-{kind}' ({kind}, {id}, {name}, {url}, "
    "{host} are filled in).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=1),
    default=300,
    show_default=True,
    help="Seconds each wait may take (the cluster whole, a node back).",
)
@click.option("--dry-run", is_flag=True, help="Print the order; restart nothing.")
@bootstrap_option
@output_option
@api_errors
def cluster_roll(  # noqa: PLR0917 - click passes every option positionally
    only: str | None,
    command: str | None,
    timeout_s: float,
    dry_run: bool,
    bootstrap: Connection,
    output: str,
) -> None:
    """Restart every node in turn, each once the cluster is whole again (every partition
    fully replicated, every broker and controller up): a rolling restart, or an upgrade
    once the new version is installed on every host. Needs ALTER on the cluster."""
    kinds = {"controllers": ("controller",), "brokers": ("broker",)}.get(
        only or "", ("controller", "broker")
    )
    console = Console(stderr=True)
    with bootstrap.admin() as admin:
        try:
            targets = plan(admin.leader_quorum(), admin.cluster(), kinds)
            if command is not None:  # a bad template stops the roll at once
                for target in targets:
                    restart_command(command, target)
        except (ValueError, RollError) as exc:
            fail(str(exc), EXIT_API_ERROR)
        if dry_run:
            _show(targets, output)
            return
        roll = _Roll(admin, timeout_s, console)
        done: list[dict[str, Any]] = []
        started = roll.clock.monotonic_ms() / 1000
        controllers = [t for t in targets if t.kind == "controller"]
        brokers = [t for t in targets if t.kind == "broker"]
        try:
            while controllers:
                target = roll.next_controller(controllers)
                controllers.remove(target)
                done.append(roll.restart(target, command))
            while brokers:
                done.append(roll.restart(brokers.pop(0), command))
        except (RollError, KraftliteError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            restarted = ", ".join(d["node"] for d in done) or "none"
            fail(f"{exc}; the roll stopped (restarted: {restarted})", EXIT_API_ERROR)
        total = roll.clock.monotonic_ms() / 1000 - started
    if output == "json":
        print_json({"nodes": done, "seconds": round(total, 2)})
    else:
        click.echo(f"rolled {len(done)} nodes in {total:.1f} s")


def _show(targets: Sequence[Target], output: str) -> None:
    if output == "json":
        print_json([{"node": t.name, "url": t.url} for t in targets])
        return
    for number, target in enumerate(targets, 1):
        click.echo(f"{number}. {target.name} {target.url}")

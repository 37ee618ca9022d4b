"""The leadership lease: how long this broker may keep serving as a partition leader
without hearing from the controllers (pure; time is an argument).

Why: the controllers fence a broker they have not heard from for
`broker.session.timeout.ms` and give its partitions to other ISR members. A leader cut off
from them (or paused) learns this only through metadata it can no longer get, and would
keep answering reads from its old state next to the new leader: a consumer could read a
committed group offset, then an older one from the deposed coordinator. So every act of
leadership (produce, fetch, list offsets, follower fetch, group coordination) asks the
lease at the moment it is served, not from a timer, so requests queued while the process
was paused are refused too.

Rules:
1. An answered heartbeat (or registration) proves the active controller heard from us no
   earlier than we *sent* it, so it cannot fence us before `sent + timeout`, where the
   answer names `timeout`: the sooner of the session and `broker.unreachable.timeout.ms`,
   after which a broker the controller cannot reach is fenced (controller/liveness.py rule
   4). The lease runs to `sent + timeout - margin`; the margin covers clock-rate drift and
   the moment between the check and the answer leaving the socket.
2. The answer also carries the active controller's metadata version `v`. It proves nothing
   about leaderships we hold until our own metadata has reached `v`: had we been fenced and
   replaced before the answer, our image still names us leader. So an answer counts only
   once we have applied version `v`.
3. A controller that becomes active gives every broker a full session *plus* the time a
   deposed Raft leader may still believe it leads (pysyncobj's leader fallback timeout)
   before fencing anyone (controller/heartbeats.py): the deposed one may have answered a
   heartbeat after the new one took over.
4. A lapse changes no partition state: the broker keeps its logs, followers and pending
   ISR changes, and leads again the moment a counted answer renews the lease.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_WAITING = 32
MIN_MARGIN_MS = 500


def lease_margin_ms(timeout_ms: int) -> int:
    """How much earlier than the controllers could fence us we stop leading: a tenth, and
    half a second at least (an event loop held up between a request's lease check and its
    answer leaving the socket)."""
    return max(timeout_ms // 10, MIN_MARGIN_MS)


@dataclass
class LeadershipLease:
    timeout_ms: int = 9000  # the soonest the controllers may fence us, as last answered (rule 1)
    applied_version: int = -1
    valid_until_ms: int | None = None  # None: never granted
    # Answers whose controller version our metadata has not reached yet (rule 2), each
    # with its own timeout: (sent, version, timeout).
    _waiting: list[tuple[int, int, int]] = field(default_factory=list)

    def answered(self, sent_ms: int, controller_version: int, timeout_ms: int) -> None:
        """A heartbeat (or registration) sent at `sent_ms` was answered by the active
        controller, whose metadata was at `controller_version`, with the lease's `timeout_ms`.
        """
        self.timeout_ms = timeout_ms
        if controller_version <= self.applied_version:
            self._extend(sent_ms, timeout_ms)
        else:
            # Bounded while metadata stalls: the oldest answers extend the lease least.
            waiting = (sent_ms, controller_version, timeout_ms)
            self._waiting = [*self._waiting[-(MAX_WAITING - 1) :], waiting]

    def applied(self, version: int) -> None:
        """Our metadata reached `version`: answers waiting for it count now."""
        self.applied_version = max(self.applied_version, version)
        ready = [(s, t) for s, wanted, t in self._waiting if wanted <= self.applied_version]
        self._waiting = [w for w in self._waiting if w[1] > self.applied_version]
        for sent, timeout in ready:
            self._extend(sent, timeout)

    def waiting_for_version(self) -> int | None:
        """The metadata version the newest uncounted answer waits for, if any."""
        return max((wanted for _, wanted, _ in self._waiting), default=None)

    def waiting_since(self) -> int | None:
        """When the oldest answer still waiting for our metadata was sent, if any."""
        return min((sent for sent, _, _ in self._waiting), default=None)

    def revoke(self) -> None:
        """The controllers no longer know us by the registration our answers were for."""
        self.valid_until_ms = None
        self._waiting = []

    def valid(self, now_ms: int) -> bool:
        return self.valid_until_ms is not None and now_ms < self.valid_until_ms

    def _extend(self, sent_ms: int, timeout_ms: int) -> None:
        until = sent_ms + timeout_ms - lease_margin_ms(timeout_ms)
        if self.valid_until_ms is None or until > self.valid_until_ms:
            self.valid_until_ms = until

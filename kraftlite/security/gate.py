"""One front door per node: what every request passes, whichever edge it came in by.

Both edges (the HTTP API and the Kafka listener) translate their requests and hand them
here; `kraftlite/node/` builds one gate per node and gives the same one to both, so a principal
is one principal on both edges.

Rules:
1. Authenticate: the edges turn credentials into a `Caller` with the one Authenticator
   (authenticator.py): the same users, tokens, certificates and password checks.
2. Authorize with the one indexed authorizer (authenticator.py rule 3). A request refused
   for several resources is audited once, with the count and the first few names, not a
   line per name: a request naming 200,000 topics the caller may not see costs one audit
   line, not 253 MB of them.
3. Quotas: one set of trackers per node (quotas.py), charged by both edges: handling time
   for every request, bytes produced as their records decompress (a Kafka batch kept as
   sent is stored compressed, but its readers unpack it: the charge is not the wire's,
   unlike Kafka's), bytes fetched as answered. A principal that uses both edges has one
   quota, not two.
4. Caught up: a broker answers only once its metadata reaches its own registration, else
   BROKER_NOT_AVAILABLE (retriable): a broker that just restarted would call every topic
   unknown. Each edge asks `check_ready` before it serves a request.
5. A node acting for itself (Caller.is_cluster) is never throttled and may do everything.
6. A producer id (InitProducerId, `POST /v1/producer-ids`) only for a caller with
   IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka's rule since KIP-679): a
   caller that may write nowhere has no use for one, and ids cost the cluster state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

import structlog

from kraftlite.clock import Clock
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.security.acls import CLUSTER_NAME, Action, Operation, ResourceType
from kraftlite.security.authenticator import Authenticator
from kraftlite.security.principal import Caller
from kraftlite.security.quotas import FETCH, PRODUCE, REQUEST, QuotaTracker

audit = structlog.get_logger("kraftlite.audit")
AUDITED_NAMES: Final = 10  # resource names one refusal's audit line quotes, at most
_AUDITED_NAME_LENGTH: Final = 256


class Gate:
    """Rules 1-5 for one node. `ready` says why the node cannot serve yet (None: it can)."""

    def __init__(
        self,
        authenticator: Authenticator,
        clock: Clock,
        ready: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.authenticator = authenticator
        self.clock = clock
        self.quotas = QuotaTracker()
        self._ready = ready

    # -- rule 2 ------------------------------------------------------------------------------

    def allowed(self, who: Caller, action: Action) -> bool:
        return self.authenticator.allowed(who, action)

    def checker(self, who: Caller) -> Callable[[Action], bool]:
        """`allowed` for many actions of one caller."""
        return self.authenticator.checker(who)

    def audit_refused(
        self,
        who: Caller,
        refused: Sequence[Action],
        *,
        count: int | None = None,
        edge: str,
        **context: str,
    ) -> None:
        """One audit line for the actions a request was refused (rule 2): `refused` holds
        the first of them (at most AUDITED_NAMES are quoted), `count` says how many there
        were in all (default: as many as `refused` holds)."""
        if not refused:
            return
        first = refused[0]
        names = list(dict.fromkeys(a.resource_name[:_AUDITED_NAME_LENGTH] for a in refused))
        audit.warning(
            "authorization_denied",
            principal=who.principal,
            host=who.host,
            operation=first.operation.value,
            resource_type=first.resource_type.value,
            resource_name=first.resource_name[:_AUDITED_NAME_LENGTH],
            count=len(refused) if count is None else count,
            names=names[:AUDITED_NAMES],
            edge=edge,
            **context,
        )

    def check_init_producer(self, who: Caller, *, edge: str, request: str) -> None:
        """Rule 6, audited when refused: CLUSTER_AUTHORIZATION_FAILED."""
        wanted = Action(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
        if self.allowed(who, wanted) or self.authenticator.allows_some(
            who, Operation.WRITE, ResourceType.TOPIC
        ):
            return
        self.audit_refused(who, [wanted], edge=edge, request=request)
        raise KraftliteError(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{who.principal} may not have a producer id "
            "(IDEMPOTENT_WRITE on the cluster or WRITE on some topic)",
        )

    # -- rule 3 ------------------------------------------------------------------------------

    def quotas_of(self, who: Caller) -> Mapping[str, float] | None:
        """The caller's quotas; None for none (or a node acting for itself)."""
        if who.is_cluster or who.node is not None:
            return None  # a node passing a client's request on: counted where it came in
        return self.authenticator.image.quotas.get(who.principal) or None

    def throttle_ms(
        self,
        who: Caller,
        quotas: Mapping[str, float],
        *,
        handling_s: float,
        produced: int = 0,
        fetched: int = 0,
    ) -> int:
        """Charge a request's costs to the caller's buckets; how long to hold its answer."""
        now = self.clock.now_ms()
        principal = who.principal
        delays = [self.quotas.record(quotas, principal, REQUEST, handling_s, now)]
        if produced:
            delays.append(self.quotas.record(quotas, principal, PRODUCE, produced, now))
        if fetched:
            delays.append(self.quotas.record(quotas, principal, FETCH, fetched, now))
        return max(delays)

    # -- rule 4 ------------------------------------------------------------------------------

    def check_ready(self) -> None:
        why = self._ready()
        if why is not None:
            raise KraftliteError(ErrorCode.BROKER_NOT_AVAILABLE, why)

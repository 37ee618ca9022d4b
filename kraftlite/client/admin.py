"""Admin: topics, configs and the cluster, through any broker."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from kraftlite.client.credentials import Credentials
from kraftlite.client.transport import DESCRIBE_RETRY, Transport
from kraftlite.errors import ErrorCode, KraftliteError
from kraftlite.protocol import urls


class Admin:
    def __init__(
        self,
        bootstrap: str | list[str],
        *,
        transport: Transport | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self._transport = transport or Transport(bootstrap, credentials=credentials)

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._transport.close()

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name, "partitions": partitions}
        if replication_factor is not None:
            body["replication_factor"] = replication_factor
        if configs:
            body["configs"] = dict(configs)
        created: dict[str, Any] = await self._transport.call("POST", "/v1/topics", body)
        return created

    async def create_topics(self, topics: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Many topics in one request and one metadata change (Kafka's CreateTopics): each
        `{"name", "partitions"?, "replication_factor"?, "configs"?}`. Returns an entry per
        topic, in order: the topic as `describe_topic` gives it, or `{"name", "error_code",
        "message"}` for one that was not created (the others are).
        """
        answer = await self._transport.call("POST", "/v1/topics", {"topics": list(topics)})
        return list(answer["topics"])

    async def list_topics(self) -> list[dict[str, Any]]:
        answer = await self._transport.call("GET", "/v1/topics")
        return list(answer["topics"])

    async def describe_topic(self, name: str) -> dict[str, Any]:
        described: dict[str, Any] = await self._transport.call("GET", f"/v1/topics/{name}")
        return described

    async def delete_topic(self, name: str) -> None:
        await self._transport.call("DELETE", f"/v1/topics/{name}")
        self._transport.invalidate(name)

    async def delete_records(
        self, topic: str, partition: int, offset: int, *, timeout_ms: int = 30_000
    ) -> int:
        """Delete the records of `topic`'s `partition` below `offset` (-1: the high
        watermark), as Kafka's DeleteRecords. Returns the partition's low watermark once
        every replica that could lead has deleted them: no replica serves below it since."""
        answer = await self._transport.call(
            "POST",
            f"/v1/topics/{topic}/partitions/{int(partition)}/delete-records",
            {"offset": offset},
            timeout_s=timeout_ms / 1000 + 10,
            timeout_ms=str(int(timeout_ms)),
        )
        return int(answer["low_watermark"])

    async def latest_value(
        self, topic: str, key: bytes, *, partition: int | None = None
    ) -> dict[str, Any] | None:
        """A compacted topic read as a table: `key`'s latest committed record (`partition`,
        `offset`, `timestamp`, `key`, `value` and `headers`, bytes as bytes), or None when
        it has no value (never written, or deleted). From the partition Kafka's default
        partitioner sends the key to, unless `partition` is given. Retried while the
        leader's key index catches up (OFFSET_NOT_AVAILABLE) or a leader is elected."""
        params = {"key_encoding": "base64", "encoding": "base64"}
        if partition is not None:
            params["partition"] = str(int(partition))
        path = (
            f"/v1/topics/{topic}/keys/{base64.urlsafe_b64encode(key).decode()}"
            f"?{urllib.parse.urlencode(params)}"
        )
        async for attempt in DESCRIBE_RETRY.run_async(self._transport.clock):
            with attempt:
                try:
                    found = await self._transport.call("GET", path)
                except KraftliteError as exc:
                    if exc.code is ErrorCode.RESOURCE_NOT_FOUND:
                        return None
                    raise
                return _decoded(found)
        raise AssertionError("unreachable: the attempts end in a return or an error")

    async def table_page(
        self,
        topic: str,
        *,
        after: str | None = None,
        limit: int = 100,
        partition: int | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """A page of a compacted topic read as a table (of one `partition`, or of every
        partition merged in key order): each live key's latest committed record (as
        `latest_value` gives it), at most `limit`, after the cursor `after` (None: from the
        first key); and the cursor for the next page, None at the end. Retried as
        `latest_value` is."""
        params = {"limit": str(int(limit)), "encoding": "base64"}
        if after is not None:
            params["after"] = after
        rest = ("table",) if partition is None else ("partitions", str(int(partition)), "table")
        path = f"{urls.topic_path(topic, *rest)}?{urllib.parse.urlencode(params)}"
        async for attempt in DESCRIBE_RETRY.run_async(self._transport.clock):
            with attempt:
                page = await self._transport.call("GET", path)
                return [_decoded(row) for row in page["rows"]], page["next"]
        raise AssertionError("unreachable: the attempts end in a return or an error")

    async def table(
        self, topic: str, *, partition: int | None = None, page_size: int = 100
    ) -> AsyncIterator[dict[str, Any]]:
        """Every live key's latest record of a compacted topic, in key order (`table_page`
        after `table_page`)."""
        after: str | None = None
        while True:
            rows, after = await self.table_page(
                topic, after=after, limit=page_size, partition=partition
            )
            for row in rows:
                yield row
            if after is None:
                return

    async def create_partitions(self, name: str, count: int) -> dict[str, Any]:
        grown: dict[str, Any] = await self._transport.call(
            "POST", f"/v1/topics/{name}/partitions", {"count": count}
        )
        self._transport.invalidate(name)
        return grown

    async def alter_configs(self, name: str, configs: Mapping[str, Any]) -> dict[str, Any]:
        altered: dict[str, Any] = await self._transport.call(
            "PUT", f"/v1/topics/{name}/configs", {"configs": dict(configs)}
        )
        return altered

    async def list_groups(self) -> list[dict[str, Any]]:
        answer = await self._transport.call("GET", "/v1/groups")
        return list(answer["groups"])

    async def describe_group(self, group: str) -> dict[str, Any]:
        described: dict[str, Any] = await self._transport.call("GET", f"/v1/groups/{group}")
        return described

    async def group_offsets(self, group: str) -> list[dict[str, Any]]:
        """Committed offsets with each partition's high watermark and lag."""
        answer = await self._transport.call("GET", f"/v1/groups/{group}/offsets")
        return list(answer["offsets"])

    async def delete_group_offsets(
        self, group: str, partitions: Iterable[tuple[str, int]]
    ) -> list[dict[str, Any]]:
        """Delete the group's committed offsets of `partitions` ((topic, partition) pairs;
        Kafka's OffsetDelete). One entry per partition, in order: `{"topic", "partition"}`
        when deleted (or there was none), with `error_code` and `message` when not
        (GROUP_SUBSCRIBED_TO_TOPIC while the group's members consume the topic,
        UNKNOWN_TOPIC_OR_PARTITION). The group's own refusals (GROUP_ID_NOT_FOUND,
        GROUP_NOT_EMPTY) are raised."""
        body = {"partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        answer = await self._transport.call("DELETE", f"/v1/groups/{group}/offsets", body)
        return list(answer["partitions"])

    # -- users, ACLs, quotas, tokens (docs/security.md) ------------------------------------

    async def create_user(
        self, name: str, password: str, mechanism: str = "SCRAM-SHA-256"
    ) -> dict[str, Any]:
        """Create a user, or change its password."""
        user: dict[str, Any] = await self._transport.call(
            "POST", "/v1/users", {"name": name, "password": password, "mechanism": mechanism}
        )
        return user

    async def list_users(self) -> list[dict[str, Any]]:
        return list((await self._transport.call("GET", "/v1/users"))["users"])

    async def delete_user(self, name: str) -> None:
        await self._transport.call("DELETE", f"/v1/users/{name}")

    async def create_acl(self, **acl: str) -> dict[str, Any]:
        """principal, operation, resource_type, resource_name, and optionally host,
        permission (ALLOW), pattern_type (LITERAL)."""
        created: dict[str, Any] = await self._transport.call("POST", "/v1/acls", acl)
        return created

    async def list_acls(self, **filters: str) -> list[dict[str, Any]]:
        query = f"?{urllib.parse.urlencode(filters)}" if filters else ""
        return list((await self._transport.call("GET", f"/v1/acls{query}"))["acls"])

    async def delete_acls(self, **filters: str) -> list[dict[str, Any]]:
        """Every ACL matching all the filters given (at least one)."""
        return list((await self._transport.call("DELETE", "/v1/acls", filters))["deleted"])

    async def alter_quotas(self, principal: str, **quotas: float | None) -> dict[str, Any]:
        """producer_byte_rate, consumer_byte_rate, request_percentage; None removes one."""
        altered: dict[str, Any] = await self._transport.call(
            "POST", "/v1/quotas", {"principal": principal, **quotas}
        )
        return altered

    async def list_quotas(self) -> list[dict[str, Any]]:
        return list((await self._transport.call("GET", "/v1/quotas"))["quotas"])

    async def create_token(self) -> dict[str, Any]:
        """A bearer token for the authenticated user: {"token", "expires_at", "principal"}."""
        token: dict[str, Any] = await self._transport.call("POST", "/v1/tokens")
        return token

    async def cluster(self) -> dict[str, Any]:
        described: dict[str, Any] = await self._transport.call("GET", "/v1/cluster")
        return described

    async def cluster_stats(self, topics: Sequence[str] = ()) -> dict[str, Any]:
        """What only brokers know (GET /v1/cluster/stats): each broker's leaders, replicas,
        disk and rates, the cluster's under-replicated and offline partition counts, and
        the figures of `topics` (at most 100)."""
        path = "/v1/cluster/stats"
        if topics:
            path += "?topics=" + ",".join(urllib.parse.quote(t, safe="") for t in topics)
        described: dict[str, Any] = await self._transport.call("GET", path)
        return described

    async def quorum(self) -> dict[str, Any]:
        """The controller quorum: `{"leader_id", "term", "commit_index", "metadata_offset",
        "voters": [{"id", "address", "state", "url"}]}` (a controller's URL answers it)."""
        described: dict[str, Any] = await self._transport.call("GET", "/v1/quorum")
        return described

    async def add_voter(self, node_id: int, raft: str, url: str) -> dict[str, Any]:
        """Add a controller to the quorum (it runs with --join); the quorum after."""
        described: dict[str, Any] = await self._transport.call(
            "POST", "/v1/quorum/voters", {"id": node_id, "raft": raft, "url": url}
        )
        return described

    async def remove_voter(self, node_id: int) -> None:
        await self._transport.call("DELETE", f"/v1/quorum/voters/{node_id}")

    async def leader_quorum(self) -> dict[str, Any]:
        """`quorum` as the active controller sees it: with each voter's `lag` (committed
        entries it lacks)."""
        described: dict[str, Any] = await self._transport.call("GET", "/v1/quorum", leader="true")
        return described

    # -- one node (api/restart.py) -----------------------------------------------------------

    async def node_status(self, url: str) -> dict[str, Any] | None:
        """A node's `GET /readyz` (`ready`, `boot_id`, ...), ready or not; None while it
        does not answer."""
        try:
            answer = await self._transport.session.get(
                url.rstrip("/") + "/readyz", timeout=aiohttp.ClientTimeout(total=5)
            )
            async with answer:
                body = orjson.loads(await answer.read())
        except (aiohttp.ClientError, TimeoutError, OSError, orjson.JSONDecodeError):
            return None
        return body if isinstance(body, dict) else None

    async def restart_node(self, url: str) -> dict[str, Any]:
        """Ask the node at `url` to stop as on SIGTERM and start again in place, with the
        code installed now (POST /v1/node/restart; ALTER on the cluster): `{"boot_id"}`
        of the process that stops."""
        answer: dict[str, Any] = await self._transport.request(
            url.rstrip("/"), "POST", "/v1/node/restart"
        )
        return answer

    # -- the elastic cluster: brokers, moves, leaders (controller/elastic.py) --------------
    # A move is `{"topic", "partition", "from": [ids], "to": [ids]}`: a reassignment started
    # (KIP-455), which `list_reassignments` lists until it completes.

    async def list_brokers(self) -> list[dict[str, Any]]:
        """Every registered broker: `{"id", "url", "rack", "state", "replicas", "leaders",
        ...}`, state one of active, fenced, draining, drained."""
        return list((await self._transport.call("GET", "/v1/brokers"))["brokers"])

    async def describe_broker(self, broker_id: int) -> dict[str, Any]:
        described: dict[str, Any] = await self._transport.call("GET", f"/v1/brokers/{broker_id}")
        return described

    async def drain_broker(self, broker_id: int) -> list[dict[str, Any]]:
        """Move leaders, then every replica, off the broker; the moves started."""
        answer = await self._transport.call("POST", f"/v1/brokers/{broker_id}/drain")
        self._transport.invalidate()
        return list(answer["moves"])

    async def stop_draining(self, broker_id: int) -> None:
        """Undo a drain (DELETE /v1/brokers/{id}/drain)."""
        await self._transport.call("DELETE", f"/v1/brokers/{broker_id}/drain")
        self._transport.invalidate()

    async def broker_configs(self, broker_id: int) -> dict[str, str]:
        answer = await self._transport.call("GET", f"/v1/brokers/{broker_id}/configs")
        return dict(answer["configs"])

    async def alter_broker_configs(
        self, broker_id: int, configs: Mapping[str, Any]
    ) -> dict[str, str]:
        """Set (or with None reset) dynamic configs, e.g. replication.throttled.rate."""
        answer = await self._transport.call(
            "PUT", f"/v1/brokers/{broker_id}/configs", {"configs": dict(configs)}
        )
        return dict(answer["configs"])

    async def remove_broker(self, broker_id: int, force: bool = False) -> None:
        """Unregister a broker holding no replicas (BROKER_IN_USE otherwise); `force`
        replaces the replicas of a dead (fenced) one at once."""
        await self._transport.call(
            "DELETE", f"/v1/brokers/{broker_id}", force="true" if force else "false"
        )
        self._transport.invalidate()

    async def rebalance(self, dry_run: bool = False) -> list[dict[str, Any]]:
        """Even out replicas and preferred leaders over the live brokers: the moves started,
        or only planned with `dry_run`."""
        answer = await self._transport.call("POST", "/v1/cluster/rebalance", {"dry_run": dry_run})
        if not dry_run:
            self._transport.invalidate()
        return list(answer["moves"])

    async def alter_replication_factor(self, topic: str, factor: int) -> list[dict[str, Any]]:
        """Reassign the topic's partitions to `factor` replicas each; the moves started."""
        answer = await self._transport.call(
            "PATCH", f"/v1/topics/{topic}", {"replication_factor": factor}
        )
        self._transport.invalidate(topic)
        return list(answer["moves"])

    async def elect_preferred_leaders(
        self, partitions: Sequence[tuple[str, int]] | None = None, *, unclean: bool = False
    ) -> list[dict[str, Any]]:
        """Leadership back to each partition's first replica (every partition not led by it
        if `partitions` is None). An entry per partition: `{"topic", "partition", "leader"}`
        plus `error_code` and `message` for one that did not move. With `unclean`, instead
        a leader for each partition that has none, from any live replica, in sync or not
        (Kafka's unclean election: what only the lost in-sync replicas held is lost)."""
        body: dict[str, Any] = {"type": "unclean" if unclean else "preferred"}
        if partitions is not None:
            body["partitions"] = [{"topic": t, "partition": p} for t, p in partitions]
        answer = await self._transport.call("POST", "/v1/elections", body)
        self._transport.invalidate()
        return list(answer["elections"])

    async def alter_reassignments(
        self, partitions: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """Start, replace or cancel moves: each `{"topic", "partition", "replicas": [ids] |
        None}` (None cancels). An entry per partition, in order: the move as
        `list_reassignments` gives it, or `{"topic", "partition", "error_code", "message"}`.
        """
        answer = await self._transport.call(
            "POST", "/v1/reassignments", {"partitions": [dict(p) for p in partitions]}
        )
        self._transport.invalidate()
        return list(answer["reassignments"])

    async def cancel_reassignments(
        self, partitions: Sequence[tuple[str, int]]
    ) -> list[dict[str, Any]]:
        """Cancel the moves of `(topic, partition)`s: back to their original replicas."""
        return await self.alter_reassignments(
            [{"topic": t, "partition": p, "replicas": None} for t, p in partitions]
        )

    async def list_reassignments(self) -> list[dict[str, Any]]:
        """Every partition moving: `{"topic", "partition", "replicas", "adding", "removing",
        "isr", "leader"}`; empty when nothing moves."""
        return list((await self._transport.call("GET", "/v1/reassignments"))["reassignments"])


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    """A table's record as the API sends it with encoding=base64, its bytes as bytes."""
    return {
        **row,
        "key": base64.b64decode(row["key"]),
        "value": base64.b64decode(row["value"]),
        "headers": {
            name: None if v is None else base64.b64decode(v) for name, v in row["headers"].items()
        },
    }

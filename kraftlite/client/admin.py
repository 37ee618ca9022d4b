"""Admin: topics, configs and the cluster, through any broker."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from kraftlite.client.credentials import Credentials
from kraftlite.client.transport import Transport


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

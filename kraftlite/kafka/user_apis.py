"""Kafka's user and quota admin APIs: DescribeUserScramCredentials,
AlterUserScramCredentials, DescribeClientQuotas and AlterClientQuotas, on the controllers'
users and quotas (the HTTP API's /v1/users and /v1/quotas).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kraftlite.protocol.kafka.messages import ApiKey

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler

APIS: Final[dict[ApiKey, ModuleHandler]] = {}

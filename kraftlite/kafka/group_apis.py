"""Kafka's group and producer admin APIs: OffsetDelete, ConsumerGroupDescribe (KIP-848)
and DescribeProducers, on the group coordinator and the partitions' producer state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kraftlite.protocol.kafka.messages import ApiKey

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler

APIS: Final[dict[ApiKey, ModuleHandler]] = {}

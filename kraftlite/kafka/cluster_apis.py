"""Kafka's cluster admin APIs: the legacy AlterConfigs, DescribeLogDirs, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments and DescribeQuorum, mapped onto the
controllers' HTTP-side machinery (configs, elections, reassignments, the quorum) so both
edges share one implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kraftlite.protocol.kafka.messages import ApiKey

if TYPE_CHECKING:
    from kraftlite.kafka.handlers import ModuleHandler

APIS: Final[dict[ApiKey, ModuleHandler]] = {}

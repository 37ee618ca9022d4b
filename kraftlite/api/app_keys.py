"""The broker app's shared objects, typed (aiohttp AppKeys): the broker, and the
protocol-neutral service every handler calls (service.py).

Their types are named for the type checker only: the controller's app imports this module
too (through the middlewares), and must not load the broker's planes to do so."""

from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from kraftlite.broker.broker import Broker
    from kraftlite.service import BrokerService

BROKER: web.AppKey["Broker"] = web.AppKey("broker")
SERVICE: web.AppKey["BrokerService"] = web.AppKey("service")
# What a produce's records came to when its body is not them as they are (a compressed
# Kafka batch: decompressed), set by its handler; the quota charges it (throttle.py)
PRODUCED_BYTES = web.RequestKey("kraftlite.produced_bytes", int)

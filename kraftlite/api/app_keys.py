"""The broker app's shared objects, typed (aiohttp AppKeys): the broker, and the
protocol-neutral service every handler calls (service.py)."""

from aiohttp import web

from kraftlite.broker.broker import Broker
from kraftlite.service import BrokerService

BROKER = web.AppKey("broker", Broker)
SERVICE = web.AppKey("service", BrokerService)
# What a produce's records came to when its body is not them as they are (a compressed
# Kafka batch: decompressed), set by its handler; the quota charges it (throttle.py)
PRODUCED_BYTES = web.RequestKey("kraftlite.produced_bytes", int)

"""The broker app's shared objects, typed (aiohttp AppKeys): the broker, and the
protocol-neutral service every handler calls (service.py)."""

from aiohttp import web

from kraftlite.broker.broker import Broker
from kraftlite.service import BrokerService

BROKER = web.AppKey("broker", Broker)
SERVICE = web.AppKey("service", BrokerService)

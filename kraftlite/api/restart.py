"""`POST /v1/node/restart` on every node, broker or controller: the node stops as on
SIGTERM (a broker's controlled shutdown moves its leaderships, and with them its groups'
coordinators, to other in-sync replicas first) and starts again in the same process, on
the same command line, with the code installed now (`kraftlite cluster roll` restarts and
upgrades a cluster so, node by node). ALTER on the cluster, as Kafka's admin operations
that move leaders ask; the request is answered before the node stops.

`BOOT_ID` names this start of the process: `GET /readyz` shows it, so a caller knows the
node it sees ready is a new one.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Final

from aiohttp import web

from kraftlite.api.auth import audit_change
from kraftlite.api.errors import json_response

BOOT_ID: Final = uuid.uuid4().hex
RESTART = web.AppKey("restart", asyncio.Event)


async def restart_node(request: web.Request) -> web.Response:
    restart = request.app[RESTART]
    audit_change(request, "node_restart_asked", boot_id=BOOT_ID)
    restart.set()
    return json_response({"restarting": True, "boot_id": BOOT_ID}, status=202)

"""The web console (docs/console.md): static files served by every broker and controller at
`/ui/`, no separate server and no build step. The pages are plain ES modules that call the
node's own HTTP API (the same authorization as any client); these routes serve only files
and the node's kind, never data, so they are public (api/permissions.py).

Rules:
1. Every file under `static/` is read once, when the app is built, and served from memory
   with its ETag (a browser revalidates and usually gets 304): no path from a request ever
   reaches the file system.
2. Every `/ui` answer carries a strict Content-Security-Policy (scripts, styles and
   connections from this origin only, no inline script or style, no framing), nosniff and
   no referrer. Record keys and values are attacker-controlled: the pages write them with
   `textContent`, never as HTML, and the policy is the second line of defence.
3. A console call (`X-Kraftlite-Console: 1`) answered 401 names only the Bearer scheme, so
   the browser shows the console's own login form rather than its Basic-auth prompt; any
   other client still gets both schemes (RFC 9110).
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal

import orjson
from aiohttp import web

from kraftlite.errors import ErrorCode, KraftliteError

Role = Literal["broker", "controller"]
CONSOLE_HEADER: Final = "X-Kraftlite-Console"
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'; require-trusted-types-for 'script'"
)
SECURITY_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}
_FILE_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")
_TYPES: Final = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
    ".txt": "text/plain",
}


@dataclass(frozen=True, slots=True)
class StaticFile:
    body: bytes
    content_type: str
    etag: str


def load_static() -> dict[str, StaticFile]:
    """Rule 1: every file shipped in the package's `static/` folder, by name."""
    files = {}
    for entry in resources.files(__package__).joinpath("static").iterdir():
        if not entry.is_file() or _FILE_NAME.fullmatch(entry.name) is None:
            continue
        body = entry.read_bytes()
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        kind = (
            _TYPES.get(suffix) or mimetypes.guess_type(entry.name)[0] or "application/octet-stream"
        )
        files[entry.name] = StaticFile(
            body, kind, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        )
    return files


STATIC: Final = web.AppKey("console_static", dict[str, StaticFile])
ROLE: Final = web.AppKey("console_role", str)


def _serve(request: web.Request, name: str) -> web.Response:
    found = request.app[STATIC].get(name)
    if found is None:
        raise KraftliteError(ErrorCode.RESOURCE_NOT_FOUND, f"the console has no file {name!r}")
    headers = {"ETag": found.etag, "Cache-Control": "no-cache"}
    if found.etag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers=headers)
    charset = "utf-8" if found.content_type.startswith(("text/", "image/svg")) else None
    return web.Response(
        body=found.body, content_type=found.content_type, charset=charset, headers=headers
    )


async def redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


async def index(request: web.Request) -> web.Response:
    return _serve(request, "index.html")


async def static_file(request: web.Request) -> web.Response:
    return _serve(request, request.match_info["name"])


async def node(request: web.Request) -> web.Response:
    """What kind of node serves the console: no more than `/readyz` already tells."""
    return web.Response(
        body=orjson.dumps({"role": request.app[ROLE]}), content_type="application/json"
    )


async def _on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    if request.path == "/ui" or request.path.startswith("/ui/"):  # rule 2
        response.headers.update(SECURITY_HEADERS)
        return
    # the API's answers are data, never a page or a script another site may embed
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Cross-Origin-Resource-Policy", "same-origin")
    if response.status == 401 and request.headers.get(CONSOLE_HEADER):  # rule 3
        response.headers["WWW-Authenticate"] = 'Bearer realm="kraftlite"'


def add_console(app: web.Application, role: Role) -> None:
    """Serve the console on `app`: `/ui` (to `/ui/`), `/ui/`, `/ui/node.json` and
    `/ui/static/{name}`."""
    app[STATIC] = load_static()
    app[ROLE] = role
    app.on_response_prepare.append(_on_prepare)
    app.router.add_get("/ui", redirect)
    app.router.add_get("/ui/", index)
    app.router.add_get("/ui/node.json", node)
    app.router.add_get("/ui/static/{name}", static_file)


__all__ = ["CONSOLE_HEADER", "CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "add_console"]

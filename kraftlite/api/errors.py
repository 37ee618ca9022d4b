"""Errors as application/problem+json with the contract's error codes; never a traceback."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import structlog
from aiohttp import web

from kraftlite.errors import ERROR_INFO, ErrorCode, KraftliteError
from kraftlite.metadata.topics import parse_long
from kraftlite.observability import ERROR_CODE

log = structlog.get_logger(__name__)
PROBLEM_JSON = "application/problem+json"


def problem_body(error: KraftliteError, status: int | None = None) -> bytes:
    """The problem+json document of `error` (error_from_problem reads it back)."""
    body: dict[str, Any] = {
        "error_code": error.code.name,
        "message": error.message,
        "status": status or error.http_status,
        "retriable": error.retriable,
        **error.details,
    }
    return orjson.dumps(body)


def problem(error: KraftliteError, status: int | None = None) -> web.Response:
    status = status or error.http_status
    response = web.Response(
        status=status, body=problem_body(error, status), content_type=PROBLEM_JSON
    )
    response[ERROR_CODE] = error.code.name  # for the error counts (observability.py)
    if error.code is ErrorCode.SASL_AUTHENTICATION_FAILED:  # RFC 9110: a 401 names schemes
        response.headers["WWW-Authenticate"] = 'Basic realm="kraftlite", Bearer realm="kraftlite"'
    return response


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


@web.middleware
async def problem_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except KraftliteError as exc:
        return problem(exc)
    except web.HTTPException as exc:
        code = {
            404: ErrorCode.INVALID_REQUEST,
            405: ErrorCode.INVALID_REQUEST,
            413: ErrorCode.RECORD_LIST_TOO_LARGE,
            415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        }.get(exc.status, ErrorCode.INVALID_REQUEST)
        if exc.status < 400:
            raise
        answer = problem(KraftliteError(code, exc.reason or ERROR_INFO[code].message), exc.status)
        if "Allow" in exc.headers:  # RFC 9110: a 405 says which methods the resource has
            answer.headers["Allow"] = exc.headers["Allow"]
        return answer
    except Exception:
        log.exception("request_failed", path=request.path, method=request.method)
        return problem(KraftliteError(ErrorCode.UNKNOWN_SERVER_ERROR))


async def read_json_object(request: web.Request) -> dict[str, Any]:
    """The request body as a JSON object, or INVALID_REQUEST."""
    raw = await request.read()
    try:
        body = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError as exc:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, "body must be a JSON object")
    normalized: dict[str, Any] = _integral(body)
    return normalized


def _integral(value: Any) -> Any:
    """JSON Schema's integers include 1.0: a number with no fraction is taken as the integer
    it is, as the OpenAPI document promises (admin and group bodies; bounded by 1 MiB)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def int_field(body: dict[str, Any], name: str, default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{name} must be an integer")
    return value


def int_param(text: str | None, name: str, default: int) -> int:
    """A query-string or path integer, or INVALID_REQUEST."""
    if text is None:
        return default
    number = parse_long(text)
    if number is None:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{name} must be a 64-bit integer")
    return number


def str_field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise KraftliteError(ErrorCode.INVALID_REQUEST, f"{name} must be a non-empty string")
    return value

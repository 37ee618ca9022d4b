"""structlog set-up: JSON lines off a terminal, readable lines on one, every line bound to the
process's node id and role. Standard-library loggers (pysyncobj, aiohttp) go the same way.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import orjson
import structlog


def _json(event: Any, **_: Any) -> str:
    return orjson.dumps(event, default=str).decode()


def configure_logging(
    *,
    role: str,
    node_id: int | None,
    log_format: str = "auto",
    level: str = "info",
    stream: TextIO | None = None,
) -> None:
    """Route structlog and stdlib logging to `stream` (stderr) as JSON or console lines."""
    stream = stream or sys.stderr
    use_json = log_format == "json" or (log_format == "auto" and not stream.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any
    if use_json:
        renderer = structlog.processors.JSONRenderer(serializer=_json)
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    numeric_level = logging.getLevelNamesMapping()[level.upper()]
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric_level)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(role=role, node_id=node_id)

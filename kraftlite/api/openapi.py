"""OpenAPI document of the v1 API (being written)."""

from typing import Any

OPENAPI: dict[str, Any] = {"openapi": "3.1.0", "info": {"title": "kraftlite", "version": "1"}}

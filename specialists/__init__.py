"""The specialists: web and tool handlers, composed with the daemon's op table."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from csp_web.config import Config
from csp_web.registry import Op

from .web.services import open_web_services


@asynccontextmanager
async def open_specialists(config: Config) -> AsyncIterator[tuple[list[Op], dict[str, Any]]]:
    """Every specialist op, and the shared services they use (closed on exit)."""
    from .web import web_ops

    async with open_web_services(config) as web:
        yield [*web_ops()], {"web": web}

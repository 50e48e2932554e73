"""The optional parts of csp-web, installed as extras (pyproject.toml): which module each
needs, and the one refusal an op gives when its extra is missing.

    not_available:browser (install csp-web[browser])

Each extra's library is imported lazily, where it is used, so the daemon starts without it;
``require(extra)`` at that place turns the missing library into the refusal above instead of
an ImportError (an internal_error reply) or a failed start.
"""

from __future__ import annotations

import importlib.util
from functools import cache

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

# extra -> the top-level module its presence is judged by (the extra's main library).
MODULES: dict[str, str] = {
    "browser": "playwright",
    "redis": "redis",
    "mcp": "mcp",
    "otel": "opentelemetry",  # a namespace package: csp_web.app.tracing checks for the SDK
}


def install_hint(extra: str) -> str:
    """``<extra> (install csp-web[<extra>])``: the detail of the refusal, also the start-up
    message of a command that needs the extra."""
    return f"{extra} (install csp-web[{extra}])"


@cache
def installed(extra: str) -> bool:
    """Whether ``extra``'s library can be imported (found, not imported; cached: a library
    installed while the daemon runs is seen after a restart)."""
    try:
        return importlib.util.find_spec(MODULES[extra]) is not None
    except (ImportError, ValueError):
        return False


def missing(extra: str, *, scope: tuple[str, ...] = ()) -> OpError:
    """The refusal of an op whose ``extra`` is not installed."""
    return OpError(ErrorCode.NOT_AVAILABLE, install_hint(extra), scope=scope)


def require(extra: str, *, scope: tuple[str, ...] = ()) -> None:
    """Raise ``missing(extra)`` unless ``extra`` is installed."""
    if not installed(extra):
        raise missing(extra, scope=scope)

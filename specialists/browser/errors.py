"""Playwright's and the engine's failures as catalogue codes: the one translation seam."""

from __future__ import annotations

import re

from csp_web.core.errors import OpError
from protocol import ErrorCode

from .engine import BrowserUnavailable
from .pages import ActionError, host_port
from .proxy import GuardProxy

_NET_ERROR = re.compile(r"net::(ERR_[A-Z_]+)")
# Chromium's answers to a proxy that refused a tunnel or a request: the guard said no.
_PROXY_REFUSALS = ("ERR_TUNNEL_CONNECTION_FAILED", "ERR_HTTP_RESPONSE_CODE_FAILURE")
_CLOSED = ("has been closed", "Target closed", "Browser closed", "crashed")


def translate(
    exc: Exception, *, scope: str, proxy: GuardProxy, since: int, url: str | None
) -> OpError:
    """``exc`` as an OpError: the guard's own refusal when the proxy refused ``url``'s host.
    Anything that is neither ours nor Playwright's is a bug: re-raised (internal_error)."""
    from playwright.async_api import Error as PlaywrightError

    if isinstance(exc, OpError):
        return exc
    if isinstance(exc, ActionError):
        return OpError(exc.code, exc.detail, scope=(scope,))
    if isinstance(exc, BrowserUnavailable):
        return OpError(ErrorCode.BROWSER_UNAVAILABLE, exc.reason, scope=(scope,))
    if not isinstance(exc, PlaywrightError):
        raise exc
    message = str(exc)
    if any(text in message for text in _CLOSED):
        return OpError(ErrorCode.BROWSER_UNAVAILABLE, "closed mid-action", scope=(scope,))
    net = _NET_ERROR.search(message)
    if url is not None and net is not None:
        refusal = proxy.refusal_since(since, *host_port(url))
        if refusal is not None and net.group(1) in _PROXY_REFUSALS:
            return OpError(refusal.code, refusal.detail, scope=(scope,))
    if net is not None:
        return OpError(ErrorCode.NAVIGATION_FAILED, net.group(1).lower(), scope=(scope,))
    if type(exc).__name__ == "TimeoutError":
        return OpError(ErrorCode.NAVIGATION_FAILED, "timeout", scope=(scope,))
    first = message.splitlines()[0][:200] if message else type(exc).__name__
    return OpError(ErrorCode.ACTION_FAILED, first, scope=(scope,))

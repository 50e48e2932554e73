"""Playwright's and the engine's failures as catalogue codes: the one translation seam.

A navigation that fails because the guard proxy refused one of its requests is answered with
the guard's own code. Which refusal: one kept on the lane of the context that ran the action
(never another context's), made since the action began. The proxy keeps a refusal before it
writes a byte of its answer, so when Chromium reports the failure the record is already on
the lane: there is nothing to wait for, and nothing later can change the answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from csp_web.core.api.deadlines import budget_ms
from csp_web.core.api.errors import OpError
from csp_web.net.guard_proxy import Lane
from protocol import ErrorCode

from .engine import BrowserUnavailable
from .pages import ActionError, host_port

_NET_ERROR = re.compile(r"net::(ERR_[A-Z_]+)")
_PLAYWRIGHT_TIMEOUT = re.compile(r"Timeout ([0-9]+)ms exceeded")
# Chromium's answers to a proxy that refused a tunnel or a request: the guard said no.
_PROXY_REFUSALS = ("ERR_TUNNEL_CONNECTION_FAILED", "ERR_HTTP_RESPONSE_CODE_FAILURE")
_CRASHED = ("Page crashed", "Target crashed", "page crashed")
_CLOSED = ("has been closed", "Target closed", "Browser closed", "crashed")


def translate(
    exc: Exception,
    *,
    scope: str,
    lane: Lane | None = None,
    since: int = 0,
    url: str | None = None,
) -> OpError:
    """``exc`` as an OpError: the guard's own refusal when ``lane`` (the acting context's)
    holds one made since ``since`` (preferring one of ``url``'s host). Anything that is
    neither ours nor Playwright's is a bug: re-raised (internal_error)."""
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
    if any(text in message for text in _CRASHED):
        return OpError(ErrorCode.PAGE_CRASHED, "renderer crashed", scope=(scope,))
    if any(text in message for text in _CLOSED):
        return OpError(ErrorCode.BROWSER_UNAVAILABLE, "closed mid-action", scope=(scope,))
    net = _NET_ERROR.search(message)
    if lane is not None and net is not None and net.group(1) in _PROXY_REFUSALS:
        host, port = host_port(url) if url is not None else ("", 0)
        refusal = lane.refusal_since(since, host, port)
        if refusal is not None:
            return OpError(refusal.code, refusal.detail, scope=(scope,))
    if net is not None:
        return OpError(ErrorCode.NAVIGATION_FAILED, net.group(1).lower(), scope=(scope,))
    if type(exc).__name__ == "TimeoutError":
        # A page load's timeout was named where it was raised (pages.loading): this one is
        # an action's (click, screenshot, a read), whose Playwright timeout is what the
        # task's deadline leaves it, so the reply is the deadline's (SPEC C-4).
        return OpError(ErrorCode.TIMEOUT_EXCEEDED, _budget(message), scope=(scope,))
    first = message.splitlines()[0][:200] if message else type(exc).__name__
    return OpError(ErrorCode.ACTION_FAILED, first, scope=(scope,))


def _budget(message: str) -> str:
    """timeout_exceeded's detail: the task's budget as its caller set it (as the dispatcher
    answers), else (outside a task) the time Playwright was given."""
    budget = budget_ms()
    if budget is not None:
        return f"{budget}ms"
    given = _PLAYWRIGHT_TIMEOUT.search(message)
    return f"{given.group(1)}ms" if given else "timeout"


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` ended an action by time: a Playwright timeout (however translated
    since) or the task's cancellation. The page it ran on may still be spinning."""
    from playwright.async_api import TimeoutError as PlaywrightTimeout

    if isinstance(exc, trio.Cancelled):
        return True
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, PlaywrightTimeout):
            return True
        seen = seen.__cause__
    return False


@contextmanager
def refusals_on(lane: Lane, *, scope: str, url: str | None) -> Iterator[None]:
    """Around one action on a context: what it raises leaves translated, a guard refusal read
    from the context's own ``lane`` (made since the block began), never another's."""
    since = lane.mark()
    try:
        yield
    except Exception as exc:
        error = translate(exc, scope=scope, lane=lane, since=since, url=url)
        if error is exc:
            raise
        raise error from exc

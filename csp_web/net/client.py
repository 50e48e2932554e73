"""The guarded client: the one way a web op reaches the network.

    async with open_guarded_client(config) as client:
        result = await client.fetch("https://example.com/", respect_robots=True)

Each ``fetch`` is one operation under one deadline: the URL gate, robots.txt when asked, then
each request and redirect hop, every hop gated, resolved and checked again, its body read
under the byte caps. Any failure is an OpError with a catalogue code.
"""

from __future__ import annotations

import http.cookiejar
import ssl
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

import httpx
import trio

from csp_web.config.guard import GuardConfig
from csp_web.core.api import budget
from csp_web.core.api.errors import OpError
from csp_web.net.backend import GuardedTransport, PinnedBackend
from csp_web.net.body import (
    ACCEPT_ENCODING,
    LargerBody,
    check_header_bytes,
    read_capped,
    sends_body,
)
from csp_web.net.forward_proxy import Proxy
from csp_web.net.redirects import (
    Hop,
    body_headers_dropped,
    carries_credentials,
    credential_names,
    hold_location,
    is_redirect,
    next_hop,
    restore_location,
    without,
)
from csp_web.net.resolver import Resolver, SystemResolver
from csp_web.net.result import FetchResult, parse_content_type
from csp_web.net.robots import RobotsCache
from csp_web.net.settings import GuardSettings
from csp_web.net.sniff import sniffed_type
from csp_web.net.translate import translate
from csp_web.net.urlgate import ParsedUrl, check_url
from protocol import ErrorCode, NumberError, parse_uint

T = TypeVar("T")
# Wraps the guarded transport: the one seam that sees every request a web op makes (the
# recorder and the replay of csp_web.cli.cassette). It sits under the URL gate and over the
# pinned backend, so what it passes on is still resolved, checked and capped.
TransportWrapper = Callable[[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport]
# The client decides these; a caller's value would break Host pinning or our own decoding.
_OWNED_HEADERS = ("host", "accept-encoding", "content-length", "transfer-encoding", "connection")


# W3C Trace Context's headers: what a caller attached for one origin stays with it.
TRACE_HEADERS = ("traceparent", "tracestate")


@dataclass(frozen=True)
class _Plan:
    """One operation's options, already bounded by the config."""

    headers: httpx.Headers
    respect_robots: bool
    max_redirects: int
    max_body_bytes: int
    max_decoded_bytes: int
    credentials: frozenset[str]
    follow_with_credentials: bool
    larger_body: LargerBody | None = None


# A body of unknown length (chunked, or encoded) reserves this much of a task's ``bytes`` first
# and twice what it holds each time it passes it: bodies read at once share what is left by
# what they really receive, and a budget on Redis costs a round trip per doubling, not a chunk.
_FIRST_BYTES = 64 * 1024


@dataclass
class _Bill:
    """A body's ``bytes``: what it has reserved so far, and what it took."""

    reserved: int
    limited: bool  # the task's budget limits bytes (else nothing is reserved as it goes)
    used: int = 0  # received so far: what it is charged, kept or cut
    whole: bool = False  # reserved all its stated length (paid): it may not pass it

    async def cover(self, total: int) -> None:
        """Reserve more as the body passes what it holds; a budget that cannot cover
        ``total`` runs out (``budget_exhausted:bytes``, the task's other work cancelled
        but what is paid for) and the body, cut there, takes all it reserved. A body paid
        for its stated length that passes it lied: it is cut (``protocol_error``), charged
        what it received, and reserves nothing more."""
        if self.whole and total > self.reserved:
            self.used = total
            raise OpError(ErrorCode.FETCH_FAILED, "protocol_error")
        while total > self.reserved:
            want = max(total - self.reserved, self.reserved, _FIRST_BYTES)
            got = await budget.reserve("bytes", want, fallback=True)
            self.reserved += got
            if got < want and total > self.reserved:
                self.used = self.reserved
                raise budget.exhausted("bytes")
        self.used = total


@asynccontextmanager
async def _reserved_bytes(response: httpx.Response, plan: _Plan) -> AsyncIterator[_Bill]:
    """The task's ``bytes`` for ``response``'s body, reserved on entry; what it did not
    take given back on exit, cancelled too (SPEC D-3). A body of known length reserves all
    of it, and is then paid for, or is cut before a byte is read (``reserve_whole``); one
    of unknown length (encoded, chunked) reserves ``_FIRST_BYTES`` (what is left when less;
    BudgetExhausted when none is) and more as it arrives (``_Bill.cover``), so bodies read
    at once share what is left by what they really receive."""
    most = max(plan.max_decoded_bytes, plan.larger_body.max_bytes if plan.larger_body else 0)
    if budget.left("bytes") is None:
        bill = _Bill(most, limited=False)
    elif (length := _stated_length(response, plan)) is not None:
        bill = _Bill(await budget.reserve_whole("bytes", length), limited=True, whole=True)
    else:
        bill = _Bill(await budget.reserve("bytes", min(most, _FIRST_BYTES)), limited=True)
    try:
        yield bill
    finally:
        with trio.CancelScope(shield=True):
            await budget.settle("bytes", bill.reserved, bill.used)


def _stated_length(response: httpx.Response, plan: _Plan) -> int | None:
    """The bytes ``response``'s body will bring, when its headers say so and the caps
    surely let that many through; None: not known, or past the caps (refused before a byte
    is read, or by the larger cap once its head is judged: a hostile length must not run
    the task's budget out), reserved as it arrives."""
    if not sends_body(response):
        return 0
    if "content-encoding" in response.headers:
        return None  # its Content-Length is of the encoded bytes
    if "transfer-encoding" in response.headers:
        return None  # it frames the body and wins over a Content-Length (h11, RFC 9112 6.3)
    try:  # h11 refuses a body longer than it said, so a stated length holds
        length = parse_uint(response.headers.get("content-length", ""))
    except NumberError:
        return None
    return length if length <= min(plan.max_body_bytes, plan.max_decoded_bytes) else None


async def _read_budgeted(response: httpx.Response, plan: _Plan, url: str, bill: _Bill) -> bytes:
    """``read_capped`` of ``response`` under the config's caps, its bytes covered by
    ``bill`` as they arrive."""
    body = await read_capped(
        response,
        max_body_bytes=plan.max_body_bytes,
        max_decoded_bytes=plan.max_decoded_bytes,
        larger=plan.larger_body,
        url=url,
        gauge=bill.cover if bill.limited else None,
    )
    bill.used = len(body)
    return body


class _RefuseCookies(http.cookiejar.DefaultCookiePolicy):
    """Ops share one client, so a cookie one site sets must never ride along on another op."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False


class _NoCookies(httpx.Cookies):
    """A cookie store that never reads a response's cookies: its jar refuses every one
    (``_RefuseCookies``), so httpx's extraction only built a urllib Request per response for
    nothing. Skipping it took the guarded GET's CPU from 1.14-1.19x a bare httpx GET's to
    1.09-1.13x, alternated with main (``python bench/guarded_get.py``, load 3.5-4.4; issue 26)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        """Keep nothing."""


class _CookielessClient(httpx.AsyncClient):
    """httpx's client with a store that keeps no cookie (``_NoCookies``)."""

    _NONE = _NoCookies(http.cookiejar.CookieJar(policy=_RefuseCookies()))

    @property
    def cookies(self) -> httpx.Cookies:
        return self._NONE

    @cookies.setter
    def cookies(self, cookies: object) -> None:
        raise AttributeError("the guarded client keeps no cookies")


class GuardedClient:
    """Fetches URLs through the gate, the pinned resolver and the caps of one GuardConfig.

    Made by ``open_guarded_client``, which owns and closes the underlying httpx client.
    Safe to share between concurrent tasks. ``prepare_reload`` changes the settings for the
    operations that start after it (the robots cache keeps its user agent, TTL and size).
    """

    def __init__(
        self, http: httpx.AsyncClient, settings: GuardSettings, transport: GuardedTransport
    ) -> None:
        self._http = http
        self._settings = settings  # shared with the connection backend: one current reference
        self._transport = transport
        self._stale_connections = False
        self._robots = RobotsCache(settings.current, self._fetch_robots)

    @property
    def _config(self) -> GuardConfig:
        return self._settings.in_effect()

    @property
    def config(self) -> GuardConfig:
        """The settings the next operation starts with."""
        return self._settings.current

    def prepare_reload(self, config: GuardConfig) -> Callable[[], None]:
        """The reload hook for ``web.guard``: the returned commit makes ``config`` current.
        Pooled connections then idle are closed before the next operation, so none checked
        under the old allow-lists carries a request made under the new ones."""

        def commit() -> None:
            if config != self._settings.current:
                self._settings.current = config
                self._stale_connections = True

        return commit

    async def _start_operation(self) -> None:
        if self._stale_connections:
            self._stale_connections = False
            await self._transport.close_idle()

    async def fetch(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        respect_robots: bool = False,
        max_redirects: int | None = None,
        max_body_bytes: int | None = None,
        max_decoded_bytes: int | None = None,
        credentials_headers: Iterable[str] = frozenset(),
        follow_with_credentials: bool = True,
        deadline_s: float | None = None,
        larger_body: LargerBody | None = None,
    ) -> FetchResult:
        """Request ``url`` and follow its redirects; return the final response, body read.

        ``max_redirects`` and the byte caps may lower the config's values, never raise them;
        ``max_redirects=0`` refuses every redirect, for callers that attach credentials.
        ``larger_body`` raises the body caps for the final responses it applies to (fetch's
        documents: ``body.LargerBody``), the one way past the config's caps.
        Authorization, Proxy-Authorization, Cookie and ``credentials_headers`` are stripped
        before a cross-origin hop, or the hop is refused (FETCH_FAILED "credentials_redirect")
        when ``follow_with_credentials`` is False. ``deadline_s`` (default ``timeout_s``)
        bounds the whole operation, robots.txt included.

        Raises OpError: URL_REJECTED, SSRF_BLOCKED, DNS_FAILED, ROBOTS_DISALLOWED,
        TOO_MANY_REDIRECTS, TOO_LARGE ("max_header_bytes" for any hop's header block, else a
        body cap), FETCH_FAILED ("timeout" when the deadline passes).
        """
        await self._start_operation()
        with self._settings.operation():
            first = check_url(url, self._config)
            plan = _Plan(
                headers=without(httpx.Headers(headers or {}), _OWNED_HEADERS),
                respect_robots=respect_robots,
                max_redirects=_at_most(max_redirects, self._config.max_redirects),
                max_body_bytes=_at_most(max_body_bytes, self._config.max_body_bytes),
                max_decoded_bytes=_at_most(max_decoded_bytes, self._config.max_decoded_bytes),
                credentials=credential_names(credentials_headers),
                follow_with_credentials=follow_with_credentials,
                larger_body=larger_body,
            )
            hop = Hop(first, method.upper(), content)
            return await self._bounded(deadline_s, lambda: self._follow(hop, plan))

    async def robots_allowed(self, url: str, *, deadline_s: float | None = None) -> bool:
        """Whether robots.txt lets our User-Agent fetch ``url`` (see ``robots`` for the rules).

        Raises OpError(URL_REJECTED | SSRF_BLOCKED) for a URL the guard refuses, and
        OpError(FETCH_FAILED, "timeout") when ``deadline_s`` passes.
        """
        await self._start_operation()
        with self._settings.operation():
            parsed = check_url(url, self._config)
            verdict = await self._bounded(deadline_s, lambda: self._robots.check(parsed))
            return verdict.allowed

    async def _bounded(self, deadline_s: float | None, work: Callable[[], Awaitable[T]]) -> T:
        # httpx timeouts bound each read; a server dripping a byte a second never trips them.
        with trio.move_on_after(deadline_s if deadline_s is not None else self._config.timeout_s):
            return await work()
        raise OpError(ErrorCode.FETCH_FAILED, "timeout")

    async def _follow(self, hop: Hop, plan: _Plan) -> FetchResult:
        try:
            with budget.work():  # on the wire: a budget running out cancels it (SPEC D-3)
                return await self._follow_untranslated(hop, plan)
        except OpError:
            raise
        except Exception as exc:
            error = translate(exc)
            if error is None:
                raise
            raise error from exc

    async def _follow_untranslated(self, hop: Hop, plan: _Plan) -> FetchResult:
        started = trio.current_time()
        chain = [hop.url.url]
        headers = plan.headers
        while True:
            if plan.respect_robots:
                await self._require_robots(hop.url)
            budget.require("bytes")  # none left: not even asked for
            async with self._send(hop, headers) as response:
                if not is_redirect(response):
                    async with _reserved_bytes(response, plan) as bill:
                        body = await _read_budgeted(response, plan, hop.url.url, bill)
                    return _result(response, body, chain, trio.current_time() - started)
                if len(chain) > plan.max_redirects:
                    raise OpError(ErrorCode.TOO_MANY_REDIRECTS, f"max_{plan.max_redirects}")
                following = next_hop(
                    hop.url, response, method=hop.method, content=hop.content, config=self._config
                )
            headers = _headers_for(following, hop, headers, plan)
            hop = following
            chain.append(hop.url.url)

    @asynccontextmanager
    async def _send(self, hop: Hop, headers: httpx.Headers) -> AsyncIterator[httpx.Response]:
        request = self._http.build_request(
            hop.method,
            hop.url.url,
            headers=headers,
            content=hop.content,
            timeout=httpx.Timeout(self._config.timeout_s),
        )
        request.headers["accept-encoding"] = ACCEPT_ENCODING
        response = await self._http.send(request, stream=True)
        restore_location(response)
        try:
            check_header_bytes(response, self._config.max_header_bytes)
            yield response
        finally:
            await response.aclose()

    async def _require_robots(self, url: ParsedUrl) -> None:
        verdict = await self._robots.check(url)
        if not verdict.allowed:
            raise OpError(ErrorCode.ROBOTS_DISALLOWED, verdict.reason)

    async def _fetch_robots(self, url: ParsedUrl) -> FetchResult:
        cap = self._config.robots_max_bytes
        plan = _Plan(
            headers=httpx.Headers(),
            respect_robots=False,
            max_redirects=self._config.max_redirects,
            max_body_bytes=cap,
            max_decoded_bytes=cap,
            credentials=frozenset(),
            follow_with_credentials=True,
        )
        return await self._follow(Hop(url, "GET", None), plan)


def _headers_for(
    following: Hop, current: Hop, headers: httpx.Headers, plan: _Plan
) -> httpx.Headers:
    """The headers ``following`` may carry; credentials and the trace context never cross to
    another origin (the trace goes only to the configured API it was sent to: SPEC D-3)."""
    headers = body_headers_dropped(headers, following)
    if following.url.origin == current.url.origin:
        return headers
    headers = without(headers, TRACE_HEADERS)
    if not carries_credentials(headers, plan.credentials):
        return headers
    if not plan.follow_with_credentials:
        raise OpError(ErrorCode.FETCH_FAILED, "credentials_redirect")
    return without(headers, plan.credentials)


def _result(
    response: httpx.Response, body: bytes, chain: list[str], elapsed_s: float
) -> FetchResult:
    media_type, charset = parse_content_type(response.headers.get("content-type", ""))
    return FetchResult(
        url=chain[-1],
        status_code=response.status_code,
        headers=response.headers,
        body=body,
        content_type=sniffed_type(media_type, body, charset),  # a PDF served as text/html is none
        charset=charset,
        redirect_chain=tuple(chain),
        elapsed_s=elapsed_s,
    )


def _at_most(value: int | None, cap: int) -> int:
    if value is None:
        return cap
    if value < 0:
        raise ValueError("a per-call limit must not be negative")
    return min(value, cap)


@asynccontextmanager
async def open_guarded_client(
    config: GuardConfig | None = None,
    *,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
    wrap_transport: TransportWrapper | None = None,
    proxy: Proxy | None = None,
) -> AsyncIterator[GuardedClient]:
    """A GuardedClient for ``config``; its connections close when the block exits.

    ``resolver`` defaults to the system's (tests inject fixed answers); ``ssl_context``
    defaults to httpx's certifi roots (tests pass a trustme CA); ``wrap_transport`` wraps the
    guarded transport (``csp-web replay`` records and serves cassettes there); ``proxy``
    (``web.proxy``) tunnels every connect to its checked address (``forward_proxy.py``).
    Proxy and TLS environment variables are ignored: the pinned connect is the only route out.
    """
    settings = GuardSettings(config or GuardConfig())
    config = settings.current
    backend = PinnedBackend(settings, resolver or SystemResolver(), proxy=proxy)
    transport = GuardedTransport(backend, ssl_context=ssl_context)
    async with _CookielessClient(
        transport=transport if wrap_transport is None else wrap_transport(transport),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(config.timeout_s),
        headers={"User-Agent": config.user_agent, "Accept-Encoding": ACCEPT_ENCODING},
        event_hooks={"request": [], "response": [hold_location]},
    ) as client:
        yield GuardedClient(client, settings, transport)

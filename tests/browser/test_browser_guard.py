"""Every request a page makes passes the fetch guard in the proxy: subresources, redirects,
rebinding DNS, popups, plain http, and peers other than Chromium."""

from __future__ import annotations

import asyncio
import socket
import threading
from dataclasses import replace

import pytest
import trio
import trio.testing

from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy, Lane
from protocol import ErrorCode, Reply, Status
from specialists.browser.errors import translate
from specialists.browser.pages import PageSet
from specialists.browser.services import BrowserServices
from tests.net._dns import FixedResolver, RebindingResolver
from tests.net._origin import Origin

from .support import WAIT_S, Listener, Refusals
from .test_browser_op import error, run, serve, session_pages


def subresources_page(port: int) -> bytes:
    return f"""<html><head><title>Subresources</title></head><body>
<img src="https://img.private.test:{port}/x.png">
<iframe src="https://frame.private.test:{port}/"></iframe>
<script>
fetch("https://fetch.private.test:{port}/data").catch(() => {{}});
new WebSocket("wss://ws.private.test:{port}/socket");
</script></body></html>""".encode()


async def test_image_fetch_websocket_and_iframe_to_a_private_host_are_each_refused(
    dispatcher: Dispatcher,
    services: BrowserServices,
    origin: Origin,
    private: Listener,
    refusals: Refusals,
) -> None:
    url = serve(origin, "/sub", subresources_page(private.port))
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), ("SESSION", "sub"))
    assert reply.status is Status.OK, reply  # the page itself is allowed
    hosts = ("img", "frame", "fetch", "ws")
    await refusals.wait_for(f"{host}.private.test:{private.port}" for host in hosts)
    by_target = {r.target: r.error for r in refusals.seen}
    # All came through the page's context's lane; the main port carries only the browser's
    # own background requests (an update check), which no action ever reads.
    (lane,) = {r.lane for r in refusals.seen if r.target.endswith(f"private.test:{private.port}")}
    assert lane != services.proxy.main.number
    for host in hosts:
        assert by_target[f"{host}.private.test:{private.port}"] == "ssrf_blocked:loopback-127/8"
    assert private.connections == 0


async def test_navigating_to_a_private_address_is_ssrf_blocked(
    dispatcher: Dispatcher, private: Listener
) -> None:
    by_name = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", f"https://private.test:{private.port}/")
    )
    assert error(by_name) == "ssrf_blocked:loopback-127/8"
    literal = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", f"https://127.0.0.2:{private.port}/")
    )
    assert error(literal) == "ssrf_blocked:loopback-127/8"
    assert private.connections == 0


async def test_a_redirect_to_a_private_address_is_blocked(
    dispatcher: Dispatcher, origin: Origin, private: Listener
) -> None:
    target = f"https://private.test:{private.port}/inside"
    start = origin.url("origin.test", f"/redirect?to={target}")
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", start))
    assert error(reply) == "ssrf_blocked:loopback-127/8"
    assert origin.paths() == ["/redirect"]
    assert private.connections == 0


async def test_dns_rebinding_cannot_move_a_checked_name_to_a_private_address(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin, private: Listener
) -> None:
    # rebind.test answers the allowed 127.0.0.1 first, then the denied 127.0.0.2.
    rebinding = RebindingResolver([["127.0.0.1"], ["127.0.0.2"]])
    services.proxy.resolver = rebinding
    url = serve(origin, "/rebind", b"<title>first</title>")
    url = url.replace("origin.test", "rebind.test")
    first = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url))
    assert first.get("TITLE") == "first", first  # connected to what was checked: the origin
    second = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url))
    assert error(second) == "ssrf_blocked:loopback-127/8"  # the new answer is judged anew
    # Each navigation resolved anew; Chromium may open one more tunnel of its own (a
    # favicon) under load, judged against the rebound answer like the second navigation.
    assert rebinding.calls >= 2
    assert private.connections == 0


async def test_plain_http_is_refused_unless_configured(
    dispatcher: Dispatcher, private: Listener
) -> None:
    reply = await run(
        dispatcher, ("ACTION", "navigate"), ("TARGET_URL", f"http://origin.test:{private.port}/")
    )
    assert error(reply) == "url_rejected:http-not-allowed"
    assert private.connections == 0


async def test_a_process_other_than_chromium_cannot_use_the_proxy(
    services: BrowserServices, origin: Origin
) -> None:
    proxy = services.proxy
    before = proxy.stats.foreign_peers
    with trio.fail_after(WAIT_S):
        stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        async with stream:
            await stream.send_all(f"CONNECT origin.test:{origin.port} HTTP/1.1\r\n\r\n".encode())
            try:
                answer = await stream.receive_some(100)
            except trio.BrokenResourceError:
                answer = b""
    assert answer == b""  # closed without a byte
    assert proxy.stats.foreign_peers == before + 1
    assert origin.connections == 0


async def _proxy_exchange(
    proxy: GuardProxy, request: bytes, then: bytes = b"", *, lane: bool = True
) -> tuple[bytes, Lane]:
    """Send ``request`` (and ``then`` after the proxy's answer) as a client, through a new
    lane (a context's) or else the main port; all the proxy answers, and the lane used."""
    received = b""
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            used = proxy.open_lane() if lane else proxy.main
            stream = await trio.open_tcp_stream("127.0.0.1", used.port)
            async with stream:
                await stream.send_all(request)
                received = await stream.receive_some(65536)
                if then:
                    await stream.send_all(then)
                while data := await stream.receive_some(65536):
                    received += data
            nursery.cancel_scope.cancel()
    return received, used


async def test_a_cleartext_tunnel_is_cut_when_plain_http_is_off(
    guard: GuardConfig, dns: FixedResolver, origin: Origin
) -> None:
    # Chromium itself refuses ws:// from an https page (mixed content); the proxy does not
    # count on it: a tunnel whose first byte starts no TLS handshake is closed unforwarded.
    proxy = GuardProxy(lambda: guard, resolver=dns)
    request = f"CONNECT origin.test:{origin.port} HTTP/1.1\r\n\r\n".encode()
    answer, lane = await _proxy_exchange(proxy, request, b"GET /socket HTTP/1.1\r\n\r\n")
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert [r.error for r in lane.refusals_since(0)] == ["url_rejected:http-not-allowed"]
    assert origin.requests == []


async def test_the_browsers_own_requests_outside_any_context_are_all_refused(
    guard: GuardConfig, dns: FixedResolver, origin: Origin
) -> None:
    # Update checks and sign-in pings come through the main port; no op asked for them, so
    # none leaves, not even to a host the guard would allow a context.
    proxy = GuardProxy(lambda: guard, resolver=dns)
    request = f"CONNECT origin.test:{origin.port} HTTP/1.1\r\n\r\n".encode()
    answer, main = await _proxy_exchange(proxy, request, lane=False)
    assert answer.startswith(
        b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: url_rejected:outside-context\r\n"
    )
    assert main is proxy.main
    assert [(r.lane, r.target) for r in main.refusals_since(0)] == [
        (0, f"origin.test:{origin.port}")
    ]
    assert origin.connections == 0  # through a lane it is let through (the lane test above)


async def test_plain_http_through_the_proxy_is_guarded_and_forwarded_when_allowed(
    guard: GuardConfig, dns: FixedResolver, plain_origin: Origin, private: Listener
) -> None:
    allowed = replace(guard, allow_http=True, allowed_ports=(plain_origin.port, private.port))
    proxy = GuardProxy(lambda: allowed, resolver=dns)
    url = plain_origin.url("origin.test", "/page")
    answer, _ = await _proxy_exchange(proxy, f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"<title>Hello</title>" in answer
    assert plain_origin.paths() == ["/page"]
    private_url = f"http://private.test:{private.port}/"
    refused, _ = await _proxy_exchange(proxy, f"GET {private_url} HTTP/1.1\r\n\r\n".encode())
    assert refused.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: ssrf_blocked:loopback-127/8")
    assert private.connections == 0
    closed = GuardProxy(lambda: guard, resolver=dns)
    denied, _ = await _proxy_exchange(closed, f"GET {url} HTTP/1.1\r\n\r\n".encode())
    assert b"X-Csp-Guard: url_rejected:http-not-allowed" in denied


async def test_a_popup_to_a_private_address_never_reaches_it(
    dispatcher: Dispatcher, services: BrowserServices, origin: Origin, private: Listener
) -> None:
    page = f"""<title>popups</title><a id="open" target="_blank"
      href="https://127.0.0.2:{private.port}/">x</a>""".encode()
    url = serve(origin, "/popup", page)
    session = ("SESSION", "popup")
    await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), session)
    await run(dispatcher, ("ACTION", "click"), ("SELECTOR", "css:#open"), session)
    pages = session_pages(services, "popup")
    await services.engine.run(wait_popup, pages)
    assert pages.popups_kept + pages.popups_closed == 1
    assert private.connections == 0


async def wait_popup(pages: PageSet) -> None:
    await asyncio.wait_for(pages.popup_decided.wait(), WAIT_S)


# ---- refusals belong to the context whose lane they came through ---------------------------

TUNNEL_FAILED = "net::ERR_TUNNEL_CONNECTION_FAILED at https://origin.test/redirect"


def _code(failure: Exception, lane: Lane, since: int, url: str | None) -> str:
    error = translate(failure, scope="browser", lane=lane, since=since, url=url)
    return f"{error.code}:{error.detail}"


def test_a_refusal_explains_failures_only_on_its_own_lane_and_only_since_the_action_began() -> None:
    from playwright.async_api import Error

    mine, other = Lane(1, 0), Lane(2, 0)
    before_mine, before_other = mine.mark(), other.mark()
    mine.record("private.test:443", ErrorCode.SSRF_BLOCKED, "loopback-127/8")
    failure = Error(TUNNEL_FAILED)
    assert _code(failure, mine, before_mine, None) == "ssrf_blocked:loopback-127/8"
    # The other context failed at the same moment: it never hears this one's reason.
    assert _code(failure, other, before_other, None) == (
        "navigation_failed:err_tunnel_connection_failed"
    )
    # A refusal made before an action began explains nothing of it.
    assert _code(failure, mine, mine.mark(), None) == (
        "navigation_failed:err_tunnel_connection_failed"
    )
    # The URL's own host wins over a later refusal on the lane (a subresource's).
    since = mine.mark()
    mine.record("origin.test:443", ErrorCode.URL_REJECTED, "port-not-allowed")
    mine.record("img.private.test:443", ErrorCode.SSRF_BLOCKED, "loopback-127/8")
    assert _code(failure, mine, since, "https://origin.test/") == "url_rejected:port-not-allowed"
    assert _code(failure, mine, since, None) == "ssrf_blocked:loopback-127/8"


async def _connect_through(port: int, target: str) -> bytes:
    """A CONNECT to ``target`` sent to the proxy listening on ``port``; its answer head."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer and (data := await stream.receive_some(65536)):
            answer += data
        return answer


async def test_each_lane_keeps_only_the_refusals_of_requests_that_came_through_it(
    guard: GuardConfig, dns: FixedResolver, origin: Origin, private: Listener
) -> None:
    proxy = GuardProxy(lambda: guard, resolver=dns)
    answers: dict[str, bytes] = {}
    kept_on_answer: dict[str, list[str]] = {}
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            refused, allowed = proxy.open_lane(), proxy.open_lane()
            assert len({proxy.port, refused.port, allowed.port}) == 3

            async def ask(name: str, lane: Lane, target: str) -> None:
                answers[name] = await _connect_through(lane.port, target)
                # What the lane holds the moment the answer is in: a refusal is kept before
                # a byte of its answer goes out, so reading it needs no wait.
                kept_on_answer[name] = [r.error for r in lane.refusals_since(0)]

            async with trio.open_nursery() as both:  # at the same time
                both.start_soon(ask, "refused", refused, f"private.test:{private.port}")
                both.start_soon(ask, "allowed", allowed, f"origin.test:{origin.port}")
            proxy.close_lane(refused)
            proxy.close_lane(refused)  # closing twice is closing once
            await trio.testing.wait_all_tasks_blocked()  # the close ran on the proxy's loop
            # A closed lane stops listening: its port refuses the connection.
            with pytest.raises(OSError, match="all attempts to connect"):
                await _connect_through(refused.port, f"origin.test:{origin.port}")
            # Closing a lane (its context closed) also ends the tunnels still open through it.
            tunnel = await trio.open_tcp_stream("127.0.0.1", allowed.port)
            async with tunnel:
                await tunnel.send_all(
                    f"CONNECT origin.test:{origin.port} HTTP/1.1\r\n\r\n".encode()
                )
                assert await tunnel.receive_some(65536) == (
                    b"HTTP/1.1 200 Connection established\r\n\r\n"
                )
                proxy.close_lane(allowed)
                assert await tunnel.receive_some(65536) == b""
            nursery.cancel_scope.cancel()
    assert answers["refused"].startswith(
        b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: ssrf_blocked:loopback-127/8\r\n"
    )
    assert answers["allowed"] == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert kept_on_answer == {"refused": ["ssrf_blocked:loopback-127/8"], "allowed": []}
    assert [(r.lane, r.target, r.error) for r in refused.refusals_since(0)] == [
        (refused.number, f"private.test:{private.port}", "ssrf_blocked:loopback-127/8")
    ]
    assert allowed.refusals_since(0) == []
    assert proxy.main.refusals_since(0) == []
    assert (proxy.stats.lanes_opened, proxy.stats.lanes_open) == (2, 0)
    assert private.connections == 0


async def test_a_lane_cannot_be_opened_while_the_proxy_is_not_serving(
    guard: GuardConfig,
) -> None:
    proxy = GuardProxy(lambda: guard)
    with pytest.raises(OSError, match="not serving"):
        proxy.open_lane()


async def test_two_contexts_at_once_each_hear_only_their_own_refusal(
    dispatcher: Dispatcher,
    services: BrowserServices,
    origin: Origin,
    private: Listener,
    refusals: Refusals,
) -> None:
    allowed_url = serve(origin, "/allowed", b"<title>Allowed</title>")
    replies: dict[str, Reply] = {}

    async def navigate(name: str, url: str) -> None:
        fields = (("ACTION", "navigate"), ("TARGET_URL", url), ("SESSION", name))
        replies[name] = await run(dispatcher, *fields)

    async with trio.open_nursery() as both:
        both.start_soon(navigate, "refused", f"https://private.test:{private.port}/")
        both.start_soon(navigate, "allowed", allowed_url)
    assert error(replies["refused"]) == "ssrf_blocked:loopback-127/8"
    assert replies["allowed"].status is Status.OK, replies["allowed"]
    assert replies["allowed"].get("TITLE") == "Allowed"
    refused, allowed = (session_pages(services, n).lane for n in ("refused", "allowed"))
    assert refused.number != allowed.number
    kept = refused.refusals_since(0)
    assert kept  # Chromium may try a refused tunnel twice; each is kept, all of them its own
    assert {(r.lane, r.target, r.error) for r in kept} == {
        (refused.number, f"private.test:{private.port}", "ssrf_blocked:loopback-127/8")
    }
    assert allowed.refusals_since(0) == []
    # Besides the browser's own background requests (the main port's, read by no action),
    # every refusal of the moment came through the refused context's lane.
    main = services.proxy.main.number
    assert {r.lane for r in refusals.seen if r.lane != main} == {refused.number}
    assert private.connections == 0


def noisy_page() -> bytes:
    """A page refused by the guard over and over (a port outside allowed_ports) while open."""
    return b"""<title>Noisy</title><script>
setInterval(() => fetch("https://origin.test:8443/x").catch(() => {}), 10);
</script>"""


async def test_a_redirect_refusal_is_read_from_its_own_context_while_another_is_refused_nonstop(
    dispatcher: Dispatcher,
    services: BrowserServices,
    origin: Origin,
    private: Listener,
    refusals: Refusals,
) -> None:
    # The redirect's hop is not the URL's own host, so no host match picks it: before lanes,
    # "the latest refusal since the action began" was as likely the noisy context's.
    noisy_url = serve(origin, "/noisy", noisy_page())
    session = ("SESSION", "noisy")
    noisy = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", noisy_url), session)
    assert noisy.status is Status.OK, noisy
    await refusals.wait_for(["origin.test:8443"])  # the noisy page is being refused now
    target = f"https://private.test:{private.port}/inside"
    start = origin.url("origin.test", f"/redirect?to={target}")
    for _ in range(3):  # each time while the noisy page keeps being refused
        reply = await run(
            dispatcher, ("ACTION", "navigate"), ("TARGET_URL", start), ("SESSION", "quiet")
        )
        assert error(reply) == "ssrf_blocked:loopback-127/8"
    quiet, loud = session_pages(services, "quiet").lane, session_pages(services, "noisy").lane
    assert {r.target for r in quiet.refusals_since(0)} == {f"private.test:{private.port}"}
    assert {r.error for r in loud.refusals_since(0)} == {"url_rejected:port-not-allowed"}
    assert private.connections == 0


class _HeldFirstCheck:
    """A peer check that holds the first connection's check (in whatever thread it runs)
    until ``release`` is set, and admits every peer; ``released`` says how each hold ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0
        self.holding = threading.Event()
        self.release = threading.Event()
        self.released: list[bool] = []

    def __call__(self, peer: tuple[str, int], local: tuple[str, int]) -> bool:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.holding.set()
            self.released.append(self.release.wait(WAIT_S))
        return True


async def test_the_peer_check_runs_off_the_event_loop_so_a_slow_one_holds_up_only_its_peer(
    guard: GuardConfig,
) -> None:
    """The peer check walks /proc (the socket table, every fd of every Chromium process) for
    each connection Chromium makes. Before, it ran on the event loop, which is the daemon's:
    while it ran, nothing else did. Now a check in progress holds up only its own peer."""
    proxy = GuardProxy(lambda: guard)
    check = _HeldFirstCheck()
    proxy.peer_check = check
    request = b"CONNECT origin.test:443 HTTP/1.1\r\n\r\n"
    refused = b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: url_rejected:outside-context\r\n"
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            first = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await trio.to_thread.run_sync(check.holding.wait, WAIT_S)
            second = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            async with second:
                await second.send_all(request)
                answer = await second.receive_some(65536)
            check.release.set()  # only once the second peer was answered
            async with first:
                await first.send_all(request)
                first_answer = await first.receive_some(65536)
            nursery.cancel_scope.cancel()
    assert check.released == [True]  # the test released it: the loop ran meanwhile
    assert answer.startswith(refused)
    assert first_answer.startswith(refused)


async def test_a_host_answering_with_many_silent_addresses_cannot_stretch_the_connect(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A hostile name may resolve to many addresses that never answer a SYN. The proxy's
    connect (no op deadline above it) is bounded by ``timeout_s`` in all, not per address:
    before, eight silent addresses held the tunnel eight times as long (and a name can carry
    dozens)."""
    with socket.socket() as silent:  # its one-slot backlog full: later SYNs go unanswered
        silent.bind(("0.0.0.0", 0))
        silent.listen(0)
        port = silent.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)):
            addresses = [f"127.0.0.{n}" for n in range(2, 10)]
            dns = FixedResolver({"silent.test": addresses})
            guard = GuardConfig(
                allowed_ports=(port,), allow_private=("127.0.0.0/8",), timeout_s=5.0
            )
            proxy = GuardProxy(lambda: guard, resolver=dns)
            start = trio.current_time()
            answer, lane = await _proxy_exchange(
                proxy, f"CONNECT silent.test:{port} HTTP/1.1\r\n\r\n".encode()
            )
            took_s = trio.current_time() - start  # the mock clock's: no real time passes
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: fetch_failed:connect\r\n")
    assert [r.error for r in lane.refusals_since(0)] == ["fetch_failed:connect"]
    assert took_s <= guard.timeout_s


@pytest.mark.parametrize("port", [b"\xb2", b"9" * 5000])
async def test_a_connect_whose_port_is_no_port_number_is_refused_with_the_guards_code(
    guard: GuardConfig, dns: FixedResolver, port: bytes
) -> None:
    """``\\xb2`` (superscript two, a "digit" to str.isdigit) and 5000 digits (past int()'s
    limit) are no port numbers. Before, the proxy's int() raised ValueError on them: the
    connection was dropped with a traceback in the log and no refusal kept on the lane."""
    proxy = GuardProxy(lambda: guard, resolver=dns)
    answer, lane = await _proxy_exchange(
        proxy, b"CONNECT origin.test:" + port + b" HTTP/1.1\r\n\r\n"
    )
    (refusal,) = lane.refusals_since(0)
    assert answer.startswith(
        b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: " + refusal.error.encode() + b"\r\n"
    )
    assert refusal.code is ErrorCode.URL_REJECTED
    assert refusal.target == "origin.test:0"

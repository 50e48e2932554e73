"""Every request a page makes passes the fetch guard in the proxy: subresources, redirects,
rebinding DNS, popups, plain http, and peers other than Chromium."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import trio

from csp_web.core.dispatch import Dispatcher
from csp_web.net import GuardConfig
from protocol import Status
from specialists.browser.pages import PageSet
from specialists.browser.proxy import GuardProxy
from specialists.browser.services import BrowserServices
from tests.net._dns import FixedResolver, RebindingResolver
from tests.net._origin import Origin

from .support import WAIT_S, Listener, Refusals
from .test_browser_op import error, run, serve


def subresources_page(port: int) -> bytes:
    return f"""<html><head><title>Subresources</title></head><body>
<img src="https://img.private.test:{port}/x.png">
<iframe src="https://frame.private.test:{port}/"></iframe>
<script>
fetch("https://fetch.private.test:{port}/data").catch(() => {{}});
new WebSocket("wss://ws.private.test:{port}/socket");
</script></body></html>""".encode()


async def test_image_fetch_websocket_and_iframe_to_a_private_host_are_each_refused(
    dispatcher: Dispatcher, origin: Origin, private: Listener, refusals: Refusals
) -> None:
    url = serve(origin, "/sub", subresources_page(private.port))
    reply = await run(dispatcher, ("ACTION", "navigate"), ("TARGET_URL", url), ("SESSION", "sub"))
    assert reply.status is Status.OK, reply  # the page itself is allowed
    hosts = ("img", "frame", "fetch", "ws")
    await refusals.wait_for(f"{host}.private.test:{private.port}" for host in hosts)
    by_target = {r.target: r.error for r in refusals.seen}
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


async def _proxy_exchange(proxy: GuardProxy, request: bytes, then: bytes = b"") -> bytes:
    """Send ``request`` (and ``then`` after the proxy's answer) as a client; all it answers."""
    received = b""
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            stream = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            async with stream:
                await stream.send_all(request)
                received = await stream.receive_some(65536)
                if then:
                    await stream.send_all(then)
                while data := await stream.receive_some(65536):
                    received += data
            nursery.cancel_scope.cancel()
    return received


async def test_a_cleartext_tunnel_is_cut_when_plain_http_is_off(
    guard: GuardConfig, dns: FixedResolver, origin: Origin
) -> None:
    # Chromium itself refuses ws:// from an https page (mixed content); the proxy does not
    # count on it: a tunnel whose first byte starts no TLS handshake is closed unforwarded.
    proxy = GuardProxy(lambda: guard, resolver=dns)
    request = f"CONNECT origin.test:{origin.port} HTTP/1.1\r\n\r\n".encode()
    answer = await _proxy_exchange(proxy, request, b"GET /socket HTTP/1.1\r\n\r\n")
    assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert [r.error for r in proxy.stats.recent] == ["url_rejected:http-not-allowed"]
    assert origin.requests == []


async def test_plain_http_through_the_proxy_is_guarded_and_forwarded_when_allowed(
    guard: GuardConfig, dns: FixedResolver, plain_origin: Origin, private: Listener
) -> None:
    allowed = replace(guard, allow_http=True, allowed_ports=(plain_origin.port, private.port))
    proxy = GuardProxy(lambda: allowed, resolver=dns)
    url = plain_origin.url("origin.test", "/page")
    answer = await _proxy_exchange(proxy, f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"<title>Hello</title>" in answer
    assert plain_origin.paths() == ["/page"]
    private_url = f"http://private.test:{private.port}/"
    refused = await _proxy_exchange(proxy, f"GET {private_url} HTTP/1.1\r\n\r\n".encode())
    assert refused.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: ssrf_blocked:loopback-127/8")
    assert private.connections == 0
    closed = GuardProxy(lambda: guard, resolver=dns)
    denied = await _proxy_exchange(closed, f"GET {url} HTTP/1.1\r\n\r\n".encode())
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
    pages = services.sessions.sessions["popup"].pages
    await services.engine.run(wait_popup, pages)
    assert pages.popups_kept + pages.popups_closed == 1
    assert private.connections == 0


async def wait_popup(pages: PageSet) -> None:
    await asyncio.wait_for(pages.popup_decided.wait(), WAIT_S)

"""The guard proxy (csp_web.net.guard_proxy) as a shared piece of the net package: it runs without
Chromium and serves any process tree it is told to admit (exec's sandbox, next), judging
every request as fetch does."""

from __future__ import annotations

import functools
import os

import trio

from csp_web.net import GuardConfig, parse_proxy
from csp_web.net.guard_proxy import GuardProxy
from csp_web.net.proxy_peers import owned_by_tree

from ._dns import FixedResolver
from ._origin import WAIT_S, Origin
from ._proxy import start_proxy


async def _get(proxy: GuardProxy, url: str) -> bytes:
    """One plain-http request through a lane of ``proxy``, and all that came back before it
    closed (a peer refused may see its unread request reset the connection)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        lane = proxy.open_lane()
        received = b""
        async with await trio.open_tcp_stream("127.0.0.1", lane.port) as stream:
            await stream.send_all(f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            try:
                while data := await stream.receive_some(65536):
                    received += data
            except trio.BrokenResourceError:
                pass
        nursery.cancel_scope.cancel()
    return received


async def test_the_guard_proxy_serves_a_process_tree_it_admits_without_chromium(
    nursery: trio.Nursery,
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    guard = GuardConfig(
        allow_http=True, allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",)
    )
    ours = GuardProxy(lambda: guard, peer_check=owned_by_tree(os.getpid))
    foreign = GuardProxy(lambda: guard, peer_check=owned_by_tree(lambda: None))
    with trio.fail_after(WAIT_S):
        answer = await _get(ours, origin.url("127.0.0.1"))
        closed = await _get(foreign, origin.url("127.0.0.1"))
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"<title>Hello</title>" in answer
    assert closed == b""  # a socket held outside the admitted tree: closed without a byte
    assert origin.paths() == ["/page"]
    assert (ours.stats.foreign_peers, foreign.stats.foreign_peers) == (0, 1)


async def test_the_guard_proxy_refuses_what_the_guard_refuses_for_any_client(
    nursery: trio.Nursery,
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    guard = GuardConfig(allow_http=True, allowed_ports=(origin.port,))  # no private hosts
    proxy = GuardProxy(lambda: guard, peer_check=owned_by_tree(os.getpid))
    with trio.fail_after(WAIT_S):
        answer = await _get(proxy, origin.url("127.0.0.1"))
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: ssrf_blocked:")
    assert origin.connections == 0


async def test_with_an_upstream_proxy_the_guard_connects_through_it_to_the_checked_address(
    nursery: trio.Nursery,
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    upstream = await start_proxy(nursery)
    guard = GuardConfig(
        allow_http=True, allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",)
    )
    dns = FixedResolver({"origin.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: guard, resolver=dns, upstream=parse_proxy(upstream.url))
    with trio.fail_after(WAIT_S):
        answer = await _get(proxy, origin.url("origin.test"))
    assert answer.startswith(b"HTTP/1.1 200")
    assert upstream.asked == [f"CONNECT 127.0.0.1:{origin.port} HTTP/1.1"]  # never the name
    assert origin.paths() == ["/page"]


async def test_an_upstream_proxy_never_widens_what_the_guard_allows(
    nursery: trio.Nursery,
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    upstream = await start_proxy(nursery)
    guard = GuardConfig(allow_http=True, allowed_ports=(origin.port,))  # no private hosts
    proxy = GuardProxy(lambda: guard, upstream=parse_proxy(upstream.url))
    with trio.fail_after(WAIT_S):
        answer = await _get(proxy, origin.url("127.0.0.1"))
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: ssrf_blocked:")
    assert (upstream.asked, origin.connections) == ([], 0)


async def test_an_upstream_proxy_that_refuses_the_tunnel_is_a_proxy_failed_refusal(
    nursery: trio.Nursery,
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    upstream = await start_proxy(nursery)
    upstream.refuse = 403
    guard = GuardConfig(
        allow_http=True, allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",)
    )
    proxy = GuardProxy(lambda: guard, upstream=parse_proxy(upstream.url))
    with trio.fail_after(WAIT_S):
        answer = await _get(proxy, origin.url("127.0.0.1"))
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: proxy_failed:connect_403\r\n")
    assert origin.connections == 0

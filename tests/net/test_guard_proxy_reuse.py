"""A plain-http request through the guard proxy is one request on one client connection.

The proxy judges the first request on a client connection and forwards it. Spliced on, the
connection carried whatever the client sent next (another URL, another host) to that same
upstream unjudged, and an upstream that answered keep-alive (ignoring the proxy's
``Connection: close``), or sent more than its Content-Length, had Chromium read that
host's bytes as the answer to a request for another host.
"""

from __future__ import annotations

import functools

import trio

from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy

from ._dns import FixedResolver
from ._origin import WAIT_S, Origin
from ._raw_origin import RawOrigin, page, response


async def _two_requests(proxy: GuardProxy, first: str, second: str) -> bytes:
    """``first``, then ``second`` on the same client connection to a lane, written once the
    answer to ``first`` is in; all that came back before the proxy closed."""
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        lane = proxy.open_lane()
        received = b""
        async with await trio.open_tcp_stream("127.0.0.1", lane.port) as stream:
            await stream.send_all(f"GET {first} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            while b"first page words" not in received:
                received += await stream.receive_some(65536)
            try:
                await stream.send_all(f"GET {second} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
                while data := await stream.receive_some(65536):
                    received += data
            except trio.BrokenResourceError:
                pass
        nursery.cancel_scope.cancel()
    return received


def _proxy_to(origin: RawOrigin) -> GuardProxy:
    """A guard proxy that lets plain http reach ``origin`` as origin.test and other.test."""
    guard = GuardConfig(
        allow_http=True, allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",)
    )
    dns = FixedResolver({"origin.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    return GuardProxy(lambda: guard, resolver=dns)


async def test_a_second_request_on_a_proxy_connection_never_reaches_the_first_upstream(
    nursery: trio.Nursery,
) -> None:
    origin = RawOrigin("http")
    origin.answers["/one"] = ((response(b"<p>first page words</p>"),), ())
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    proxy = _proxy_to(origin)
    with trio.fail_after(WAIT_S):
        received = await _two_requests(
            proxy, origin.url("origin.test", "/one"), origin.url("other.test", "/two")
        )
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"\r\nconnection: close" in head.lower()  # the client is told not to reuse it
    assert body == b"<p>first page words</p>"
    assert origin.seen == [(1, "/one")]  # /two went nowhere on the first host's connection
    assert proxy.stats.forwarded == 1


async def test_bytes_past_the_upstreams_answer_never_reach_the_client(
    nursery: trio.Nursery,
) -> None:
    origin = RawOrigin("http")
    smuggled = response(b"<title>POISONED</title>")
    origin.answers["/one"] = ((response(b"<p>first page words</p>") + smuggled,), ())
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    proxy = _proxy_to(origin)
    with trio.fail_after(WAIT_S):
        received = await _two_requests(
            proxy, origin.url("origin.test", "/one"), origin.url("other.test", "/two")
        )
    assert b"POISONED" not in received
    assert page("/two") not in received


async def test_a_request_body_reaches_the_upstream_as_its_head_frames_it(
    nursery: trio.Nursery,
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    guard = GuardConfig(
        allow_http=True, allowed_ports=(origin.port,), allow_private=("127.0.0.1/32",)
    )
    proxy = GuardProxy(lambda: guard)
    url = origin.url("127.0.0.1", "/echo")
    framings = {
        "length": b"Content-Length: 11\r\n\r\nhello world",
        "chunked": b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        "expect": b"Expect: 100-continue\r\nContent-Length: 11\r\n\r\n",
    }
    answers = []
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as inner:
            await inner.start(proxy.serve)
            lane = proxy.open_lane()
            for framing in framings.values():
                async with await trio.open_tcp_stream("127.0.0.1", lane.port) as stream:
                    await stream.send_all(f"POST {url} HTTP/1.1\r\nHost: x\r\n".encode() + framing)
                    received = b""
                    if framing.startswith(b"Expect"):  # the body waits for the 100
                        while b"\r\n\r\n" not in received:
                            received += await stream.receive_some(65536)
                        await stream.send_all(b"hello world")
                    while data := await stream.receive_some(65536):
                        received += data
                answers.append(received)
            inner.cancel_scope.cancel()
    assert [seen.body for seen in origin.requests] == [b"hello world"] * 3
    assert answers[2].startswith(b"HTTP/1.1 100 ")
    assert all(b'"body": "hello world"' in answer for answer in answers)


async def test_a_client_leaving_ends_the_wait_for_an_upstream_that_never_answers(
    nursery: trio.Nursery,
) -> None:
    asked, closed = trio.Event(), trio.Event()

    async def silent(stream: trio.SocketStream) -> None:  # reads the request, never answers
        received = b""
        while b"\r\n\r\n" not in received:
            received += await stream.receive_some(65536)
        asked.set()
        while await stream.receive_some(65536):
            pass
        closed.set()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    nursery.start_soon(trio.serve_listeners, silent, listeners)
    guard = GuardConfig(allow_http=True, allowed_ports=(port,), allow_private=("127.0.0.1/32",))
    proxy = GuardProxy(lambda: guard)
    with trio.fail_after(WAIT_S):
        await nursery.start(proxy.serve)
        lane = proxy.open_lane()
        async with await trio.open_tcp_stream("127.0.0.1", lane.port) as stream:
            url = f"http://127.0.0.1:{port}/held"
            await stream.send_all(f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            await asked.wait()
        await closed.wait()  # the proxy let the upstream go once its client left

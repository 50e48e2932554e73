"""The h11 ASGI server's limits, each at N and N+1: body bytes, time to send the request
head, connections served at once."""

from __future__ import annotations

import contextlib
import gc
import os
import socket
from functools import partial

import trio
import trio.testing

from csp_web.mcp_face.asgi import HttpLimits, Message, Receive, Send, serve_asgi, serve_connection


async def echo(scope: Message, receive: Receive, send: Send) -> None:
    """Answers 200 with the request body."""
    body = (await receive())["body"]
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def request(body: bytes) -> bytes:
    head = f"POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


async def exchange(limits: HttpLimits, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection served under ``limits``; all the server answered."""
    client, server = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client_stream, server_stream = trio.SocketStream(client), trio.SocketStream(server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_connection, server_stream, echo, limits)
        await client_stream.send_all(data)
        answer = await _read_all(client_stream)
    return answer


async def _read_all(stream: trio.SocketStream) -> bytes:
    answer = b""
    while chunk := await stream.receive_some(65536):
        answer += chunk
    await stream.aclose()
    return answer


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


async def test_a_body_of_exactly_max_body_bytes_is_served() -> None:
    answer = await exchange(HttpLimits(max_body_bytes=16), request(b"x" * 16))
    assert status_of(answer) == 200
    assert answer.endswith(b"\r\n\r\n" + b"x" * 16)
    assert b"connection: close" in answer.lower()


async def test_a_body_one_byte_over_max_body_bytes_is_413() -> None:
    answer = await exchange(HttpLimits(max_body_bytes=16), request(b"x" * 17))
    assert status_of(answer) == 413


async def test_a_malformed_request_is_400() -> None:
    answer = await exchange(HttpLimits(), b"NOT HTTP\r\n\r\n")
    assert status_of(answer) == 400


async def _slow_head(delay_s: float) -> bytes:
    client, server = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    client_stream = trio.SocketStream(client)
    data = request(b"hi")
    async with trio.open_nursery() as nursery:
        limits = HttpLimits(head_timeout_s=10.0)
        nursery.start_soon(serve_connection, trio.SocketStream(server), echo, limits)
        await client_stream.send_all(data[:10])
        await trio.sleep(delay_s)
        with contextlib.suppress(trio.BrokenResourceError):
            await client_stream.send_all(data[10:])
        return await _read_all(client_stream)


async def test_a_request_completed_within_the_head_timeout_is_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert status_of(await _slow_head(9.9)) == 200


async def test_a_request_not_completed_within_the_head_timeout_is_dropped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert await _slow_head(10.1) == b""


async def test_connections_past_max_connections_wait_for_a_free_slot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    limits = HttpLimits(max_connections=2, head_timeout_s=100.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_asgi, echo, list(listeners), limits))
        first = await trio.open_tcp_stream("127.0.0.1", port)
        second = await trio.open_tcp_stream("127.0.0.1", port)
        await first.send_all(b"POST")  # both slots held by unfinished heads
        await second.send_all(b"POST")
        third = await trio.open_tcp_stream("127.0.0.1", port)
        await third.send_all(request(b"3"))
        with trio.move_on_after(5.0):
            early = await third.receive_some(65536)
            raise AssertionError(f"the third connection was served early: {early!r}")
        await first.send_all(request(b"1")[4:])  # frees a slot
        first_answer = await _read_all(first)
        third_answer = await _read_all(third)
        await second.aclose()
        nursery.cancel_scope.cancel()
    assert status_of(first_answer) == status_of(third_answer) == 200
    assert third_answer.endswith(b"3")


def _open_descriptors() -> int:
    """This process's open descriptors, once earlier tests' garbage has closed its own (a
    collection between two counts would otherwise change them)."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


async def test_connections_past_max_connections_are_left_in_the_backlog_not_accepted(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Before: every connection was accepted at once and then waited for a slot with no
    # timeout, so a local client could hold any number of the face's descriptors.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=64)
    port = listeners[0].socket.getsockname()[1]
    limits = HttpLimits(max_connections=2, head_timeout_s=100.0)
    extra = 20
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_asgi, echo, list(listeners), limits))
        holders = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(2)]
        await trio.sleep(1.0)  # both accepted and holding their slots
        before = _open_descriptors()
        waiting = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(extra)]
        await trio.sleep(1.0)
        grown = _open_descriptors() - before
        await holders[0].send_all(request(b"1"))  # frees a slot: one waiting is accepted
        served = await _read_all(holders[0])
        await trio.sleep(1.0)
        after_one = _open_descriptors() - before
        for stream in [*holders[1:], *waiting]:
            await stream.aclose()
        nursery.cancel_scope.cancel()
    assert grown == extra  # our client ends only: none of the 20 was accepted
    assert status_of(served) == 200
    # The served connection's two ends are closed and one waiting connection is accepted.
    assert after_one == extra - 2 + 1

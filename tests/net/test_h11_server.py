"""The one small HTTP/1.1 server (csp_web/net/h11_server.py) the MCP face and the cassette
origin share: reading a whole request, its body cap at N and N+1, and the connection cap."""

from __future__ import annotations

from functools import partial

import h11
import pytest
import trio
import trio.testing

from csp_web.net.h11_server import BadRequest, read_request, send, serve_h11

WAIT_S = 10.0


def _post(body: bytes, *, target: bytes = b"/") -> bytes:
    client = h11.Connection(h11.CLIENT)
    headers = [(b"host", b"origin.test"), (b"content-length", str(len(body)).encode())]
    data = client.send(h11.Request(method=b"POST", target=target, headers=headers)) or b""
    return (
        data + (client.send(h11.Data(data=body)) or b"") + (client.send(h11.EndOfMessage()) or b"")
    )


async def _read(data: bytes, *, max_body_bytes: int) -> tuple[h11.Request, bytes] | None:
    ours, theirs = trio.testing.memory_stream_pair()
    await theirs.send_all(data)
    await theirs.send_eof()
    with trio.fail_after(WAIT_S):
        return await read_request(ours, h11.Connection(h11.SERVER), max_body_bytes=max_body_bytes)


async def test_a_whole_request_is_read_with_its_body_at_the_cap() -> None:
    read = await _read(_post(b"x" * 10, target=b"/a"), max_body_bytes=10)
    assert read is not None
    request, body = read
    assert (request.method, request.target, body) == (b"POST", b"/a", b"x" * 10)


async def test_a_body_one_byte_over_the_cap_is_refused_413() -> None:
    with pytest.raises(BadRequest) as refused:
        await _read(_post(b"x" * 11), max_body_bytes=10)
    assert refused.value.status == 413


async def test_a_peer_that_closes_before_a_request_reads_as_none() -> None:
    assert await _read(b"", max_body_bytes=10) is None


async def test_bad_http_raises_h11s_protocol_error() -> None:
    with pytest.raises(h11.RemoteProtocolError):
        await _read(b"NOT HTTP AT ALL\r\n\r\n", max_body_bytes=10)


async def test_keep_alive_requests_are_read_in_turn_then_none_at_eof() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    conn = h11.Connection(h11.SERVER)
    await theirs.send_all(_post(b"one", target=b"/1") + _post(b"two", target=b"/2"))
    await theirs.send_eof()
    with trio.fail_after(WAIT_S):
        seen = []
        while (read := await read_request(ours, conn, max_body_bytes=10)) is not None:
            seen.append((read[0].target, read[1]))
            headers = [(b"content-length", b"0")]
            await send(ours, conn, h11.Response(status_code=204, headers=headers))
            await send(ours, conn, h11.EndOfMessage())
            conn.start_next_cycle()
    assert seen == [(b"/1", b"one"), (b"/2", b"two")]


async def test_connections_past_the_cap_wait_until_a_slot_frees() -> None:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    release, both = trio.Event(), trio.Event()
    served: list[int] = []

    async def handle(stream: trio.abc.Stream) -> None:
        async with stream:
            served.append(len(served))
            if len(served) == 2:
                both.set()
            await release.wait()

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_h11, listeners, handle, max_connections=1))
            first = await trio.open_tcp_stream("127.0.0.1", port)
            second = await trio.open_tcp_stream("127.0.0.1", port)
            await trio.testing.wait_all_tasks_blocked()
            assert served == [0]  # the second waits in the backlog, not in a task of ours
            release.set()
            await both.wait()
            await first.aclose()
            await second.aclose()
            nursery.cancel_scope.cancel()

"""An upstream answer the guard proxy cannot relay ends that one client connection cleanly.

The relay reads the upstream's answer with h11. An answer h11 refuses (a malformed header
line, a framing it cannot trust), or one cut off (a reset, an early end), used to end in a
traceback logged as a proxy bug, and Chromium got an empty reply. Before any head reached the
client, it now hears ``502 Bad Gateway`` naming the reason; after, the connection just closes.
"""

from __future__ import annotations

import logging
import socket
import struct

import pytest
import trio

from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy

from ._origin import WAIT_S

_HEAD = b"HTTP/1.1 200 OK\r\n"


async def _scripted(
    answer: bytes,
    *,
    reset: bool,
    port_box: list[int],
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """An origin that reads one request head, writes ``answer`` and hangs up: a reset (RST,
    SO_LINGER 0) when ``reset``, else an orderly close."""

    async def one(stream: trio.SocketStream) -> None:
        received = b""
        while b"\r\n\r\n" not in received:
            data = await stream.receive_some(65536)
            if not data:
                return
            received += data
        if answer:
            await stream.send_all(answer)
        if reset:
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await trio.sleep(0.05)  # the answer's bytes leave before the RST
        await stream.aclose()

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port_box.append(listeners[0].socket.getsockname()[1])
    task_status.started()
    await trio.serve_listeners(one, listeners)


async def _through(answer: bytes, request: bytes, *, reset: bool = False) -> bytes:
    """All a client gets back for ``request`` (``PORT`` replaced by the origin's) through a
    lane of a guard proxy to an origin answering ``answer``."""
    ports: list[int] = []
    received = b""
    async with trio.open_nursery() as nursery:
        await nursery.start(
            lambda task_status: _scripted(
                answer, reset=reset, port_box=ports, task_status=task_status
            )
        )
        port = ports[0]
        guard = GuardConfig(allow_http=True, allowed_ports=(port,), allow_private=("127.0.0.1/32",))
        proxy = GuardProxy(lambda: guard)
        await nursery.start(proxy.serve)
        lane = proxy.open_lane()
        async with await trio.open_tcp_stream("127.0.0.1", lane.port) as stream:
            await stream.send_all(request.replace(b"PORT", str(port).encode()))
            try:
                while data := await stream.receive_some(65536):
                    received += data
            except trio.BrokenResourceError:
                pass
        nursery.cancel_scope.cancel()
    return received


_GET = b"GET http://127.0.0.1:PORT/ HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\n\r\n"

REFUSED_BEFORE_ANY_HEAD = {
    "space_in_header_name": (_HEAD + b"X Bad: 1\r\nContent-Length: 5\r\n\r\nhello", False),
    "gzip_then_chunked": (
        _HEAD + b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        False,
    ),
    "length_and_chunked": (
        _HEAD + b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        False,
    ),
    "no_status_line": (b"hello plain", False),
    "reset_before_a_byte": (b"", True),
    "closed_before_a_byte": (b"", False),
    "reset_mid_head": (_HEAD + b"Content-Le", True),
}

CUT_AFTER_THE_HEAD = {
    "body_shorter_than_its_length": (_HEAD + b"Content-Length: 50\r\n\r\nhello", False),
    "reset_mid_body": (_HEAD + b"Content-Length: 50\r\n\r\nhello", True),
    "reset_mid_chunk": (_HEAD + b"Transfer-Encoding: chunked\r\n\r\n32\r\nhello", True),
}


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    records = [r for r in caplog.records if r.name.startswith("csp_web")]
    assert not [r for r in records if r.exc_info or r.levelno >= logging.ERROR]
    assert len(records) <= 1  # one concise line at most


@pytest.mark.parametrize("name", sorted(REFUSED_BEFORE_ANY_HEAD))
async def test_an_answer_that_cannot_be_relayed_before_any_head_is_a_502(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web")
    answer, reset = REFUSED_BEFORE_ANY_HEAD[name]
    with trio.fail_after(WAIT_S):
        received = await _through(answer, _GET, reset=reset)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 502 "), received[:200]
    assert b"\r\nconnection: close" in head.lower()
    assert body.startswith(b"bad gateway: the upstream")
    assert b"hello" not in received  # no upstream byte
    _no_traceback(caplog)
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert len(logged) == 1
    assert "ended (lane 1): upstream " in logged[0]


@pytest.mark.parametrize("name", sorted(CUT_AFTER_THE_HEAD))
async def test_an_answer_cut_after_its_head_went_just_closes(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web")
    answer, reset = CUT_AFTER_THE_HEAD[name]
    with trio.fail_after(WAIT_S):
        received = await _through(answer, _GET, reset=reset)
    assert received.startswith(_HEAD)
    assert b"502" not in received
    assert received.count(b"HTTP/1.1") == 1
    _no_traceback(caplog)


async def test_an_http_1_0_request_without_host_is_relayed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web")
    answer = _HEAD + b"Content-Type: text/plain\r\n\r\nread until close"
    with trio.fail_after(WAIT_S):
        received = await _through(answer, b"GET http://127.0.0.1:PORT/x HTTP/1.0\r\n\r\n")
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert b"transfer-encoding" not in head.lower()  # an HTTP/1.0 client reads no chunks
    assert body == b"read until close"
    _no_traceback(caplog)


async def test_an_http_1_1_request_without_host_is_a_400(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web")
    with trio.fail_after(WAIT_S):
        received = await _through(page_answer(), b"GET http://127.0.0.1:PORT/x HTTP/1.1\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 400 ")
    assert b"hello" not in received
    _no_traceback(caplog)


def page_answer() -> bytes:
    return _HEAD + b"Content-Length: 5\r\n\r\nhello"


async def test_a_hang_up_out_of_a_nursery_is_no_proxy_failure(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web")

    async def hung_up(stream: trio.SocketStream, lane: object) -> None:
        raise ExceptionGroup("relay", [trio.BrokenResourceError(), ConnectionResetError()])

    guard = GuardConfig(allow_http=True)
    proxy = GuardProxy(lambda: guard)
    monkeypatch.setattr(proxy, "_handle", hung_up)
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            lane = proxy.open_lane()
            async with await trio.open_tcp_stream("127.0.0.1", lane.port) as stream:
                assert await stream.receive_some(65536) == b""
            nursery.cancel_scope.cancel()
    assert lane.failures == 0
    _no_traceback(caplog)

"""Who may use the face over HTTP: the daemon socket's uid rule (``socket.allowed_uids``, else
our own uid), judged from the kernel's word on the peer, for a loopback port and a Unix socket.

Before, the loopback port served any local user, who then reached the daemon's ops (exec
included) as the face's uid, past the allow-list the daemon's own socket enforces."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import replace
from functools import partial
from pathlib import Path

import httpx2
import pytest
import trio

from csp_web.config import Config
from csp_web.mcp_face.asgi import serve_asgi
from csp_web.mcp_face.peers import (
    TCP6_TABLE,
    TCP_TABLE,
    TableReader,
    Wanted,
    client_rows,
    peer_uid,
    read_uid,
    uid_gate,
    uid_in_table,
)
from csp_web.mcp_face.serve import _tcp_port

from .conftest import WAIT_S, WebDaemon
from .test_asgi import _read_all, echo, request, status_of
from .test_http import running_face

ME = os.geteuid()


async def _accepted_pair(host: str) -> tuple[trio.SocketStream, trio.SocketStream]:
    (listener,) = await trio.open_tcp_listeners(0, host=host)
    port = listener.socket.getsockname()[1]
    client = await trio.open_tcp_stream(host, port)
    server = await listener.accept()
    await listener.aclose()
    return client, server


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        pytest.param(
            "::1",
            marks=pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here"),
        ),
    ],
)
async def test_a_loopback_tcp_peer_is_known_by_the_uid_that_owns_its_socket(host: str) -> None:
    client, server = await _accepted_pair(host)
    async with client, server:
        assert await peer_uid(server.socket) == ME


async def test_a_unix_socket_peer_is_known_by_its_credentials() -> None:
    ours, theirs = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert await peer_uid(ours) == ME


def test_a_peer_gone_from_the_kernels_table_has_no_uid() -> None:
    rows = [
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n",
        "   0: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000 0 1\n",
    ]
    assert uid_in_table(rows, ("0100007F:A000", "0100007F:1F90")) == 1000
    assert uid_in_table(rows, ("0100007F:A001", "0100007F:1F90")) is None


@pytest.mark.parametrize("uid", ["²", "١", "-1", "99999999999"])
def test_a_table_row_whose_uid_is_not_ascii_digits_names_no_uid(uid: str) -> None:
    row = (
        f"   0: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  {uid} 0 1\n"
    )
    assert uid_in_table([row], ("0100007F:A000", "0100007F:1F90")) is None


@pytest.mark.parametrize(
    ("where", "port"),
    [("8080", 8080), ("65535", 65535), ("65536", None), ("²", None), ("/run/f.sock", None)],
)
def test_only_ascii_digits_up_to_65535_name_a_tcp_port_for_the_face(
    where: str, port: int | None
) -> None:
    assert _tcp_port(where) == port


async def _ask_gated(allowed: frozenset[int]) -> bytes:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    gate = uid_gate(lambda: allowed)
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_asgi, echo, [listener], admit=gate))
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(request(b"hi"))
        answer = await _read_all(stream)
        nursery.cancel_scope.cancel()
    return answer


async def test_a_peer_whose_uid_is_allowed_is_served() -> None:
    with trio.fail_after(WAIT_S):
        answer = await _ask_gated(frozenset({ME}))
    assert status_of(answer) == 200
    assert answer.endswith(b"hi")


async def test_a_peer_whose_uid_is_not_allowed_is_403_naming_it_and_not_served() -> None:
    with trio.fail_after(WAIT_S):
        answer = await _ask_gated(frozenset({ME + 1}))
    _head, _, body = answer.partition(b"\r\n\r\n")
    assert status_of(answer) == 403
    assert body == f"uid {ME} is not allowed (socket.allowed_uids)\n".encode()


async def test_the_face_refuses_a_uid_outside_the_configured_allowed_uids(
    web_daemon: WebDaemon, config: Config
) -> None:
    others_only = replace(config, socket=replace(config.socket, allowed_uids=(ME + 1,)))
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    headers = {"content-type": "application/json", "accept": "application/json"}
    with trio.fail_after(WAIT_S):
        async with (
            running_face(web_daemon, "0", others_only) as where,
            httpx2.AsyncClient() as http,
        ):
            refused = await http.post(where, headers=headers, content=body)
        async with running_face(web_daemon, "0", config) as where, httpx2.AsyncClient() as http:
            served = await http.post(where, headers=headers, content=body)
    assert (refused.status_code, refused.text) == (
        403,
        f"uid {ME} is not allowed (socket.allowed_uids)\n",
    )
    assert served.status_code == 200
    assert "web_fetch" in served.text


# The kernel's tables, spelt as x86 lists them (the fixtures below write rows for real peers).
_HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"


def _row(local: str, remote: str, uid: int) -> str:
    return f"   0: {local} {remote} 01 00000000:00000000 00:00000000 00000000 {uid:5d} 0 1\n"


def _table_in(tmp: Path, uid_of_peer: int) -> tuple[Path, TableReader]:
    """A reader of fake tables in ``tmp`` that list each wanted row with ``uid_of_peer``
    (written when asked, as the kernel lists a connection once it exists)."""
    path = tmp / "tcp"

    def read(wanted: Wanted) -> int | None:
        table, (local, remote) = wanted[0]
        assert table == TCP_TABLE
        path.write_text(_HEAD + _row(remote, local, 0) + _row(local, remote, uid_of_peer))
        return read_uid(((str(path), (local, remote)),))

    return path, read


class _HeldReader:
    """Reads like ``inner``, but its first call holds until ``release`` is set (a table read
    stuck in the kernel); bounded by WAIT_S so a stuck test still ends."""

    def __init__(self, inner: TableReader) -> None:
        self.inner = inner
        self.release = threading.Event()
        self.calls = 0
        self.held = threading.Event()

    def __call__(self, wanted: Wanted) -> int | None:
        self.calls += 1
        if self.calls == 1:
            self.held.set()
            self.release.wait(WAIT_S)
        return self.inner(wanted)


async def _gated_answer(port: int) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(request(b"hi"))
    return await _read_all(stream)


async def test_a_peer_listed_with_an_allowed_uid_by_an_injected_table_reader_is_served(
    tmp_path: Path,
) -> None:
    _path, read = _table_in(tmp_path, ME + 7)
    admit = uid_gate(lambda: frozenset({ME + 7}), read_tables=read)
    client, server = await _accepted_pair("127.0.0.1")
    async with client, server:
        with trio.fail_after(WAIT_S):
            assert await admit(server) == ME + 7


async def test_a_peer_listed_with_another_uid_by_an_injected_table_reader_is_refused(
    tmp_path: Path,
) -> None:
    _path, read = _table_in(tmp_path, ME + 7)
    admit = uid_gate(lambda: frozenset({ME}), read_tables=read)
    client, server = await _accepted_pair("127.0.0.1")
    async with client, server:
        with trio.fail_after(WAIT_S):
            assert await admit(server) == f"uid {ME + 7} is not allowed (socket.allowed_uids)"


async def test_a_table_read_longer_than_the_deadline_refuses_the_peer(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Fail closed: the read is still stuck in its thread when the deadline passes (the
    autojump clock jumps to it once the loop has nothing else to do); the thread is left to
    end on its own."""
    _path, read = _table_in(tmp_path, ME)
    held = _HeldReader(read)
    admit = uid_gate(lambda: frozenset({ME}), timeout_s=1.0, read_tables=held)
    client, server = await _accepted_pair("127.0.0.1")
    async with client, server:
        try:
            with trio.fail_after(WAIT_S):
                refusal = await admit(server)
        finally:
            held.release.set()
    # The read cannot end before ``release``, set only once the gate has answered.
    assert refusal == "the peer's uid was not known within 1s"


async def test_a_stuck_table_read_holds_up_only_its_own_connection(tmp_path: Path) -> None:
    """The lookup runs off the event loop: while the first peer's read is stuck, a second
    peer is read, admitted and served; then the first is served too."""
    _path, read = _table_in(tmp_path, ME)
    held = _HeldReader(read)
    gate = uid_gate(lambda: frozenset({ME}), timeout_s=WAIT_S, read_tables=held)
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    first: list[bytes] = []
    first_done = trio.Event()

    async def ask_first() -> None:
        first.append(await _gated_answer(port))
        first_done.set()

    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_asgi, echo, [listener], admit=gate))
            try:
                nursery.start_soon(ask_first)
                await trio.to_thread.run_sync(held.held.wait, WAIT_S)
                second = await _gated_answer(port)
                assert first == []  # still held
            finally:
                held.release.set()
            await first_done.wait()
            nursery.cancel_scope.cancel()
    assert status_of(second) == 200
    assert status_of(first[0]) == 200


def test_an_ipv4_peer_may_be_listed_in_tcp_or_ipv4_mapped_in_tcp6() -> None:
    """Our IPv4 socket or an IPv6 one bound to a mapped address: the client's end is in
    ``tcp`` if its socket is IPv4, in ``tcp6`` (mapped) if IPv6 (x86 byte order)."""
    if os.uname().machine not in ("x86_64", "i686", "aarch64"):
        pytest.skip("byte order of the fixture rows")
    v4 = (
        (TCP_TABLE, ("0100007F:A000", "0100007F:1F90")),
        (
            TCP6_TABLE,
            ("0000000000000000FFFF00000100007F:A000", "0000000000000000FFFF00000100007F:1F90"),
        ),
    )
    assert client_rows(("127.0.0.1", 8080), ("127.0.0.1", 40960)) == v4
    assert client_rows(("::ffff:127.0.0.1", 8080, 0, 0), ("::ffff:127.0.0.1", 40960, 0, 0)) == v4
    v6 = (
        (
            TCP6_TABLE,
            ("00000000000000000000000001000000:A000", "00000000000000000000000001000000:1F90"),
        ),
    )
    assert client_rows(("::1", 8080, 0, 0), ("::1", 40960, 0, 0)) == v6


async def test_a_peer_on_an_ipv6_socket_reaching_our_ipv4_port_mapped_is_known() -> None:
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    client = trio.socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    client.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    with client:
        await client.connect(("::ffff:127.0.0.1", port))
        server = await listener.accept()
        async with server:
            assert await peer_uid(server.socket) == ME
    await listener.aclose()


async def test_an_ipv4_peer_of_our_ipv6_socket_bound_mapped_is_known() -> None:
    sock = trio.socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    await sock.bind(("::ffff:127.0.0.1", 0))
    sock.listen()
    listener = trio.SocketListener(sock)
    port = sock.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listener.accept()
    async with client, server, listener:
        assert server.socket.family == socket.AF_INET6
        assert await peer_uid(server.socket) == ME


async def _accepted_after_reset() -> trio.SocketStream:
    """A connection whose client reset it (SO_LINGER 0) before we accepted it: the kernel
    still hands it to ``accept``, and it no longer has a peer name."""
    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    client.close()  # an RST, not a FIN
    with trio.fail_after(WAIT_S):
        server = await listener.accept()
    await listener.aclose()
    return server


async def test_a_peer_that_reset_its_connection_before_the_gate_has_no_uid() -> None:
    server = await _accepted_after_reset()
    async with server:
        assert await peer_uid(server.socket) is None


async def test_a_peer_that_reset_its_connection_before_the_gate_is_refused_not_raised() -> None:
    admit = uid_gate(lambda: frozenset({ME}))
    server = await _accepted_after_reset()
    async with server:
        assert await admit(server) == "the peer's uid cannot be known"


async def test_the_face_keeps_serving_after_a_peer_reset_its_connection_before_the_gate() -> None:
    """Before, the gate's OSError (no peer name) left the connection's task and took the
    face's whole server down with it."""
    gate = uid_gate(lambda: frozenset({ME}))
    reset = trio.Event()

    async def admit_once_reset(stream: trio.SocketStream) -> str | int:
        await reset.wait()  # the gate runs after the client is gone, deterministically
        return await gate(stream)

    (listener,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listener.socket.getsockname()[1]
    with trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve_asgi, echo, [listener], admit=admit_once_reset))
            client = socket.create_connection(("127.0.0.1", port))
            client.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            client.close()  # an RST: accepted before or after it, the peer has no name
            reset.set()
            answer = await _gated_answer(port)
            nursery.cancel_scope.cancel()
    assert status_of(answer) == 200

"""Who may use the face over HTTP: the daemon socket's uid rule (``socket.allowed_uids``, else
our own uid), judged from the kernel's word on the peer, for a loopback port and a Unix socket.

Before, the loopback port served any local user, who then reached the daemon's ops (exec
included) as the face's uid, past the allow-list the daemon's own socket enforces."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from functools import partial

import httpx2
import pytest
import trio

from csp_web.config import Config
from csp_web.mcp_face.asgi import serve_asgi
from csp_web.mcp_face.peers import peer_uid, uid_gate, uid_in_table

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
        assert peer_uid(server.socket) == ME


async def test_a_unix_socket_peer_is_known_by_its_credentials() -> None:
    ours, theirs = trio.socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        assert peer_uid(ours) == ME


def test_a_peer_gone_from_the_kernels_table_has_no_uid() -> None:
    rows = [
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n",
        "   0: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000  1000 0 1\n",
    ]
    assert uid_in_table(rows, ("0100007F:A000", "0100007F:1F90")) == 1000
    assert uid_in_table(rows, ("0100007F:A001", "0100007F:1F90")) is None


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

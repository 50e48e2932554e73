"""The MCP face over streamable HTTP, on a loopback port and on a Unix socket, driven by the
SDK's own client (``streamable_http_client``)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial

import httpx2
import trio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from csp_web.app.compose import open_in_process_daemon
from csp_web.config import Config
from csp_web.mcp_face.serve import FaceOptions, serve_mcp_face

from .conftest import PAGE_TITLE, WAIT_S, WebDaemon, catalogue_tools, face_command, face_env


@asynccontextmanager
async def running_face(
    daemon: WebDaemon, http: str, config: Config | None = None
) -> AsyncIterator[str]:
    """The face, in this process, a client of ``daemon``, serving HTTP at ``http``; yields
    where it listens."""
    options = FaceOptions(socket_path=daemon.socket_path, http=http)
    async with trio.open_nursery() as nursery:
        serving = partial(serve_mcp_face, in_process=open_in_process_daemon)
        where = await nursery.start(serving, config or Config(), options)
        yield where
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def http_client(where: str) -> AsyncIterator[Client]:
    """The SDK's client of the face listening at ``where`` (a URL or ``unix:<path>``)."""
    async with AsyncExitStack() as stack:
        if where.startswith("unix:"):
            transport = httpx2.AsyncHTTPTransport(uds=where.removeprefix("unix:"))
            http = await stack.enter_async_context(httpx2.AsyncClient(transport=transport))
            streams = streamable_http_client("http://localhost/mcp", http_client=http)
        else:
            streams = streamable_http_client(where)
        yield await stack.enter_async_context(Client(streams))


async def _fetch_title(client: Client, url: str) -> str:
    result = await client.call_tool("web_fetch", {"url": url})
    assert isinstance(result, CallToolResult)
    assert not result.is_error
    assert result.structured_content is not None
    title: str = result.structured_content["TITLE"]
    return title


async def test_http_on_a_loopback_port_lists_and_calls_the_tools(web_daemon: WebDaemon) -> None:
    with trio.fail_after(WAIT_S):
        async with running_face(web_daemon, "0") as where, http_client(where) as client:
            listed = await client.list_tools()
            title = await _fetch_title(client, web_daemon.url())
    assert where.startswith("http://127.0.0.1:")
    assert where.endswith("/mcp")
    assert "web_fetch" in [tool.name for tool in listed.tools]
    assert title == PAGE_TITLE
    audited = [(r.get("op"), r.get("target")) for r in web_daemon.records("audit")]
    assert audited[-1] == ("fetch", web_daemon.url())


async def test_http_on_a_unix_socket_lists_and_calls_the_tools(
    web_daemon: WebDaemon, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "mcp", "face.sock")
    with trio.fail_after(WAIT_S):
        async with running_face(web_daemon, path) as where, http_client(where) as client:
            mode = os.stat(path).st_mode & 0o777
            listed = await client.list_tools()
            title = await _fetch_title(client, web_daemon.url())
    assert (where, mode) == (f"unix:{path}", 0o600)
    assert "web_fetch" in [tool.name for tool in listed.tools]
    assert title == PAGE_TITLE


async def test_http_refuses_other_paths_and_foreign_hosts(web_daemon: WebDaemon) -> None:
    with trio.fail_after(WAIT_S):
        async with running_face(web_daemon, "0") as where, httpx2.AsyncClient() as http:
            other = await http.get(where.removesuffix("/mcp") + "/other")
            foreign = await http.post(
                where,
                headers={"host": "evil.example", "content-type": "application/json"},
                content=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
            )
    assert other.status_code == 404
    assert foreign.status_code == 421  # the SDK's DNS-rebinding check on Host


async def test_the_http_face_process_prints_its_url_and_stops_on_sigterm(
    web_daemon: WebDaemon,
) -> None:
    command, argv = face_command("--socket", web_daemon.socket_path, "--http", "0")
    process = await trio.lowlevel.open_process(
        [command, *argv], stdout=subprocess.PIPE, env={**os.environ, **face_env()}
    )
    assert process.stdout is not None
    try:
        with trio.fail_after(WAIT_S):
            printed = b""
            while not printed.endswith(b"\n"):
                printed += await process.stdout.receive_some(256)
            async with http_client(printed.decode().strip()) as client:
                listed = await client.list_tools()
            process.send_signal(signal.SIGTERM)
            code = await process.wait()
    finally:
        process.kill()
        await process.stdout.aclose()
    assert [tool.name for tool in listed.tools] == catalogue_tools("WEB")
    assert code == 0


async def _post_tools_list(http: httpx2.AsyncClient, where: str, **headers: str) -> int:
    sent = {"content-type": "application/json", "accept": "application/json", **headers}
    answer = await http.post(
        where, headers=sent, content=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    )
    return answer.status_code


async def test_http_admits_only_its_own_origin_and_host_not_another_loopback_port(
    web_daemon: WebDaemon,
) -> None:
    """Issue 22: ``Origin: http://127.0.0.1:<any port>`` passed, so a page served by any other
    local web app could call the tools; an origin is scheme, host and port together."""
    with trio.fail_after(WAIT_S):
        async with running_face(web_daemon, "0") as where, httpx2.AsyncClient() as http:
            port = int(where.removeprefix("http://127.0.0.1:").removesuffix("/mcp"))
            other = port + 1 if port < 65535 else port - 1
            statuses = {
                name: await _post_tools_list(http, where, **headers)
                for name, headers in {
                    "own": {"origin": f"http://127.0.0.1:{port}"},
                    "own-localhost": {"origin": f"http://localhost:{port}"},
                    "none": {},
                    "other-port": {"origin": f"http://127.0.0.1:{other}"},
                    "other-port-localhost": {"origin": f"http://localhost:{other}"},
                    "https": {"origin": f"https://127.0.0.1:{port}"},
                    "suffix": {"origin": f"http://127.0.0.1:{port}.evil.example"},
                    "host-other-port": {"host": f"127.0.0.1:{other}"},
                }.items()
            }
    assert statuses == {
        "own": 200,
        "own-localhost": 200,
        "none": 200,
        "other-port": 403,
        "other-port-localhost": 403,
        "https": 403,
        "suffix": 403,
        "host-other-port": 421,
    }


async def test_http_on_a_unix_socket_refuses_a_loopback_port_origin(
    web_daemon: WebDaemon, sock_dir: str
) -> None:
    path = os.path.join(sock_dir, "mcp", "face.sock")
    transport = httpx2.AsyncHTTPTransport(uds=path)
    with trio.fail_after(WAIT_S):
        async with running_face(web_daemon, path), httpx2.AsyncClient(transport=transport) as http:
            url = "http://localhost/mcp"
            own = await _post_tools_list(http, url, origin="http://localhost")
            port = await _post_tools_list(http, url, origin="http://localhost:8080")
    assert (own, port) == (200, 403)


async def _raw_get(where: str, accept: str) -> bytes:
    """A GET of /mcp on a raw connection: the head of what the face answers."""
    port = int(where.removeprefix("http://127.0.0.1:").removesuffix("/mcp"))
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        request = (
            f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: {accept}\r\n"
            "Connection: close\r\n\r\n"
        )
        await stream.send_all(request.encode())
        received = b""
        while b"\r\n\r\n" not in received and (chunk := await stream.receive_some()):
            received += chunk
    return received


async def test_a_get_of_the_endpoint_is_answered_405_at_once(web_daemon: WebDaemon) -> None:
    """Streamable HTTP: a server that offers no SSE stream answers GET with 405. Before,
    the stateless endpoint held the GET open, sending nothing, for 30 s; the bound here is
    far inside that."""
    async with running_face(web_daemon, "0") as where:
        with trio.fail_after(5):
            heads = [await _raw_get(where, accept) for accept in ("text/event-stream", "*/*")]
    for head in heads:
        status, *headers = head.split(b"\r\n\r\n")[0].split(b"\r\n")
        assert status == b"HTTP/1.1 405 "
        assert b"allow: POST" in headers

"""A small real HTTP CONNECT proxy for the egress tests: it records every request line it is
asked, answers ``refuse`` when set, else opens TCP to the target it was given and splices
bytes both ways until either side closes."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

MAX_HEAD_BYTES = 8192


@dataclass
class ConnectProxy:
    """A running proxy on 127.0.0.1; ``asked`` holds each request line, in order."""

    port: int = 0
    asked: list[str] = field(default_factory=list)
    refuse: int | None = None  # a status to answer instead of tunnelling

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._serve, listeners)

    async def _serve(self, client: trio.SocketStream) -> None:
        try:
            head = await _read_head(client)
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.asked.append(line)
            method, target, _ = line.split(" ", 2)
            if self.refuse is not None or method != "CONNECT":
                status = self.refuse or 405
                await client.send_all(f"HTTP/1.1 {status} No\r\nContent-Length: 0\r\n\r\n".encode())
                return
            host, _, port = target.rpartition(":")
            upstream = await trio.open_tcp_stream(host.strip("[]"), int(port))
            await client.send_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            async with upstream, trio.open_nursery() as nursery:
                nursery.start_soon(_pump, client, upstream, nursery.cancel_scope)
                nursery.start_soon(_pump, upstream, client, nursery.cancel_scope)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError, ValueError):
            pass
        finally:
            await trio.aclose_forcefully(client)


async def _read_head(stream: trio.SocketStream) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head and len(head) < MAX_HEAD_BYTES:
        chunk = await stream.receive_some(1024)
        if not chunk:
            break
        head += chunk
    return head


async def _pump(
    source: trio.SocketStream, sink: trio.SocketStream, scope: trio.CancelScope
) -> None:
    try:
        while chunk := await source.receive_some(65536):
            await sink.send_all(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    scope.cancel()


async def start_proxy(nursery: trio.Nursery) -> ConnectProxy:
    proxy = ConnectProxy()
    await nursery.start(proxy.serve)
    return proxy

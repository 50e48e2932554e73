"""Issue 8.3: the response header block is capped however it arrives, whole in one write or
piece by piece, over TLS or plain TCP; the cap is ``max_header_bytes``, tested at N and N+1.

The server here is raw TCP (optionally TLS) so the test decides every byte and every write:
a block of exactly N bytes is the status line, the fields and the blank line."""

from __future__ import annotations

import functools
import ssl
from dataclasses import dataclass

import pytest
import trio
import trustme

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig, open_guarded_client

from ._dns import FixedResolver
from ._origin import WAIT_S

CAP = 100 * 1024  # the default max_header_bytes
STATUS_LINE = b"HTTP/1.1 200 OK\r\n"
BODY = b"ok"


def header_block(size: int) -> bytes:
    """A header block of exactly ``size`` bytes: status line, Content-Length, one filler field."""
    fixed = STATUS_LINE + b"content-length: 2\r\n" + b"x-fill: " + b"\r\n" + b"\r\n"
    filler = b"a" * (size - len(fixed))
    block = STATUS_LINE + b"content-length: 2\r\n" + b"x-fill: " + filler + b"\r\n\r\n"
    assert len(block) == size
    return block


@dataclass
class RawServer:
    """Answers every request with ``block`` + BODY, in one write or in ``piece``-byte writes."""

    block: bytes = b""
    piece: int | None = None
    port: int = 0

    async def serve(
        self,
        *,
        ssl_context: ssl.SSLContext | None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        tcp = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = tcp[0].socket.getsockname()[1]
        listeners: list[trio.abc.Listener[trio.abc.Stream]] = list(tcp)
        if ssl_context is not None:
            listeners = [trio.SSLListener(one, ssl_context, https_compatible=True) for one in tcp]
        task_status.started()
        await trio.serve_listeners(self._answer, listeners)

    async def _answer(self, stream: trio.abc.Stream) -> None:
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                request += await stream.receive_some(65536)
            data = self.block + BODY
            if self.piece is None:
                await stream.send_all(data)
            else:
                for start in range(0, len(data), self.piece):
                    await stream.send_all(data[start : start + self.piece])
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client refused the block and hung up, as it should
        finally:
            await trio.aclose_forcefully(stream)


@pytest.fixture(params=["http", "https"])
def scheme(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server(nursery: trio.Nursery, ca: trustme.CA, scheme: str) -> RawServer:
    context = None
    if scheme == "https":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("origin.test").configure_cert(context)
    served = RawServer()
    await nursery.start(functools.partial(served.serve, ssl_context=context))
    return served


async def fetch_block(
    server: RawServer, scheme: str, trust: ssl.SSLContext, max_header_bytes: int = CAP
) -> bytes:
    """The body of a fetch from ``server``; raises the client's OpError."""
    config = GuardConfig(
        allow_http=True,
        allowed_ports=(server.port,),
        allow_private=("127.0.0.1",),
        max_header_bytes=max_header_bytes,
    )
    dns = FixedResolver({"origin.test": ["127.0.0.1"]})
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as client:
        with trio.fail_after(WAIT_S):
            result = await client.fetch(f"{scheme}://origin.test:{server.port}/")
    return result.body


async def refusal(
    server: RawServer, scheme: str, trust: ssl.SSLContext, max_header_bytes: int = CAP
) -> str:
    with pytest.raises(OpError) as caught:
        await fetch_block(server, scheme, trust, max_header_bytes)
    return f"{caught.value.code}:{caught.value.detail}"


async def test_a_header_block_of_exactly_the_cap_in_one_write_is_accepted(
    server: RawServer, scheme: str, trust: ssl.SSLContext
) -> None:
    server.block = header_block(CAP)
    assert await fetch_block(server, scheme, trust) == BODY


async def test_a_header_block_one_byte_over_the_cap_in_one_write_is_too_large(
    server: RawServer, scheme: str, trust: ssl.SSLContext
) -> None:
    server.block = header_block(CAP + 1)
    assert await refusal(server, scheme, trust) == "too_large:max_header_bytes"


@pytest.mark.parametrize("size", [130_000, 150_000, 164_000])
async def test_a_header_block_of_150_kb_in_one_write_is_too_large(
    server: RawServer, scheme: str, trust: ssl.SSLContext, size: int
) -> None:
    server.block = header_block(size)
    assert await refusal(server, scheme, trust) == "too_large:max_header_bytes"


async def test_a_header_block_arriving_piecemeal_gets_the_same_refusal(
    server: RawServer, scheme: str, trust: ssl.SSLContext
) -> None:
    """Past 100 KiB still incomplete, h11 itself refuses (status hint 431): same code."""
    server.block, server.piece = header_block(300_000), 1000
    assert await refusal(server, scheme, trust) == "too_large:max_header_bytes"


async def test_a_configured_cap_applies_at_n_and_n_plus_one(
    server: RawServer, scheme: str, trust: ssl.SSLContext
) -> None:
    server.block = header_block(1000)
    assert await fetch_block(server, scheme, trust, max_header_bytes=1000) == BODY
    assert await refusal(server, scheme, trust, max_header_bytes=999) == (
        "too_large:max_header_bytes"
    )


@pytest.mark.parametrize("value", [0, CAP + 1])
def test_a_cap_outside_what_httpcore_buffers_is_refused_at_load(value: int) -> None:
    with pytest.raises(ValueError, match="max_header_bytes"):
        GuardConfig(max_header_bytes=value)

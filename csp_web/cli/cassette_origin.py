"""The local origin a cassette replay serves its exchanges from: the shared h11 server
(``csp_web.net.h11_server``) on 127.0.0.1, plain HTTP on one port and HTTPS on another,
with a certificate for every recorded host from a CA made for this replay alone
(``ReplayTLS``), and the resolver that maps those hosts, and only those, to it
(``CassetteResolver``).

Each request is matched by method, URL (scheme of the port, Host header, target) and body
digest, redacted as the cassette was; the key's recorded exchanges are served in order, and
a request with none left is answered with ``MISS_HEADER``. What no request took is
``unused``: the transcript no longer makes a request it made when recorded.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
import tempfile
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

import h11
import httpx
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from csp_web.cli.cassette import FRAMING_HEADERS, Exchange, Key, Redactor, request_key
from csp_web.cli.cassette_tap import MISS_HEADER
from csp_web.net.h11_server import BadRequest, read_request, send, serve_h11

# A replay's requests are its own ops' (fetch bodies, API posts): far under these.
_MAX_BODY_BYTES = 64 * 1024 * 1024
_MAX_CONNECTIONS = 256


class CassetteResolver:
    """The replay's DNS: each recorded host name is 127.0.0.1; any other name does not exist."""

    def __init__(self, hosts: Iterable[str]) -> None:
        self._hosts = frozenset(hosts)

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        await trio.lowlevel.checkpoint()
        if host not in self._hosts:
            raise socket.gaierror(socket.EAI_NONAME, "not in the cassette")
        return ["127.0.0.1"]


@dataclass(frozen=True)
class ReplayTLS:
    """A CA made for one replay and a server context whose certificate it signed for
    ``hosts``; ``client`` trusts that CA and nothing else."""

    server: ssl.SSLContext
    client: ssl.SSLContext


def make_replay_tls(hosts: Iterable[str]) -> ReplayTLS:
    """Issue the replay's CA and its certificate for ``hosts`` (a name or an address each)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, leaf_key = (
        ec.generate_private_key(ec.SECP256R1()),
        ec.generate_private_key(ec.SECP256R1()),
    )
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "csp-web replay CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "csp-web replay")]))
        .issuer_name(ca_name)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(list(_names(hosts))), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="csp-web-replay-tls-") as folder:
        key_path = os.path.join(folder, "origin.pem")  # 0700 folder; gone once loaded
        with open(key_path, "wb") as file:
            file.write(
                leaf_key.private_bytes(
                    pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
            file.write(leaf.public_bytes(pem))
        server.load_cert_chain(key_path)
    client = ssl.create_default_context(cadata=ca.public_bytes(pem).decode("ascii"))
    return ReplayTLS(server, client)


def _names(hosts: Iterable[str]) -> Iterator[x509.GeneralName]:
    for host in sorted(set(hosts)):
        try:
            yield x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            yield x509.DNSName(host)


@dataclass
class CassetteOrigin:
    """Serves ``exchanges``; ``ports`` maps "http" and "https" to their ports once started."""

    exchanges: Sequence[Exchange]
    redactor: Redactor
    ports: dict[str, int] = field(default_factory=dict)
    _queues: dict[Key, deque[Exchange]] = field(default_factory=dict)
    _taken: trio.Event = field(default_factory=trio.Event)  # set at each exchange taken

    def __post_init__(self) -> None:
        for exchange in self.exchanges:
            self._queues.setdefault(exchange.key, deque()).append(exchange)

    def unused(self) -> list[Exchange]:
        """The recorded exchanges no request has taken, in recorded order."""
        left = {id(exchange) for queue in self._queues.values() for exchange in queue}
        return [exchange for exchange in self.exchanges if id(exchange) in left]

    async def wait_all_taken(self) -> None:
        """Return once every recorded exchange has been taken: a replay waits for the
        requests its daemon makes in the background after a reply (search's prefetch) before
        it calls the rest unused. The caller bounds the wait."""
        while self.unused():
            self._taken = trio.Event()
            await self._taken.wait()

    async def serve(
        self, tls: ssl.SSLContext, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Listen on two 127.0.0.1 ports (plain, TLS) and serve until cancelled."""
        plain = await trio.open_tcp_listeners(0, host="127.0.0.1")
        secure = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.ports["http"] = plain[0].socket.getsockname()[1]
        self.ports["https"] = secure[0].socket.getsockname()[1]
        tls_listeners = [trio.SSLListener(one, tls, https_compatible=True) for one in secure]
        async with trio.open_nursery() as nursery:
            for scheme, listeners in (("http", plain), ("https", tls_listeners)):
                serving = partial(serve_h11, listeners, self._handler(scheme))
                await nursery.start(partial(serving, max_connections=_MAX_CONNECTIONS))
            task_status.started()

    def _handler(self, scheme: str) -> Callable[[trio.abc.Stream], Awaitable[None]]:
        async def handle(stream: trio.abc.Stream) -> None:
            conn = h11.Connection(h11.SERVER)
            try:
                while await self._serve_one(scheme, conn, stream):
                    conn.start_next_cycle()
            except (
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                h11.ProtocolError,
                BadRequest,
            ):
                pass  # the client went away mid-exchange; its op reports what it saw
            finally:
                await trio.aclose_forcefully(stream)

        return handle

    async def _serve_one(self, scheme: str, conn: h11.Connection, stream: trio.abc.Stream) -> bool:
        read = await read_request(stream, conn, max_body_bytes=_MAX_BODY_BYTES)
        if read is None:
            return False
        request, body = read
        exchange = self._take(scheme, request, body)
        if exchange is not None and exchange.truncated:
            await self._answer_cut(conn, stream, exchange)
            return False  # the connection closes where the client stopped reading
        await self._answer(conn, stream, exchange, head=request.method == b"HEAD")
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    def _take(self, scheme: str, request: h11.Request, body: bytes) -> Exchange | None:
        host = dict(request.headers).get(b"host", b"").decode("latin-1")
        url = str(httpx.URL(f"{scheme}://{host}{request.target.decode('latin-1')}"))
        key = request_key(request.method.decode(), self.redactor.url(url), self.redactor.body(body))
        queue = self._queues.get(key)
        if not queue:
            return None
        self._taken.set()
        return queue.popleft()

    async def _answer_cut(
        self, conn: h11.Connection, stream: trio.abc.Stream, exchange: Exchange
    ) -> None:
        """The recorded head (its Content-Length too) and the bytes the client had read."""
        head = h11.Response(status_code=exchange.status, headers=list(exchange.headers))
        body = [h11.Data(data=exchange.body)] if exchange.body else []
        await send(stream, conn, head, *body)

    async def _answer(
        self,
        conn: h11.Connection,
        stream: trio.abc.Stream,
        exchange: Exchange | None,
        *,
        head: bool,
    ) -> None:
        if exchange is None:
            status, headers, body = 404, [(MISS_HEADER, "1")], b""
        else:
            status, body = exchange.status, exchange.body
            # A hand-written cassette may carry framing; the origin frames what it serves.
            headers = [(k, v) for k, v in exchange.headers if k.lower() not in FRAMING_HEADERS]
        if status not in (204, 304):  # RFC 9110 §8.6: these carry no Content-Length of a body
            headers.append(("content-length", str(len(body))))
        response = h11.Response(status_code=status, headers=headers)
        data = [h11.Data(data=body)] if body and not head and status not in (204, 304) else []
        await send(stream, conn, response, *data, h11.EndOfMessage())

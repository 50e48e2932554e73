"""How nodes reach the daemon: their own Unix socket (peer uid checked, SO_PEERCRED) and,
off by default, a TCP listener with TLS whose certificate nodes pin by SHA-256 (N-1).

The node socket is never the clients' socket: a connection here is served only by the node
link loop, so a node cannot send a task to the daemon's ops (N-3).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import os
import ssl
from collections.abc import Awaitable, Callable

import trio

from csp_web.core.transports.unix import open_unix_listener, peer_credentials
from specialists.node.config import NodesConfig, NodeTlsConfig

log = logging.getLogger(__name__)
LinkHandler = Callable[[trio.abc.Stream, str], Awaitable[None]]


def node_uids(config: NodesConfig) -> frozenset[int]:
    """Who may connect to the node socket: ``allowed_uids``, else the daemon's own uid."""
    return frozenset(config.allowed_uids) or frozenset({os.geteuid()})


async def serve_node_unix(
    path: str,
    config: NodesConfig,
    handler: LinkHandler,
    *,
    handler_nursery: trio.Nursery,
    task_status: trio.TaskStatus[list[trio.SocketListener]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept node connections at ``path`` (0600 in a 0700 folder) until cancelled."""
    listener = await open_unix_listener(path, backlog=128)

    async def accept(stream: trio.SocketStream) -> None:
        pid, uid = peer_credentials(stream.socket)
        if uid not in node_uids(config):
            log.warning("node socket: refused uid %d pid %d", uid, pid)
            await trio.aclose_forcefully(stream)
            return
        await handler(stream, f"uid:{uid}")

    try:
        log.info("nodes: listening on %s", path)
        await trio.serve_listeners(
            accept, [listener], handler_nursery=handler_nursery, task_status=task_status
        )
    finally:
        with trio.CancelScope(shield=True):
            await listener.aclose()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


async def serve_node_tls(
    tls: NodeTlsConfig,
    context: ssl.SSLContext,
    handler: LinkHandler,
    *,
    handler_nursery: trio.Nursery,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept TLS node connections on ``tls.host``:``tls.port`` until cancelled; started
    with the address actually bound (``host:port``, port 0 picks one)."""
    listeners = await trio.open_tcp_listeners(tls.port, host=tls.host)

    async def accept(tcp: trio.SocketStream) -> None:
        # The handshake runs on the link's first read, under its hello deadline (N-7).
        host = tcp.socket.getpeername()[0]
        await handler(trio.SSLStream(tcp, context, server_side=True), f"ip:{host}")

    sockname = listeners[0].socket.getsockname()
    address = f"{sockname[0]}:{sockname[1]}"
    log.info("nodes: TLS listening on %s", address)
    await trio.serve_listeners(
        accept,
        list(listeners),
        handler_nursery=handler_nursery,
        task_status=_Relabel(task_status, address),
    )


class _Relabel:
    """A task status that reports ``value`` whatever the callee reports."""

    def __init__(self, status: trio.TaskStatus[str], value: str) -> None:
        self.status = status
        self.value = value

    def started(self, value: object = None) -> None:
        self.status.started(self.value)


def fingerprint(cert_pem: bytes) -> str:
    """The SHA-256 of a PEM certificate's DER form, as nodes pin it (64 hex digits)."""
    der = ssl.PEM_cert_to_DER_cert(cert_pem.decode("ascii"))
    return hashlib.sha256(der).hexdigest()


def ensure_certificate(directory: str) -> tuple[str, str]:
    """(cert, key) paths under ``directory``, making a self-signed pair (EC P-256, ten
    years) the first time; the key is written 0600 in a 0700 folder."""
    cert_path = os.path.join(directory, "cert.pem")
    key_path = os.path.join(directory, "key.pem")
    if os.path.exists(cert_path) and os.path.exists(key_path):
        return cert_path, key_path
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    os.makedirs(directory, mode=0o700, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "csp-web nodes")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
        .sign(key, hashes.SHA256())
    )
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _write_private(key_path, key_bytes)
    _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    log.warning("nodes: made a self-signed TLS certificate, sha256 %s", _file_print(cert_path))
    return cert_path, key_path


def _file_print(path: str) -> str:
    with open(path, "rb") as file:
        return fingerprint(file.read())


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def server_context(cert_path: str, key_path: str) -> tuple[ssl.SSLContext, str]:
    """A TLS 1.2+ server context for the node listener and the certificate's fingerprint."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    return context, _file_print(cert_path)


def pinned_client_context() -> ssl.SSLContext:
    """The node's side: no CA check (the certificate is self-signed); the caller compares
    the peer certificate's SHA-256 with the pinned one right after the handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context

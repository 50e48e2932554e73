"""The seam where httpx, httpcore, TLS and OS errors become OpError, by one table.

Order matters: the first row whose type matches wins, so subclasses come before their bases
(as in httpx's own ``HTTPCORE_EXC_MAP``). Details are fixed words, never exception text, which
can carry addresses the deny table is meant to hide.
"""

from __future__ import annotations

import ssl

import h11
import httpcore
import httpx

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

ERROR_TABLE: tuple[tuple[type[BaseException], ErrorCode, str], ...] = (
    (httpx.TimeoutException, ErrorCode.FETCH_FAILED, "timeout"),  # seed 000's detail
    (httpcore.TimeoutException, ErrorCode.FETCH_FAILED, "timeout"),
    (httpx.ConnectError, ErrorCode.FETCH_FAILED, "connect_failed"),
    (httpcore.ConnectError, ErrorCode.FETCH_FAILED, "connect_failed"),
    (httpx.RemoteProtocolError, ErrorCode.FETCH_FAILED, "protocol_error"),
    (httpx.ReadError, ErrorCode.FETCH_FAILED, "read_failed"),
    (httpx.WriteError, ErrorCode.FETCH_FAILED, "write_failed"),
    (httpx.InvalidURL, ErrorCode.URL_REJECTED, "invalid"),
    (httpx.UnsupportedProtocol, ErrorCode.URL_REJECTED, "scheme-not-allowed"),
    (httpx.HTTPError, ErrorCode.FETCH_FAILED, "http_error"),
    (httpcore.NetworkError, ErrorCode.FETCH_FAILED, "network_error"),
    (ssl.SSLError, ErrorCode.FETCH_FAILED, "tls_failed"),
    (OSError, ErrorCode.FETCH_FAILED, "network_error"),
)


# Failures that prove a request never left the daemon: the guard refused it, or no connection
# was made (no address; nothing accepted it). Any other failure may come after the server
# read it: a model may bill the tokens it generated for an answer that never arrived.
_NEVER_SENT_CODES = frozenset(
    {
        ErrorCode.URL_REJECTED,
        ErrorCode.SSRF_BLOCKED,
        ErrorCode.DNS_FAILED,
        ErrorCode.ROBOTS_DISALLOWED,
    }
)
_NEVER_SENT_DETAILS = frozenset(
    {(ErrorCode.FETCH_FAILED, "connect_failed"), (ErrorCode.PROXY_FAILED, "unreachable")}
)


def never_sent(error: OpError) -> bool:
    """Whether ``error`` proves its request was never sent (refused before it left, or no
    connection made), so nothing it asked for can have been billed."""
    return error.code in _NEVER_SENT_CODES or (error.code, error.detail) in _NEVER_SENT_DETAILS


def translate(exc: Exception) -> OpError | None:
    """The OpError ``exc`` stands for, or None when it is not a network error (a bug)."""
    if isinstance(exc, OpError):
        return exc
    if _header_block_too_long(exc):
        return OpError(ErrorCode.TOO_LARGE, "max_header_bytes")
    for kind, code, detail in ERROR_TABLE:
        if isinstance(exc, kind):
            if _failed_tls_verification(exc):
                detail = "tls_verify_failed"
            return OpError(code, detail)
    return None


def _failed_tls_verification(exc: BaseException) -> bool:
    """Whether a certificate check lies somewhere in ``exc``'s cause chain (httpcore wraps
    ssl's error as trio.BrokenResourceError, then ConnectError)."""
    return any(isinstance(link, ssl.SSLCertVerificationError) for link in _chain(exc))


def _header_block_too_long(exc: BaseException) -> bool:
    """Whether h11 refused a header block still arriving past its buffer cap: its error
    carries status hint 431 (httpcore wraps it, then httpx), the same refusal as
    ``body.check_header_bytes`` makes of a block that arrived whole."""
    return any(
        isinstance(link, h11.RemoteProtocolError) and link.error_status_hint == 431
        for link in _chain(exc)
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes and contexts, each once."""
    links: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not link for link in links):
        links.append(current)
        current = current.__cause__ or current.__context__
    return links

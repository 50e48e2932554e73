"""The server name of a TLS ClientHello, read from a tunnel's first bytes (csp_web.net.tls_sni)."""

from __future__ import annotations

import contextlib
import ssl

from csp_web.net.tls_sni import MAX_HELLO_BYTES, Hello, read_hello


def _hello(name: str | None) -> bytes:
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


def _split(record: bytes, at: int) -> bytes:
    """One TLS record's handshake payload carried in two records, cut at ``at``."""
    payload = record[5:]
    head = record[:3]
    first, second = payload[:at], payload[at:]
    return b"".join(head + len(part).to_bytes(2, "big") + part for part in (first, second))


def test_the_name_asked_for_is_read_lower_case_whole_or_split_across_records() -> None:
    hello = _hello("Registry.Test")
    assert read_hello(hello) == Hello(True, "registry.test")
    assert read_hello(_split(hello, 40)) == Hello(True, "registry.test")


def test_a_hello_without_a_name_is_complete_with_none() -> None:
    assert read_hello(_hello(None)) == Hello(True, None)


def test_a_partial_hello_asks_for_more_until_its_cap() -> None:
    hello = _hello("registry.test")
    assert read_hello(hello[:3]) == Hello(False)
    assert read_hello(hello[:100]) == Hello(False)
    huge = b"\x16\x03\x01\xff\xff" + b"\x01" * (MAX_HELLO_BYTES - 5)
    assert read_hello(huge) == Hello(True)


def test_bytes_that_are_no_client_hello_carry_no_name() -> None:
    assert read_hello(b"GET / HTTP/1.1\r\n\r\n") == Hello(True)
    assert read_hello(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00") == Hello(True)  # a ServerHello
    garbled = b"\x16\x03\x01\x00\x08\x01\x00\x00\x04\xff\xff\xff\xff"
    assert read_hello(garbled) == Hello(True)


def test_a_name_that_is_not_ascii_is_read_marked_never_dropped() -> None:
    hello = _hello("registry.test")
    odd = hello.replace(b"registry.test", "registr\u00ff.test".encode("latin-1"))
    assert read_hello(odd) == Hello(True, "registr\ufffd.test")

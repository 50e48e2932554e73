"""Purpose lanes of the guard proxy (csp_web.net.proxy_lanes): a Unix socket that reaches only
the destinations it was opened with, still through the whole guard, with a connection cap."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import socket
import ssl

import pytest
import trio

from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import MAX_LANE_REFUSALS, GuardProxy, Lane
from csp_web.net.proxy_lanes import NOT_IN_RULE, SNI_MISMATCH, LanePolicy
from protocol import ErrorCode

from ._dns import FixedResolver
from ._origin import WAIT_S, Origin

LOCAL = GuardConfig(allow_private=("127.0.0.1/32",))  # the tests' origins live on loopback


async def _ask(path: str, request: bytes) -> bytes:
    """``request`` sent on the Unix socket at ``path``, and all that came back before it closed."""
    received = b""
    async with await trio.open_unix_socket(path) as stream:
        await stream.send_all(request)
        try:
            while data := await stream.receive_some(65536):
                received += data
        except trio.BrokenResourceError:
            pass
    return received


def _policy(*allow: tuple[str, int], cap: int = 8, uid: int | None = None) -> LanePolicy:
    return LanePolicy(frozenset(allow), max_connections=cap, uid=uid)


@pytest.fixture
async def http_origin(nursery: trio.Nursery) -> Origin:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    return origin


async def test_a_purpose_lane_forwards_to_a_listed_name_through_the_guard(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", http_origin.port))) as lane:
            url = http_origin.url("registry.test")
            answer = await _ask(path, f"GET {url} HTTP/1.1\r\nHost: registry.test\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 200")
    assert http_origin.paths() == ["/page"]
    assert lane.refusals_since(0) == []


async def test_a_purpose_lane_tunnels_connect_to_a_listed_name(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    target = f"registry.test:{http_origin.port}"
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", http_origin.port))):
            connect = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"
            request = "GET /page HTTP/1.1\r\nHost: registry.test\r\nConnection: close\r\n\r\n"
            answer = await _ask(path, (connect + request).encode())
    assert answer.startswith(b"HTTP/1.1 200 Connection established\r\n\r\nHTTP/1.1 200")
    assert proxy.stats.tunnels == 1


async def test_a_purpose_lane_refuses_and_records_a_destination_its_rule_omits(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    port = http_origin.port
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", port))) as lane:
            other = await _ask(path, f"CONNECT other.test:{port} HTTP/1.1\r\n\r\n".encode())
            wrong_port = await _ask(
                path, f"CONNECT registry.test:{port + 1} HTTP/1.1\r\n\r\n".encode()
            )
            suffix = await _ask(path, f"CONNECT x.registry.test:{port} HTTP/1.1\r\n\r\n".encode())
            await _ask(path, b"CONNECT \x1b]52;c;x\x07\xff:1 HTTP/1.1\r\n\r\n")  # a terminal escape
    for answer in (other, wrong_port, suffix):
        assert answer.startswith(
            b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: url_rejected:not-in-network-rule\r\n"
        )
    assert [(r.target, r.error) for r in lane.refusals_since(0)] == [
        (f"other.test:{port}", "url_rejected:not-in-network-rule"),
        (f"registry.test:{port + 1}", "url_rejected:not-in-network-rule"),
        (f"x.registry.test:{port}", "url_rejected:not-in-network-rule"),
        ("?]52;c;x??:1", "url_rejected:not-in-network-rule"),  # shown, never replayed
    ]
    assert http_origin.connections == 0
    assert dns.calls == []


async def test_a_listed_name_that_resolves_to_a_denied_address_is_refused(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(GuardConfig, resolver=dns)  # the default guard: loopback is denied
    path = os.path.join(tmp_path, "lane.sock")
    target = f"registry.test:{http_origin.port}"
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", http_origin.port))) as lane:
            answer = await _ask(path, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\nX-Csp-Guard: ssrf_blocked:")
    assert [r.target for r in lane.refusals_since(0)] == [target]
    assert http_origin.connections == 0


async def _hold(path: str) -> trio.SocketStream:
    """A connection to the lane that sends nothing yet: it holds a slot."""
    return await trio.open_unix_socket(path)


async def _wait_active(lane: Lane, count: int) -> None:
    while lane.active != count:
        await trio.sleep(0.01)


async def test_a_purpose_lane_holds_its_cap_of_connections_and_refuses_one_more(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    policy = _policy(("registry.test", http_origin.port), cap=3)
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, policy) as lane:
            held = [await _hold(path) for _ in range(3)]
            await _wait_active(lane, 3)
            assert lane.refusals_since(0) == []  # N connections: all held
            refused = await _ask(path, b"")  # N+1: closed at once, without a byte
            assert await _ask(path, b"") == b""  # and N+2: one refusal kept for the flood
            await held.pop().aclose()
            await _wait_active(lane, 2)
            url = http_origin.url("registry.test")
            again = await _ask(path, f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            for stream in held:
                await stream.aclose()
    assert refused == b""
    assert [(r.target, r.error) for r in lane.refusals_since(0)] == [
        ("*:*", "rate_limited:too-many-connections-3")
    ]
    assert again.startswith(b"HTTP/1.1 200")  # a slot freed is a slot to use
    assert lane.over_cap == 2


async def test_a_purpose_lane_serves_only_its_uid(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    url = http_origin.url("registry.test")
    request = f"GET {url} HTTP/1.1\r\nHost: x\r\n\r\n".encode()
    with trio.fail_after(WAIT_S):
        other = _policy(("registry.test", http_origin.port), uid=os.getuid() + 1)
        async with proxy.open_unix_lane(path, other):
            foreign = await _ask(path, request)
        ours = _policy(("registry.test", http_origin.port), uid=os.getuid())
        async with proxy.open_unix_lane(path, ours):
            served = await _ask(path, request)
    assert foreign == b""
    assert proxy.stats.foreign_peers == 1
    assert served.startswith(b"HTTP/1.1 200")


async def test_a_purpose_lane_leaves_no_socket_and_no_connection_when_it_closes(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", 443))) as lane:
            held = await _hold(path)
            await _wait_active(lane, 1)
        assert await held.receive_some(10) == b""  # cut when the lane closed
        await held.aclose()
    assert not os.path.exists(path)
    assert (proxy.stats.lanes_open, lane.closed) == (0, True)
    with pytest.raises(FileNotFoundError), socket.socket(socket.AF_UNIX) as probe:
        probe.connect(path)


async def test_a_purpose_lane_goes_only_to_the_host_it_judged_however_the_url_is_spelt(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    port = http_origin.port
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", port))) as lane:
            hidden_in_userinfo = await _ask(
                path, f"GET http://registry.test:{port}@other.test/page HTTP/1.1\r\n\r\n".encode()
            )
            # The part after the last @ is the host urllib judges: the lane goes there, to
            # the listed host, whatever the guard's own parser would have made of the rest.
            behind_userinfo = await _ask(
                path,
                f"GET http://other.test\\@registry.test:{port}/page HTTP/1.1\r\n"
                "Host: x\r\n\r\n".encode(),
            )
    assert hidden_in_userinfo.startswith(b"HTTP/1.1 403 Forbidden\r\n")
    assert [r.target for r in lane.refusals_since(0)] == ["other.test:80"]
    assert behind_userinfo.startswith(b"HTTP/1.1 200")
    assert dns.calls == ["registry.test"]


@pytest.mark.parametrize("port", ["4\u00b23", "\u0664\u0664\u0663", "443 ", "+443", "000000443"])
def test_a_port_of_anything_but_ascii_digits_is_refused_as_unlisted(port: str) -> None:
    policy = _policy(("registry.test", 443))
    verdict = policy.judge(True, f"registry.test:{port}")
    assert verdict.refusal is not None
    assert (verdict.refusal.code, verdict.refusal.detail) == ("url_rejected", NOT_IN_RULE)


def _client_hello(name: str | None) -> bytes:
    """The first flight of a TLS client asking for ``name`` (no SNI when None)."""
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with contextlib.suppress(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize(("sni", "refused"), [("evil.example", True), (None, False)])
async def test_a_purpose_lane_refuses_a_tunnel_whose_tls_names_another_host(
    http_origin: Origin, tmp_path: os.PathLike[str], sni: str | None, refused: bool
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    target = f"registry.test:{http_origin.port}"
    hello = _client_hello(sni)
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", http_origin.port))) as lane:
            await _ask(path, f"CONNECT {target} HTTP/1.1\r\n\r\n".encode() + hello)
    found = [(r.target, r.error) for r in lane.refusals_since(0)]
    expected = [(f"evil.example:{http_origin.port}", f"url_rejected:{SNI_MISMATCH}")]
    assert found == (expected if refused else [])


async def test_a_purpose_lane_sends_the_listed_host_whatever_host_header_came(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    url = http_origin.url("registry.test")
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", http_origin.port))):
            request = f"GET {url} HTTP/1.1\r\nHost: evil.example\r\nhost: evil2.example\r\n\r\n"
            answer = await _ask(path, request.encode())
    assert answer.startswith(b"HTTP/1.1 200")
    assert [seen.headers["host"] for seen in http_origin.requests] == [
        f"registry.test:{http_origin.port}"
    ]


def _recorded(lane: Lane, count: int) -> None:
    for n in range(count):
        lane.record(f"h{n}.test:443", ErrorCode.URL_REJECTED, NOT_IN_RULE)


@pytest.mark.parametrize("count", [MAX_LANE_REFUSALS, MAX_LANE_REFUSALS + 1])
def test_a_purpose_lane_keeps_its_first_refusals_and_counts_the_rest(count: int) -> None:
    lane = Lane(1, 0, _policy(("registry.test", 443)))
    _recorded(lane, count)
    kept = lane.refusals_since(0)
    assert [r.target for r in kept] == [f"h{n}.test:443" for n in range(MAX_LANE_REFUSALS)]
    assert lane.dropped == count - MAX_LANE_REFUSALS
    assert lane.refused_total == count


async def test_a_purpose_lane_past_its_refusal_budget_closes_connections_unread(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web.net.guard_proxy")
    proxy = GuardProxy(lambda: LOCAL, resolver=FixedResolver({}))
    path = os.path.join(tmp_path, "lane.sock")
    policy = dataclasses.replace(_policy(("registry.test", 443)), max_refusals=3)
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, policy) as lane:
            answers = [
                await _ask(path, b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n") for _ in range(5)
            ]
    assert [a[:12] for a in answers] == [b"HTTP/1.1 403"] * 3 + [b""] * 2
    assert (proxy.stats.refused, lane.over_budget, lane.refused_total) == (3, 2, 5)
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [f"lane {lane.number}: 3 refusals, reading no more"]


async def test_a_pinned_purpose_lane_refuses_a_peer_in_the_daemons_network_namespace(
    http_origin: Origin, tmp_path: os.PathLike[str]
) -> None:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    proxy = GuardProxy(lambda: LOCAL, resolver=dns)
    path = os.path.join(tmp_path, "lane.sock")
    policy = dataclasses.replace(_policy(("registry.test", http_origin.port)), pin_namespace=True)
    url = http_origin.url("registry.test")
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, policy) as lane:
            answer = await _ask(path, f"GET {url} HTTP/1.1\r\n\r\n".encode())
    assert (answer, http_origin.paths(), lane.namespace) == (b"", [], None)
    assert proxy.stats.foreign_peers == 1


class _BrokenResolver:
    """A resolver with a bug: every lookup raises what no caller expects."""

    async def resolve(self, host: str, port: int) -> list[str]:
        await trio.lowlevel.checkpoint()
        raise RuntimeError(f"bug resolving {host}")


async def test_a_bug_met_on_every_connection_logs_one_traceback_per_lane(
    tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="csp_web.net.guard_proxy")
    proxy = GuardProxy(lambda: LOCAL, resolver=_BrokenResolver())
    path = os.path.join(tmp_path, "lane.sock")
    with trio.fail_after(WAIT_S):
        async with proxy.open_unix_lane(path, _policy(("registry.test", 443))) as lane:
            for _ in range(3):
                await _ask(path, b"CONNECT registry.test:443 HTTP/1.1\r\n\r\n")
    failed = [r for r in caplog.records if r.getMessage().startswith("proxy connection failed")]
    assert [r.levelno for r in failed] == [logging.ERROR, logging.DEBUG, logging.DEBUG]
    assert lane.failures == 3

"""Network by purpose (specialists/tool/exec/_network.py): a program rule's ``network`` lets
its commands reach exactly those destinations, through a lane of the guard proxy, in a real
bubblewrap sandbox; everything else is refused and named in NETWORK_REFUSED.

The origins live on 127.0.0.1 under test names (``FixedResolver``) and the guard opens
loopback for them with ``allow_private``, as the fetch and browser tests reach their origins;
the default guard (no allow_private) is used where a private address must be refused.
"""

from __future__ import annotations

import functools
import glob
import os
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import trio

from csp_web.core.api.errors import OpError
from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy, Lane
from protocol import ErrorCode
from specialists.tool.exec import ExecNetwork, ExecRequest, ExecResult, run_command
from specialists.tool.exec._network import MAX_REPLY_REFUSALS, Bridge
from specialists.tool.exec.config import ExecConfig, ProgramRule
from tests.net._dns import FixedResolver
from tests.net._origin import Origin

from .exec_support import IS_ROOT, NOBODY, make_config, probe, scratch_dir

WAIT_S = 60.0
LOCAL = GuardConfig(allow_private=("127.0.0.1/32",))  # the origins live on loopback


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


@pytest.fixture
async def origin(nursery: trio.Nursery) -> Origin:
    served = Origin("http")
    await nursery.start(functools.partial(served.serve, ssl_context=None))
    return served


def _config(workspace: str, *rules: ProgramRule, **overrides: Any) -> ExecConfig:
    """The test policy with ``rules`` in front (the first rule for a name wins)."""
    base = make_config(workspace, **overrides)
    return replace(base, allowed_programs=(*rules, *base.allowed_programs))


def _network(guard: GuardConfig = LOCAL, *, cap: int = 32) -> ExecNetwork:
    dns = FixedResolver({"registry.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    return ExecNetwork(GuardProxy(lambda: guard, resolver=dns), cap)


def _script(workspace: str, text: str) -> str:
    """The command running ``text``, written as a script in the workspace that the sandbox
    user can read."""
    path = os.path.join(workspace, "probe.py")
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    if IS_ROOT:
        os.chown(path, NOBODY, NOBODY)
    return "python3 probe.py"


# Each URL given is fetched through the proxy variables; one line per URL says what came back.
_FETCH = """
    import sys, urllib.request
    for url in sys.argv[1:]:
        try:
            with urllib.request.urlopen(url, timeout=20) as answer:
                print("ok", answer.status, answer.read().decode()[:40])
        except Exception as error:
            print("refused", type(error).__name__)
"""


async def _run(config: ExecConfig, command: str, network: ExecNetwork | None) -> ExecResult:
    sandbox = await probe(config, "bwrap")
    with trio.fail_after(WAIT_S):
        request = ExecRequest(command, timeout_ms=30_000)
        return await run_command(request, config, sandbox=sandbox, network=network)


async def test_a_rule_with_network_reaches_its_listed_host_through_the_proxy(
    workspace: str, origin: Origin
) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    command = _script(workspace, _FETCH) + f" http://registry.test:{origin.port}/page"
    result = await _run(_config(workspace, rule), command, _network())
    assert (result.exit_code, result.stdout) == (
        0,
        "ok 200 <html><head><title>Hello</title></head><\n",
    )
    assert result.network_refused == ()
    assert origin.paths() == ["/page"]


async def test_every_other_destination_is_refused_and_named(workspace: str, origin: Origin) -> None:
    port = origin.port
    rule = ProgramRule("python3", network=(f"registry.test:{port}",))
    urls = (
        f"http://other.test:{port}/page",  # another name
        f"http://127.0.0.1:{port}/page",  # the same origin by address
        f"https://registry.test:{port + 1}/",  # the listed name on another port (CONNECT)
    )
    command = _script(workspace, _FETCH) + " " + " ".join(urls)
    result = await _run(_config(workspace, rule), command, _network())
    # The proxy's 403 to a request, and to a tunnel (urllib's URLError).
    assert result.stdout.split() == [
        "refused",
        "HTTPError",
        "refused",
        "HTTPError",
        "refused",
        "URLError",
    ]
    assert result.network_refused == (
        f"other.test:{port} url_rejected:not-in-network-rule",
        f"127.0.0.1:{port} url_rejected:not-in-network-rule",
        f"registry.test:{port + 1} url_rejected:not-in-network-rule",
    )
    assert origin.connections == 0


async def test_a_listed_name_resolving_to_a_private_address_is_refused_by_the_deny_table(
    workspace: str, origin: Origin
) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    command = _script(workspace, _FETCH) + f" http://registry.test:{origin.port}/page"
    result = await _run(_config(workspace, rule), command, _network(GuardConfig()))
    assert result.stdout == "refused HTTPError\n"
    assert result.network_refused == (f"registry.test:{origin.port} ssrf_blocked:loopback-127/8",)
    assert origin.connections == 0


async def test_a_failed_networked_command_names_its_refusals_in_the_failure(
    workspace: str, origin: Origin
) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    script = _script(workspace, _FETCH + "    sys.exit(3)\n")
    result = await _run(_config(workspace, rule), f"{script} http://other.test:1/", _network())
    failure = result.failure()
    assert failure is not None
    assert failure.code is ErrorCode.COMMAND_FAILED
    assert ("NETWORK_REFUSED", "other.test:1 url_rejected:not-in-network-rule") in failure.fields


_DIRECT = """
    import socket, sys
    port = int(sys.argv[1])
    for address in [("127.0.0.1", port), ("10.255.255.53", 53), ("93.184.215.14", 443)]:
        try:
            socket.create_connection(address, timeout=5).close()
            print("connected")
        except OSError as error:
            print(error.errno)
"""


async def test_a_networked_command_reaches_nothing_directly(workspace: str, origin: Origin) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    command = _script(workspace, _DIRECT) + f" {origin.port}"
    result = await _run(_config(workspace, rule), command, _network())
    # The host's loopback (where the origin and any daemon listen) is another namespace's:
    # refused; every other address has no route.
    assert result.stdout.split() == ["111", "101", "101"], (
        result.stderr
    )  # ECONNREFUSED, ENETUNREACH
    assert origin.connections == 0


async def test_a_command_without_a_network_rule_still_has_no_network(
    workspace: str, origin: Origin
) -> None:
    command = _script(
        workspace, _DIRECT + "    import os; print(os.path.exists('/tmp/.csp-net'))\n"
    )
    result = await _run(_config(workspace), f"{command} {origin.port}", _network())
    assert result.stdout.split() == ["111", "101", "101", "False"], result.stderr
    assert result.network_refused == ()
    env = await _run(_config(workspace), "printenv HTTPS_PROXY", _network())
    assert (env.exit_code, env.stdout) == (1, "")  # no proxy variable either


_DNS = """
    import socket, subprocess, sys
    try:
        socket.getaddrinfo("secret-data.registry.test", 443)
        print("resolved")
    except socket.gaierror:
        print("no-name")
    for server in sys.argv[1:]:
        try:
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"\\0" * 12, (server, 53))
            print("sent")
        except OSError as error:
            print("unsent", error.errno)
    print(subprocess.run(["getent", "hosts", "registry.test"]).returncode)
"""


def _resolvers() -> list[str]:
    """The host's resolvers (resolv.conf is read-only in the sandbox, but names the same)."""
    with open("/etc/resolv.conf") as f:
        return [line.split()[1] for line in f if line.startswith("nameserver")]


async def test_names_resolve_only_in_the_proxy_so_dns_cannot_carry_data_out(
    workspace: str, origin: Origin
) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    network = _network()
    servers = [s for s in [*_resolvers(), "127.0.0.53", "8.8.8.8"] if "." in s]  # IPv4 ones
    command = _script(workspace, _DNS) + " " + " ".join(servers)
    result = await _run(_config(workspace, rule), command, network)
    # A resolver on loopback (systemd-resolved's 127.0.0.53) is the namespace's own loopback,
    # where nothing listens: the datagram reaches no one. Every other one has no route.
    sent = ["sent" if s.startswith("127.") else "unsent 101" for s in servers]
    assert result.stdout.splitlines() == ["no-name", *sent, "2"], result.stderr
    resolver = network.proxy.resolver
    assert isinstance(resolver, FixedResolver)
    assert resolver.calls == []


# Opens tunnels one after another and holds each open: the lane counts them all at once.
_FLOOD = """
    import socket, sys
    port, count = int(sys.argv[1]), int(sys.argv[2])
    held = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", 3128))
        held.append(sock)
        try:
            sock.sendall(f"CONNECT registry.test:{port} HTTP/1.1\\r\\n\\r\\n".encode())
            print("served" if sock.recv(64).startswith(b"HTTP/1.1 200") else "closed")
        except OSError:
            print("closed")
"""


@pytest.mark.parametrize("count", [3, 4])
async def test_a_command_holds_at_most_its_cap_of_proxy_connections(
    workspace: str, origin: Origin, count: int
) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    command = _script(workspace, _FLOOD) + f" {origin.port} {count}"
    result = await _run(_config(workspace, rule), command, _network(cap=3))
    if count == 3:
        assert result.stdout.split() == ["served"] * 3, result.stderr
        assert result.network_refused == ()
    else:
        assert result.stdout.split() == ["served"] * 3 + ["closed"], result.stderr
        assert result.network_refused == ("*:* rate_limited:too-many-connections-3",)


async def test_the_lane_and_its_directory_are_gone_when_the_command_ends(
    workspace: str, origin: Origin
) -> None:
    rule = ProgramRule("python3", network=(f"registry.test:{origin.port}",))
    network = _network()
    command = _script(workspace, "import os; print(sorted(os.listdir('/tmp/.csp-net')))\n")
    result = await _run(_config(workspace, rule), command, network)
    assert result.stdout == "['bridge.py', 'lane.sock']\n", result.stderr
    assert glob.glob("/tmp/csp-exec-net-*") == []
    assert (network.proxy.stats.lanes_opened, network.proxy.stats.lanes_open) == (1, 0)


async def test_a_rules_env_reaches_its_program_over_the_requests(workspace: str) -> None:
    rule = ProgramRule("printenv", env={"NODE_EXTRA_CA_CERTS": "/ws/ca.pem", "TZ": "UTC"})
    config = _config(workspace, rule)
    sandbox = await probe(config, "bwrap")
    with trio.fail_after(WAIT_S):
        request = ExecRequest("printenv NODE_EXTRA_CA_CERTS TZ", env={"TZ": "Europe/Paris"})
        result = await run_command(request, config, sandbox=sandbox)
    assert result.stdout == "/ws/ca.pem\nUTC\n"


async def test_a_network_rule_needs_a_proxy_and_bubblewrap(workspace: str) -> None:
    rule = ProgramRule("python3", network=("registry.test",))
    config = _config(workspace, rule)
    with pytest.raises(OpError) as no_proxy:
        await _run(config, "python3 -c pass", None)
    bare = await probe(config, "none")
    with pytest.raises(OpError) as no_bwrap, trio.fail_after(WAIT_S):
        await run_command(ExecRequest("python3 -c pass"), config, sandbox=bare, network=_network())
    assert (no_proxy.value.code, no_proxy.value.detail) == (
        ErrorCode.NOT_AVAILABLE,
        "network: no guard proxy for exec",
    )
    assert (no_bwrap.value.code, no_bwrap.value.detail) == (
        ErrorCode.NOT_AVAILABLE,
        "network needs bwrap",
    )


@pytest.mark.parametrize("distinct", [MAX_REPLY_REFUSALS, MAX_REPLY_REFUSALS + 1])
def test_a_reply_names_at_most_its_cap_of_distinct_refusals(distinct: int) -> None:
    lane = Lane(1, 0)
    refusal = OpError(ErrorCode.URL_REJECTED, "not-in-network-rule")
    for n in range(distinct):
        for _ in range(3):  # the same refusal again and again is one line
            lane.record(f"h{n}.test:443", refusal.code, refusal.detail)
    bridge = Bridge(lane, "/nonexistent", "/usr/bin/python3")
    lines, more = bridge.refused()
    assert len(lines) == MAX_REPLY_REFUSALS
    assert more == 3 * (distinct - MAX_REPLY_REFUSALS)
    assert lines[0] == "h0.test:443 url_rejected:not-in-network-rule"

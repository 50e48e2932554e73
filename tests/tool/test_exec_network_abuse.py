"""A networked command's lane under attack: other sandboxes looking for it, a command looping
refused requests at it, and many short connections through its bridge."""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import stat
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import replace

import pytest
import trio

from csp_web.net import GuardConfig
from csp_web.net.guard_proxy import GuardProxy
from csp_web.net.proxy_lanes import MAX_REFUSALS
from specialists.tool.exec import ExecNetwork, ExecRequest, run_command, sweep_lane_roots
from specialists.tool.exec._network import LANE_ROOT_PREFIX, MAX_REPLY_REFUSALS, _lane_root
from specialists.tool.exec.config import ExecConfig, ProgramRule
from tests.net._dns import FixedResolver
from tests.net._origin import Origin

from .exec_support import IS_ROOT, NOBODY, make_config, probe, scratch_dir

LOCAL = GuardConfig(allow_private=("127.0.0.1/32",))  # the origin lives on loopback


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


@pytest.fixture
async def origin(nursery: trio.Nursery) -> Origin:
    served = Origin("http")
    await nursery.start(functools.partial(served.serve, ssl_context=None))
    return served


def _config(workspace: str, port: int) -> ExecConfig:
    base = make_config(workspace)
    rule = ProgramRule("python3", network=(f"registry.test:{port}",))
    return replace(base, allowed_programs=(rule, *base.allowed_programs))


def _network() -> ExecNetwork:
    dns = FixedResolver({"registry.test": ["127.0.0.1"]})
    return ExecNetwork(GuardProxy(lambda: LOCAL, resolver=dns), 32)


def _script(workspace: str, name: str, text: str) -> str:
    path = os.path.join(workspace, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))
    if IS_ROOT:
        os.chown(path, NOBODY, NOBODY)
    return f"python3 {name}"


# Looks for every lane socket in the directories given and asks the origin through each.
_THIEF = """
    import glob, socket, sys
    for directory in sys.argv[2:]:
        for path in glob.glob(directory + "/**/lane.sock", recursive=True):
            s = socket.socket(socket.AF_UNIX)
            try:
                s.connect(path)
                port = sys.argv[1].encode()
                s.sendall(b"GET http://registry.test:%s/stolen HTTP/1.1\\r\\n\\r\\n" % port)
                print(path, s.recv(100)[:12])
            except OSError as error:
                print(path, error)
"""
_SLEEP = "import time; time.sleep(4)\n"


@pytest.mark.slow
async def test_no_other_sandbox_reaches_a_commands_lane_whatever_tmpdir_says(
    workspace: str, origin: Origin, monkeypatch: pytest.MonkeyPatch
) -> None:
    tmpdir = tempfile.mkdtemp(dir="/var/tmp", prefix="csp-test-tmpdir-")
    os.chmod(tmpdir, 0o755)
    monkeypatch.setattr(tempfile, "tempdir", tmpdir)
    config, network = _config(workspace, origin.port), _network()
    sandbox = await probe(config, "bwrap")
    sleeper = _script(workspace, "sleeper.py", _SLEEP)
    thief = _script(workspace, "thief.py", _THIEF)
    found = {}

    async def steal() -> None:
        await trio.sleep(2)  # the sleeper's lane is open by then
        request = ExecRequest(
            f"{thief} {origin.port} {tmpdir} /tmp /var/tmp", timeout_ms=30000, shell=True
        )
        found["thief"] = await run_command(request, config, sandbox=sandbox, network=network)

    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(steal)
                request = ExecRequest(sleeper, timeout_ms=30000)
                await run_command(request, config, sandbox=sandbox, network=network)
    finally:
        os.rmdir(tmpdir)
    assert "/stolen" not in origin.paths()
    assert found["thief"].stdout == ""  # no lane socket found, let alone used


# Asks for COUNT hosts the rule omits, one connection each, then says how many it asked.
_LOOP = """
    import socket, sys
    count = int(sys.argv[1])
    for n in range(count):
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        try:
            s.sendall(b"CONNECT x%d.evil.test:443 HTTP/1.1\\r\\n\\r\\n" % n)
            s.recv(100)
        except (BrokenPipeError, ConnectionResetError):  # past the budget: closed unread
            pass
        s.close()
    print(count)
"""


@pytest.mark.slow
async def test_a_command_looping_refusals_is_cut_off_and_named_by_its_first(
    workspace: str,
) -> None:
    count = MAX_REFUSALS + 44
    config, network = _config(workspace, 443), _network()
    sandbox = await probe(config, "bwrap")
    command = _script(workspace, "loop.py", _LOOP) + f" {count}"
    with trio.fail_after(120):
        result = await run_command(
            ExecRequest(command, timeout_ms=60000), config, sandbox=sandbox, network=network
        )
    assert result.stdout.strip() == str(count), result.stderr
    shown = [
        f"x{n}.evil.test:443 url_rejected:not-in-network-rule" for n in range(MAX_REPLY_REFUSALS)
    ]
    assert list(result.network_refused) == shown
    assert result.network_refused_more == count - MAX_REPLY_REFUSALS
    assert network.proxy.stats.refused == MAX_REFUSALS


# COUNT short requests in a row through the bridge, each on a connection of its own.
_MANY = """
    import socket, sys
    port, count, ok = sys.argv[1], int(sys.argv[2]), 0
    for n in range(count):
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(b"GET http://registry.test:%s/page HTTP/1.1\\r\\n\\r\\n" % port.encode())
        answer = b""
        while data := s.recv(65536):
            answer += data
        ok += answer.startswith(b"HTTP/1.1 200")
        s.close()
    print(ok)
"""


@pytest.mark.slow
async def test_a_thousand_short_connections_in_a_row_all_pass_the_bridge(
    workspace: str, origin: Origin
) -> None:
    config, network = _config(workspace, origin.port), _network()
    sandbox = await probe(config, "bwrap")
    command = _script(workspace, "many.py", _MANY) + f" {origin.port} 1000"
    with trio.fail_after(300):
        result = await run_command(
            ExecRequest(command, timeout_ms=280000), config, sandbox=sandbox, network=network
        )
    assert (result.exit_code, result.stdout.strip()) == (0, "1000")


def test_lane_roots_left_by_a_killed_daemon_are_swept_and_live_ones_kept() -> None:
    with tempfile.TemporaryDirectory() as directory:
        stale, live, other = (os.path.join(directory, LANE_ROOT_PREFIX + n) for n in "abc")
        for root in (stale, live):
            os.makedirs(os.path.join(root, "lane"))
            os.close(os.open(os.path.join(root, ".lock"), os.O_CREAT | os.O_RDWR, 0o600))
        os.makedirs(os.path.join(directory, "csp-something-else"))
        os.makedirs(other)  # no lock file: not a lane root this code made
        held = os.open(os.path.join(live, ".lock"), os.O_RDWR)
        try:
            fcntl.flock(held, fcntl.LOCK_EX)
            assert sweep_lane_roots(directory) == 1
            assert sorted(os.listdir(directory)) == sorted(
                ["csp-something-else", os.path.basename(live), os.path.basename(other)]
            )
        finally:
            os.close(held)


def test_a_lane_root_removed_under_the_daemon_is_made_anew_and_private() -> None:
    first = _lane_root()
    shutil.rmtree(first)  # as a /tmp cleaner does to what an idle daemon left untouched
    second = _lane_root()
    assert second != first
    assert (os.path.dirname(second), stat.S_IMODE(os.stat(second).st_mode)) == ("/tmp", 0o711)
    assert _lane_root() == second
    sweep_lane_roots(os.path.dirname(second))
    assert os.path.isdir(second)  # held: this daemon's own

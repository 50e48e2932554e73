"""``csp-web nodes list|approve|revoke`` and ``csp-web node run`` run in this process
(``tests.inprocess``) against a real node daemon and a scripted node on Unix sockets: the
tables and lines they print and their exit codes. test_node_processes.py runs them as
subprocesses; these are measured by coverage."""

from __future__ import annotations

import json
import os

import pytest
import trio

from csp_web.config import Config
from protocol import Status
from tests.conftest import Sink
from tests.inprocess import run_main, run_main_in_thread

from .support import NodeDaemon, ScriptedNode, identity, node_config, start_node_daemon

WAIT_S = 60.0


@pytest.fixture
async def nd(nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str) -> NodeDaemon:
    return await start_node_daemon(nursery, node_config(config, sock_dir), sock_dir)


@pytest.fixture(autouse=True)
def _no_config_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CSP_WEB_CONFIG", raising=False)


async def _asking(nd: NodeDaemon, name: str) -> tuple[ScriptedNode, str]:
    """A scripted node that asked to pair as ``name``; it and its pairing code."""
    stream = await trio.open_unix_socket(nd.node_path)
    node = ScriptedNode(stream)
    reply = await node.call("pair", "PAIR_CODE", *identity(name, ("notify",)))
    assert reply.status is Status.OK, reply
    return node, (reply.get("DATA") or "").removeprefix("code:")


async def test_list_shows_a_pending_pairing_approve_pairs_it_and_revoke_forgets_it(
    nd: NodeDaemon, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = ["nodes", "--socket", nd.client_path]
    with trio.fail_after(WAIT_S):
        node, code = await _asking(nd, "lab1")
        async with node.stream:
            assert await run_main_in_thread([*nodes, "list"]) == 0
            listed = capsys.readouterr().out.splitlines()
            header = ["NAME", "PLATFORM", "CONNECTED", "LAST", "SEEN", "CAPABILITIES"]
            assert listed[0].split() == header
            assert listed[2].split()[:4] == ["PENDING", "CODE", "NAME", "PLATFORM"]
            assert listed[3].split()[:3] == [code, "lab1", "Linux/test"]
            async with trio.open_nursery() as nursery:
                codes: list[int] = []

                async def approve() -> None:
                    codes.append(await run_main_in_thread([*nodes, "approve", code]))

                nursery.start_soon(approve)
                paired = await node.next_task()
                await node.answer(paired, Status.OK, ("SCOPE", "[node]"), ("DATA", "stored"))
            assert codes == [0]
            assert capsys.readouterr().out == "approved:lab1\n"
            assert await run_main_in_thread([*nodes, "list"]) == 0
            table = capsys.readouterr().out.splitlines()
            assert [row.split() for row in table[1:]] == [
                ["lab1", "Linux/test", "yes", "now", "notify"]
            ]
            assert await run_main_in_thread([*nodes, "--json", "list"]) == 0
            shown = json.loads(capsys.readouterr().out)
            assert shown["status"] == "OK"
            (row,) = [json.loads(v) for k, v in shown["fields"] if k == "NODE"]
            assert (row["name"], row["capabilities"]) == ("lab1", ["notify"])
            assert await run_main_in_thread([*nodes, "revoke", "lab1"]) == 0
            assert capsys.readouterr().out == "revoked:lab1\n"
            assert await run_main_in_thread([*nodes, "revoke", "lab1"]) == 1
            assert capsys.readouterr().out.startswith("FAIL ")


def test_nodes_with_no_daemon_found_or_listening_exits_3(
    sock_dir: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_main(["nodes", "list"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("csp-web: nodes: no running daemon found (looked at the lock file in ")
    path = os.path.join(sock_dir, "none.sock")
    assert run_main(["nodes", "--socket", path, "list"]) == 3
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"csp-web: cannot reach the daemon at {path}: ")


@pytest.mark.parametrize("location", ["north", "1", "1,2,3,4"])
def test_node_run_refuses_a_location_that_is_not_lat_lon(
    tmp_path: str, capsys: pytest.CaptureFixture[str], location: str
) -> None:
    argv = ["node", "run", "--connect", "x.sock", "--name", "n", "--location", location]
    assert run_main(argv) == 2
    assert capsys.readouterr().err == "csp-web: --location is LAT,LON[,ACCURACY_M]\n"


@pytest.mark.parametrize("where", [(), ("--location", "41.01,28.97,25")])
def test_node_run_with_no_daemon_exits_3(
    sock_dir: str, monkeypatch: pytest.MonkeyPatch, tmp_path: str, where: tuple[str, ...]
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    argv = ["node", "run", "--connect", os.path.join(sock_dir, "none.sock"), "--name", "n"]
    assert run_main([*argv, *where]) == 3

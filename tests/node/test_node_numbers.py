"""A node that writes a bad number, or trips a bug in its link, loses that link only: the
daemon answers, logs the reason and keeps serving every other node and client."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.client.trio_client import open_client
from csp_web.config import Config
from protocol import Reply, Status
from specialists.node.config import NodesConfig
from specialists.node.hub import NodeHub
from specialists.node.store import NodeRecord, NodeStore

from ..conftest import Sink
from .procs import WAIT_S, daemon_process, run_cli, write_config
from .support import (
    NodeDaemon,
    ScriptedNode,
    identity,
    node_config,
    node_task,
    pair,
    start_node_daemon,
)


@pytest.fixture
async def nd(nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str) -> NodeDaemon:
    return await start_node_daemon(nursery, node_config(config, sock_dir), sock_dir)


@pytest.mark.parametrize("seq", ["²", "١", "+0", " 0", "0" * 10])
async def test_a_media_seq_that_is_not_ascii_digits_cuts_that_link_and_nothing_else(
    nd: NodeDaemon, seq: str, caplog: pytest.LogCaptureFixture
) -> None:
    """N-3: "²" passes str.isdigit() and made int() raise out of the link, ending the
    daemon; now the frame is invalid_field, the link is cut with a logged reason, the
    waiting task fails node_unavailable and a second node still pairs and serves."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        results: list[Reply] = []

        async def run() -> None:
            results.append(await client.call(node_task("lab1", "camera_snap"), timeout_s=5))

        n.start_soon(run)
        task = await node.next_task()
        ack = await node.call("media", "ACK", ("FOR", task.id or ""), ("SEQ", seq), ("CHUNK", ""))
        assert (ack.get("ERROR") or "").startswith("invalid_field:SEQ ")
        assert await node.next() is None
    assert results[0].get("ERROR") == "node_unavailable:lab1"
    assert any("bad number" in r.getMessage() for r in caplog.records)
    other, _ = await pair(nd, "lab2")
    async with other.stream:
        assert (await other.call("heartbeat", "ACK")).get("DATA") == "alive"


@pytest.mark.parametrize(("seq", "ok"), [("0" * 9, True), ("0" * 10, False)])
async def test_a_media_seq_is_read_up_to_nine_digits_and_not_ten(
    nd: NodeDaemon, seq: str, ok: bool
) -> None:
    """N-10: SEQ at its bound of 9 digits is read (and is chunk 0), 10 digits is refused."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        n.start_soon(client.call, node_task("lab1", "camera_snap"))
        task = await node.next_task()
        ack = await node.call(
            "media", "ACK", ("FOR", task.id or ""), ("SEQ", seq), ("CHUNK", "eHl6")
        )
        if ok:
            assert ack.get("DATA") == "bytes:3"
        else:
            assert ack.get("ERROR") == "invalid_field:SEQ more than 9 digits"
            assert await node.next() is None
        n.cancel_scope.cancel()


class _BrokenStore(NodeStore):
    """A store whose lookup fails as a bug would: an exception no link expects."""

    async def lookup(self, name: str) -> NodeRecord | None:
        raise RuntimeError("a bug in the store")


async def test_an_unexpected_exception_in_one_link_ends_that_link_only(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The links share the transports' nursery: one link's exception used to escape it and
    end the daemon. Now it is logged with its traceback, that link is closed, and the
    nursery (with a second link in it) goes on."""
    store = _BrokenStore(str(tmp_path / "nodes"), max_nodes=4)
    hub = NodeHub(NodesConfig(), store, str(tmp_path / "media"))
    first_end, first_daemon = trio.testing.memory_stream_pair()
    second_end, second_daemon = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.serve_link, first_daemon, "uid:0")
        nursery.start_soon(hub.serve_link, second_daemon, "uid:1")
        first, second = ScriptedNode(first_end), ScriptedNode(second_end)
        await first.task("pair", "PAIR_CODE", *identity("lab1"))
        assert await first.next() is None
        await trio.testing.wait_all_tasks_blocked()
        assert hub.open_links == 1
        refused = await second.call("heartbeat", "ACK")
        assert refused.status is Status.FAIL
        nursery.cancel_scope.cancel()
    assert hub.open_links == 0
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failed] == ["node link from uid:0 failed; it is closed"]
    assert failed[0].exc_info is not None


@pytest.mark.slow
async def test_a_real_daemon_process_outlives_a_paired_node_sending_seq_superscript_two(
    sock_dir: str,
) -> None:
    """Issue 22, end to end: ``SEQ ²`` from a paired node ended ``csp-web serve`` with exit 1.
    Now that link alone is cut (logged), the waiting task fails node_unavailable and the
    daemon answers the operator's next command."""
    config = write_config(sock_dir, {})
    client_path = os.path.join(sock_dir, "run", "csp.sock")
    async with daemon_process(config) as daemon:
        stream = await trio.open_unix_socket(os.path.join(sock_dir, "run", "nodes.sock"))
        async with stream:
            node = ScriptedNode(stream, timeout_s=WAIT_S)
            await _pair_by_cli(node, config)
            async with open_client(client_path) as client, trio.open_nursery() as n:
                results: list[Reply] = []

                async def run() -> None:
                    task = node_task("lab1", "camera_snap")
                    results.append(await client.call(task, timeout_s=WAIT_S))

                n.start_soon(run)
                task = await node.next_task()
                fields = (("FOR", task.id or ""), ("SEQ", "²"), ("CHUNK", ""))
                ack = await node.call("media", "ACK", *fields)
                assert ack.get("ERROR") == "invalid_field:SEQ not ASCII digits: '\\xb2'"
                assert await node.next() is None
        assert results[0].get("ERROR") == "node_unavailable:lab1"
        await daemon.wait_for("node link lab1 .* cut: bad number")
        listed = await run_cli("nodes", "--config", config, "list")
        assert listed.returncode == 0, listed.stderr
        assert daemon.process.returncode is None


async def _pair_by_cli(node: ScriptedNode, config: str) -> None:
    """Ask to pair as lab1 and have ``csp-web nodes approve`` approve it."""
    asked = await node.call("pair", "PAIR_CODE", *identity("lab1"))
    code = (asked.get("DATA") or "").removeprefix("code:")
    async with trio.open_nursery() as nursery:
        approved: list[subprocess.CompletedProcess[bytes]] = []

        async def approve() -> None:
            approved.append(await run_cli("nodes", "--config", config, "approve", code))

        nursery.start_soon(approve)
        paired = await node.next_task()
        await node.answer(paired, Status.OK, ("SCOPE", "[node]"), ("DATA", "stored"))
    assert approved[0].returncode == 0, approved[0].stderr

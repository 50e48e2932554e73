"""Pending pairings are capped per source (N-4): one uid or address cannot hold every slot
and lock other nodes out, and the operator sees what waits in ``csp-web nodes list``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

from csp_web.app.nodes import render
from csp_web.client.trio_client import open_client
from csp_web.config import Config
from protocol import Reply, Status
from specialists.node.config import NodesConfig
from specialists.node.hub import NodeHub
from specialists.node.store import NodeStore

from ..conftest import Sink
from .support import ScriptedNode, identity, node_config, nodes_op, scripted, start_node_daemon


async def _ask_to_pair(hub: NodeHub, nursery: trio.Nursery, source: str, name: str) -> Reply:
    """A new link from ``source`` asking to pair as ``name``; it stays open (and heartbeats
    are answered) until the test's nursery ends."""
    node_end, daemon_end = trio.testing.memory_stream_pair()
    nursery.start_soon(hub.serve_link, daemon_end, source)
    node = ScriptedNode(node_end, timeout_s=1000)
    reply = await node.call("pair", "PAIR_CODE", *identity(name, ("notify",)))
    if reply.status is Status.OK:
        nursery.start_soon(_heartbeat, node)
    return reply


async def _heartbeat(node: ScriptedNode) -> None:
    """Beat every 10 s until the daemon closes the link."""
    while True:
        await node.task("heartbeat", "ACK")
        if await node.next() is None:
            return
        await trio.sleep(10)


async def test_one_source_cannot_stop_another_from_pairing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """N-4, N-6: a source pacing pair requests under pair_attempts while its links heartbeat
    (3.2 a minute kept all 16 codes before) gets 2 codes and then busy; a second source
    still pairs; the codes expire at their ttl whatever the heartbeats."""
    hub = NodeHub(NodesConfig(), NodeStore(str(tmp_path / "n"), max_nodes=4), str(tmp_path))
    async with trio.open_nursery() as nursery:
        replies = []
        for n in range(16):  # 3.2 requests a minute, the last at 281.25 s
            await trio.sleep_until(n * 18.75)
            replies.append(await _ask_to_pair(hub, nursery, "ip:10.0.0.1", f"a{n}"))
        assert [r.status for r in replies[:2]] == [Status.OK, Status.OK]
        assert {r.get("ERROR") for r in replies[2:]} == {
            "busy:2 pairings from this source wait for approval"
        }
        other = await _ask_to_pair(hub, nursery, "ip:10.0.0.2", "b0")
        assert other.status is Status.OK, other
        await trio.sleep_until(300.0)
        # a0's code expired at 300 s though its link kept beating; a1's waits until 318.75
        waiting = [(p.hello.name, p.expires_at) for p in hub.pending.waiting(300.0)]
        assert waiting == [("a1", 318.75), ("b0", 581.25)]
        again = await _ask_to_pair(hub, nursery, "ip:10.0.0.1", "a16")
        assert again.status is Status.OK, again
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("per_source", "ok"), [(3, True), (2, False)])
async def test_max_pending_per_source_is_taken_at_n_and_refused_at_n_plus_one(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, per_source: int, ok: bool
) -> None:
    """N-4: the third code of one source passes with a cap of 3 and is busy with 2."""
    config = NodesConfig(max_pending_per_source=per_source)
    hub = NodeHub(config, NodeStore(str(tmp_path / "n"), max_nodes=4), str(tmp_path))
    async with trio.open_nursery() as nursery:
        for n in range(2):
            assert (await _ask_to_pair(hub, nursery, "uid:7", f"a{n}")).status is Status.OK
        third = await _ask_to_pair(hub, nursery, "uid:7", "a2")
        assert (third.status is Status.OK) is ok
        nursery.cancel_scope.cancel()


def test_max_pending_per_source_cannot_exceed_max_pending_pairs() -> None:
    NodesConfig(max_pending_pairs=2, max_pending_per_source=2)
    with pytest.raises(ValueError, match="max_pending_per_source"):
        NodesConfig(max_pending_pairs=2, max_pending_per_source=3)


async def test_nodes_list_shows_the_pairings_that_wait(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    """N-14: list carries one PENDING line per waiting code, rendered as a table."""
    nd = await start_node_daemon(nursery, node_config(config, sock_dir), sock_dir)
    async with scripted(nd.node_path) as node:
        asked = await node.call("pair", "PAIR_CODE", *identity("lab9"))
        code = (asked.get("DATA") or "").removeprefix("code:")
        async with open_client(nd.client_path) as client:
            listed = await nodes_op(client, "list")
    assert listed.status is Status.OK
    (pending,) = [json.loads(value) for value in listed.get_all("PENDING")]
    assert pending["expires_in_s"] in (299, 300)
    assert pending | {"expires_in_s": 300} == {
        "code": code,
        "name": "lab9",
        "platform": "Linux/test",
        "source": pending["source"],
        "expires_in_s": 300,
    }
    assert pending["source"].startswith("uid:")
    table = render(listed).splitlines()
    assert table[-2].split() == ["PENDING", "CODE", "NAME", "PLATFORM", "SOURCE", "EXPIRES", "IN"]
    assert table[-1].split()[:3] == [code, "lab9", "Linux/test"]

"""Liveness of node links on the mock clock (N-7): the hello deadline, heartbeats, silence."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from csp_web.config.nodes import NodesConfig
from protocol import Status
from specialists.node.hub import NodeHub
from specialists.node.store import NodeStore
from specialists.node.wire import Hello

from .support import ScriptedNode, identity


def _hub(tmp_path: Path) -> tuple[NodeHub, str]:
    store = NodeStore(str(tmp_path / "nodes"), max_nodes=4)
    token = store.add(Hello("lab1", "Linux/test", ("notify",)))
    return NodeHub(NodesConfig(), store, str(tmp_path / "media")), token


async def test_a_link_that_never_says_hello_is_closed_at_the_hello_timeout(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """N-7: hello_timeout_s (10 s) after connecting, not before."""
    hub, _ = _hub(tmp_path)
    node_end, daemon_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.serve_link, daemon_end, "uid:0")
        node = ScriptedNode(node_end, timeout_s=100)
        assert await node.next() is None
        assert trio.current_time() == 10.0
    assert hub.open_links == 0


async def test_heartbeats_keep_a_link_and_silence_closes_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """N-7: a frame each 10 s keeps it; 30 s of silence closes it."""
    hub, token = _hub(tmp_path)
    node_end, daemon_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.serve_link, daemon_end, "uid:0")
        node = ScriptedNode(node_end, timeout_s=100)
        hello = await node.call(
            "hello", "WELCOME", *identity("lab1", ("notify",)), ("TOKEN", token)
        )
        assert hello.status is Status.OK
        for _ in range(6):  # a minute of heartbeats
            await trio.sleep(10)
            assert (await node.call("heartbeat", "ACK")).get("DATA") == "alive"
        assert "lab1" in hub.links
        last = trio.current_time()
        assert await node.next() is None
        assert trio.current_time() == last + 30.0
    assert "lab1" not in hub.links


async def test_a_pairing_link_may_heartbeat_and_ends_when_its_code_expires(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """N-4, N-7: heartbeats keep a pairing link, media wait for approval, and the code's
    expiry (pair_code_ttl_s, 300 s) closes it and forgets the code."""
    hub, _ = _hub(tmp_path)
    node_end, daemon_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.serve_link, daemon_end, "uid:0")
        node = ScriptedNode(node_end, timeout_s=1000)
        reply = await node.call("pair", "PAIR_CODE", *identity("lab2", ("notify",)))
        code = (reply.get("DATA") or "").removeprefix("code:")
        assert code in hub.pending.pairs
        media = await node.call("media", "ACK", ("FOR", "d-1"), ("SEQ", "0"), ("CHUNK", ""))
        assert media.get("ERROR") == "permission_denied:not paired yet"
        for _ in range(29):  # 290 s of heartbeats
            await trio.sleep(10)
            assert (await node.call("heartbeat", "ACK")).get("DATA") == "alive"
        assert await node.next() is None
        assert trio.current_time() == 300.0
    assert hub.pending.pairs == {}
    assert hub.waiting == {}

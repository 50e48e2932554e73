"""Liveness of node links on the mock clock (N-7): the hello deadline, heartbeats, silence."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from protocol import Status
from specialists.node.config import NodesConfig
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


async def test_refused_frames_do_not_move_the_hello_deadline(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """N-7: a link that sends frames every 4 s but never a valid hello is closed 10 s after
    it was accepted (each refused frame used to restart the clock, so such links filled
    max_links for good)."""
    hub, _ = _hub(tmp_path)
    node_end, daemon_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.serve_link, daemon_end, "uid:0")
        node = ScriptedNode(node_end, timeout_s=100)
        for at in (0.0, 4.0, 8.0):
            await trio.sleep_until(at)
            refused = await node.call("heartbeat", "ACK")
            assert refused.get("ERROR") == "permission_denied:say hello first"
        assert await node.next() is None
        assert trio.current_time() == 10.0


@pytest.mark.parametrize(("delay_s", "ok"), [(9.999, True), (10.0, False)])
async def test_a_hello_is_taken_until_the_hello_deadline_and_not_at_it(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, delay_s: float, ok: bool
) -> None:
    """N-7: hello_timeout_s at N (just before) and N+1 (at it)."""
    hub, token = _hub(tmp_path)
    node_end, daemon_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(hub.serve_link, daemon_end, "uid:0")
        node = ScriptedNode(node_end, timeout_s=100)
        await trio.sleep(delay_s)
        if ok:
            hello = await node.call(
                "hello", "WELCOME", *identity("lab1", ("notify",)), ("TOKEN", token)
            )
            assert hello.status is Status.OK
            assert "lab1" in hub.links
            nursery.cancel_scope.cancel()
        else:
            assert await node.next() is None

"""Overload on the wire (issue 26): a frame refused ``busy`` is answered in the reader, in its
place, and audited in the connection's summary (SPEC C-3, O-4); pipelined replies leave in
few sends, all of them, in order."""

from __future__ import annotations

import json
from dataclasses import replace

import trio
import trio.testing

from csp_web.config import Config, SlotLimits, SlotsConfig, TasksConfig
from csp_web.core.api.context import Peer
from csp_web.core.wire.connection import StreamOptions, serve_connection
from protocol import Connection, Reply, Status
from tests.harness import open_harness, outbox_of

WAIT_S = 10.0


def _tight(config: Config) -> Config:
    """The web pool (TEST_OPS' sleep) at 1 running + 1 queued."""
    slots = SlotsConfig(web=SlotLimits(max_running=1, max_queued=1))
    return replace(config, tasks=TasksConfig(specialists=slots))


def _sleeps(count: int, *, ids: bool = False) -> bytes:
    return b"".join(
        f"TASK REQ:sleep 1000 IN:TEST OUT:SLEPT\n{f'ID s{n}' + chr(10) if ids else ''}\n".encode()
        for n in range(count)
    )


def _summaries(config: Config, harness_outbox: object) -> list[dict[str, object]]:
    rows = harness_outbox._store.oldest(1000)  # type: ignore[attr-defined]
    records = [json.loads(write.data) for _, write in rows if write.type == "audit"]
    return [record for record in records if record.get("summary") == "sys"]


async def test_a_refused_frame_without_id_is_answered_busy_after_the_replies_before_it(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """C-2 holds for a refusal answered in the reader (the pool full when the frame is
    read): its reply waits for the replies before it."""
    async with open_harness(_tight(config)) as harness:
        peer = harness.connect()
        with trio.fail_after(WAIT_S):
            await peer.send(_sleeps(2))
            await trio.testing.wait_all_tasks_blocked()
            assert harness.dispatcher.slots("web").full
            await peer.send(_sleeps(1))
            replies = await peer.replies(3)
    assert [r.status for r in replies] == [Status.OK, Status.OK, Status.FAIL]
    assert replies[2] == Reply(
        Status.FAIL,
        (
            ("SCOPE", "[]"),
            ("DATA", "none"),
            ("ERROR", "busy:web: 1 running, 1 queued"),
        ),
    )


async def test_refusals_are_counted_in_the_connections_audit_summary_not_one_record_each(
    config: Config, autojump_clock: trio.testing.MockClock
) -> None:
    """O-4: frames refused busy join the connection's summary under IN/REQ:busy, with their
    IDs, even with audit.sys_ops false; the admitted ones keep a record each."""
    audit = replace(config.audit, sys_ops=False, sys_summary_max_frames=1000)
    config = replace(_tight(config), audit=audit)
    async with open_harness(config) as harness:
        peer = harness.connect()
        with trio.fail_after(WAIT_S):
            await peer.send(_sleeps(2, ids=True))
            await trio.testing.wait_all_tasks_blocked()
            await peer.send(_sleeps(5, ids=True)[len(_sleeps(2, ids=True)) :])
            replies = await peer.replies(5)
            await peer.stream.aclose()
            await trio.testing.wait_all_tasks_blocked()
        outbox = outbox_of(harness.dispatcher)
        summaries = _summaries(config, outbox)
        rows = outbox._store.oldest(1000)
        per_frame = [json.loads(w.data) for _, w in rows if w.type == "audit"]
    refused = sorted(r.id or "" for r in replies if r.status is Status.FAIL)
    assert len(refused) == 3
    assert len(summaries) == 1
    summary = summaries[0]
    assert (summary["frames"], summary["failed"]) == (3, 3)
    assert summary["ops"] == {"TEST/sleep:busy": 3}
    assert summary["ids"] == [r.id for r in replies if r.status is Status.FAIL]
    assert sorted(r["id"] for r in per_frame if r.get("op") == "sleep") == sorted(
        r.id or "" for r in replies if r.status is Status.OK
    )


class _CountingStream(trio.abc.Stream):
    """A real socket's stream that counts the daemon's ``send_all`` calls."""

    def __init__(self, inner: trio.SocketStream) -> None:
        self.inner = inner
        self.sends = 0

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sends += 1
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.inner.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_pipelined_pings_from_a_socket_get_every_reply_in_order_in_few_sends(
    config: Config,
) -> None:
    """Replies queued while the reader works through one read leave together: 2,000
    pipelined pings are answered in order, at least 32 replies per send on average (one
    send per round's eight frames before issue 26)."""
    frames = 2000
    client_sock, server_sock = trio.socket.socketpair()
    client, server = trio.SocketStream(client_sock), _CountingStream(trio.SocketStream(server_sock))
    async with open_harness(config) as harness:
        options = StreamOptions(config.connection, None)
        harness.nursery.start_soon(
            serve_connection, server, harness.dispatcher, Peer("test"), options, harness.shutdown
        )
        pings = b"".join(
            f"TASK REQ:ping IN:SYS OUT:PONG\nID p{n}\n\n".encode() for n in range(frames)
        )
        codec = Connection()
        ids: list[str | None] = []
        with trio.fail_after(WAIT_S):
            async with client, trio.open_nursery() as nursery:
                nursery.start_soon(client.send_all, pings)
                while len(ids) < frames:
                    event = codec.next_event()
                    if isinstance(event, Reply):
                        assert event.get("DATA") == "pong"
                        ids.append(event.id)
                    else:
                        codec.receive_data(await client.receive_some(65536))
    assert ids == [f"p{n}" for n in range(frames)]
    assert 0 < server.sends * 32 <= frames

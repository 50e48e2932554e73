"""Instant ops never wait behind slow ones (issue 21 §5): a real daemon on its Unix socket,
its running places and a connection's in-flight places all held by ops that do not end."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import trio

from csp_web.config import Config, SlotLimits, SlotsConfig, TasksConfig
from csp_web.core.api.context import OpContext
from csp_web.core.api.fields import Params
from csp_web.core.api.ops import Op
from csp_web.core.api.replies import Result
from protocol import Connection, Reply, Status
from tests.conftest import Sink, start_daemon

HELD = 4  # running frames, in-flight frames and tool slots alike


def _holding_op(release: trio.Event, started: list[str], all_held: trio.Event) -> Op[Any]:
    """An op that holds its place until ``release``; ``all_held`` is set once HELD run."""

    async def hold(params: Params, ctx: OpContext, _: Any) -> Result:
        started.append(ctx.task_id or "")
        if len(started) == HELD:
            all_held.set()
        await release.wait()
        return Result("released", scope=("test",))

    return Op("hold", "TEST", "HELD", "tool", hold)


def _full_config(config: Config) -> Config:
    connection = replace(config.connection, max_running_frames=HELD, max_in_flight=HELD)
    slots = SlotsConfig(tool=SlotLimits(max_running=HELD, max_queued=0))
    return replace(config, connection=connection, tasks=TasksConfig(specialists=slots))


async def _replies(stream: trio.SocketStream, codec: Connection, count: int) -> list[Reply]:
    replies: list[Reply] = []
    while len(replies) < count:
        event = codec.next_event()
        if isinstance(event, Reply):
            replies.append(event)
            continue
        codec.receive_data(await stream.receive_some(65536))
    return replies


async def test_pings_behind_slow_ops_filling_every_running_place_are_answered_first(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    """L-4, L-10: 4 ops that hold until released fill max_running_frames, the connection's
    max_in_flight and the tool pool; 50 pings pipelined behind them on the same connection
    are all answered while the 4 still hold, and the 4 are answered once released."""
    release, all_held = trio.Event(), trio.Event()
    started: list[str] = []
    path = os.path.join(sock_dir, "csp.sock")
    await start_daemon(
        nursery, _full_config(config), path, [_holding_op(release, started, all_held)]
    )
    holds = b"".join(f"TASK REQ:hold IN:TEST OUT:HELD\nID h{n}\n\n".encode() for n in range(HELD))
    pings = b"".join(f"TASK REQ:ping IN:SYS OUT:PONG\nID p{n}\n\n".encode() for n in range(50))
    codec = Connection()
    with trio.fail_after(30):
        stream = await trio.open_unix_socket(path)
        async with stream:
            await stream.send_all(holds)
            await all_held.wait()
            await stream.send_all(pings)
            first = await _replies(stream, codec, 50)
            release.set()
            rest = await _replies(stream, codec, HELD)
    assert [(r.id, r.status, r.get("DATA")) for r in first] == [
        (f"p{n}", Status.OK, "pong") for n in range(50)
    ]
    assert sorted(r.id or "" for r in rest) == [f"h{n}" for n in range(HELD)]
    assert {r.get("DATA") for r in rest} == {"released"}

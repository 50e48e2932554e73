"""In-memory harness: the daemon's real connection loop and dispatcher on a stream pair."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import trio
import trio.testing

from csp_web.app.memory_path import outbox_path
from csp_web.config import Config, ConnectionConfig
from csp_web.core.api.context import OpContext, Peer
from csp_web.core.api.fields import FieldSpec, Params
from csp_web.core.api.ops import Op, bind
from csp_web.core.api.ports import MemoryPath
from csp_web.core.api.replies import Result
from csp_web.core.api.specialist import Background, Opened, Specialist
from csp_web.core.daemon.compose import compose, op_table
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.wire.connection import Shutdown, StreamOptions, serve_connection
from csp_web.memory.outbox import Outbox, open_outbox
from protocol import CLOSED, NEED_DATA, Connection, Limits, Reply

S = TypeVar("S")


class Sleeps:
    """How many test ``sleep`` ops have started in this process, with a wait on that count:
    tests wait for their ops to be running on an event the op sets, not by polling the
    dispatcher. Read ``started`` before sending, then ``wait_started(mark + n)``."""

    def __init__(self) -> None:
        self.started = 0
        self._changed: trio.Event | None = None

    def note_start(self) -> None:
        self.started += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait_started(self, count: int) -> None:
        """Return once ``started`` reaches ``count``; the caller bounds the wait."""
        while self.started < count:
            if self._changed is None:
                self._changed = trio.Event()
            await self._changed.wait()


SLEEPS = Sleeps()


async def _sleep(params: Params, ctx: OpContext, _: Any) -> Result:
    SLEEPS.note_start()
    await trio.sleep(params.integer("MS") / 1000)
    return Result(f"slept:{params.integer('MS')}", scope=("test",))


async def _boom(params: Params, ctx: OpContext, _: Any) -> Result:
    raise RuntimeError("a bug in a handler")


async def _echo(params: Params, ctx: OpContext, _: Any) -> Result:
    fields = [("TEXT", params.text("TEXT"))]
    if "COUNT" in params:
        fields.append(("COUNT", str(params.integer("COUNT"))))
    fields += [("TAG", tag) for tag in params.texts("TAG")]
    fields.append(("MODE", params.text("MODE")))
    fields.append(("LOUD", str(params.flag("LOUD")).lower()))
    if params.json("PARAMS") is not None:
        fields.append(("PARAMS", str(params.json("PARAMS"))))
    return Result("echo", scope=("test",), fields=tuple(fields))


TEST_OPS: list[Op[Any]] = [
    Op(
        "sleep",
        "TEST",
        "SLEPT",
        "web",
        _sleep,
        (FieldSpec("MS", "int", required=True, minimum=0),),
        inline="MS",
    ),
    Op("boom", "TEST", "NOTHING", "web", _boom),
    Op(
        "echo",
        "TEST",
        "ECHO",
        "tool",
        _echo,
        (
            FieldSpec("TEXT", required=True, max_chars=10),
            FieldSpec("COUNT", "int", minimum=1, maximum=10),
            FieldSpec("TAG", repeat=True),
            FieldSpec("MODE", "choice", choices=("a", "b"), default="a"),
            FieldSpec("LOUD", "bool", default=False),
            FieldSpec("PARAMS", "json"),
        ),
        inline="TEXT",
    ),
]


@dataclass
class ClientEnd:
    """The client end of a served stream, with a codec to read replies."""

    stream: trio.abc.Stream
    codec: Connection

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def reply(self) -> Reply | None:
        """The next reply, or None at EOF."""
        while True:
            event = self.codec.next_event()
            if isinstance(event, Reply):
                return event
            if event is CLOSED:
                return None
            assert event is NEED_DATA
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                data = b""
            self.codec.receive_data(data)

    async def replies(self, count: int) -> list[Reply]:
        out: list[Reply] = []
        for _ in range(count):
            reply = await self.reply()
            assert reply is not None, f"connection closed after {len(out)} replies"
            out.append(reply)
        return out


@dataclass
class Harness:
    dispatcher: Dispatcher
    nursery: trio.Nursery
    shutdown: Shutdown

    def connect(
        self,
        *,
        connection: ConnectionConfig | None = None,
        idle_timeout_s: float | None = None,
        lockstep: bool = False,
        peer: Peer | None = None,
    ) -> ClientEnd:
        """Serve a fresh connection; ``lockstep`` makes writes block until the peer reads.
        Its ``peer`` is ``Peer("test")`` unless given: connections of one name share its
        hang-up (a ticket opened on a name whose peer hung up is cancelled, C-6)."""
        pair = trio.testing.lockstep_stream_pair if lockstep else trio.testing.memory_stream_pair
        client, server = pair()
        config = connection or self.dispatcher.services.config.connection
        options = StreamOptions(config, idle_timeout_s)
        self.nursery.start_soon(
            serve_connection, server, self.dispatcher, peer or Peer("test"), options, self.shutdown
        )
        return ClientEnd(client, Connection(Limits(1 << 24, 1 << 24, 10_000)))


def given(
    services: S,
    ops: Sequence[Op[S]],
    *,
    name: str = "test",
    background: tuple[Background, ...] = (),
) -> Specialist[None, S]:
    """A specialist over ``services`` the test already opened (closed by the test): its
    ops run in the pools they name (``SlotsConfig`` fields); ``background`` as given, no
    reload."""

    @asynccontextmanager
    async def opened(section: None, config: Config) -> AsyncIterator[S]:
        yield services

    return Specialist(
        name=name,
        ops=tuple(ops),
        slots=lambda slots: slots.web,
        section=lambda config: None,
        own_section=None,
        reloadable=(),
        restart_only=(),
        open_services=opened,
        background=lambda _: background,
        stats_lines=lambda _: {},
        storage=lambda _: {},
        reload=None,
    )


def build_dispatcher(
    config: Config, memory: MemoryPath | None, ops: Sequence[Op[S]], services: S
) -> Dispatcher:
    """The core's composition (``core.compose.compose``) of ``ops`` bound to ``services``,
    with the sys ops, over ``memory``: for tests that drive a dispatcher directly."""
    specialist = given(services, ops)
    opened = Opened(tuple(bind(op, services) for op in ops), (), {}, None)
    table = op_table([specialist])
    return compose(config, [specialist], [opened], table=table, memory=memory).dispatcher


@asynccontextmanager
async def open_harness(
    config: Config, ops: Sequence[Op[Any]] | None = None, services: object = None
) -> AsyncIterator[Harness]:
    """A dispatcher over the sys ops and ``ops`` (default TEST_OPS) bound to ``services``,
    with no memory peer."""
    config = replace(config, memory=replace(config.memory, socket_path=None))
    async with (
        open_outbox(config.outbox_path, config.outbox, config.memory) as outbox,
        trio.open_nursery() as nursery,
    ):
        memory = outbox_path(config, outbox)
        chosen: Sequence[Op[Any]] = TEST_OPS if ops is None else ops
        dispatcher = build_dispatcher(config, memory, chosen, services)
        yield Harness(dispatcher, nursery, Shutdown())
        nursery.cancel_scope.cancel()


def outbox_of(dispatcher: Dispatcher) -> Outbox:
    """The dispatcher's outbox as the concrete ``Outbox`` (its durable store is what tests
    observe); the core sees only the ``Outbound`` port."""
    outbox = dispatcher.services.outbox
    assert isinstance(outbox, Outbox)
    return outbox


def files_holding(root: str | Path, secret: str) -> list[Path]:
    """Every file under ``root`` (a state dir: the outbox's SQLite and its journal, the
    cache, the stores) whose raw bytes hold ``secret``."""
    needle = secret.encode()
    return [p for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes()]

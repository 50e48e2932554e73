"""A daemon serving only the node ops on real Unix sockets, and a scripted node that speaks
the link's frames by hand (to break the protocol on purpose)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import trio

from csp_web.app.memory_path import open_memory_path
from csp_web.client.trio_client import Client, open_client
from csp_web.config import Config, section_of, with_section
from csp_web.core.daemon.compose import open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.infra.redis_link import RedisLink
from protocol import CLOSED, NEED_DATA, Connection, Frame, Limits, Reply, Status, Task, serialize
from specialists.node import NODE
from specialists.node.config import NodesConfig
from specialists.node.services import NodeServices, open_node_services
from tests.harness import given

CAPS = ("camera_snap", "location_get", "notify", "screen_record")


@dataclass
class NodeDaemon:
    client_path: str
    node_path: str
    services: NodeServices
    scope: trio.CancelScope


def node_config(config: Config, sock_dir: str, **nodes: Any) -> Config:
    settings = replace(NodesConfig(), socket_path=os.path.join(sock_dir, "nodes.sock"), **nodes)
    return with_section(config, "nodes", settings)


async def start_node_daemon(
    nursery: trio.Nursery, config: Config, sock_dir: str, *, link: RedisLink | None = None
) -> NodeDaemon:
    """The daemon with the node ops, its node socket and TLS as its ``nodes`` section says, in
    a fleet on ``link`` (redis.url; its events served by the caller) when given."""
    scope = trio.CancelScope()
    client_path = os.path.join(sock_dir, "csp.sock")
    opened: list[NodeServices] = []

    async def run(*, task_status: trio.TaskStatus[Dispatcher]) -> None:
        with scope:
            async with open_node_services(
                section_of(config, "nodes", NodesConfig), config, link=link
            ) as services:
                opened.append(services)
                nodes = given(services, NODE.ops, background=NODE.background(services))
                memory = open_memory_path(config)
                async with open_daemon(config, (nodes,), memory=memory) as daemon:
                    await serve(
                        daemon, stdio=None, socket_path=client_path, task_status=task_status
                    )

    await nursery.start(run)
    node_path = section_of(config, "nodes", NodesConfig).socket_path
    assert node_path is not None
    return NodeDaemon(client_path, node_path, opened[0], scope)


class ScriptedNode:
    """One node connection driven frame by frame."""

    def __init__(self, stream: trio.abc.Stream, *, timeout_s: float = 10.0) -> None:
        self.stream = stream
        self.timeout_s = timeout_s
        self.codec = Connection(Limits())
        self.ids = iter(range(1, 1 << 30))

    async def send(self, frame: Frame) -> None:
        await self.stream.send_all(serialize(frame))

    async def task(self, req: str, out: str, *fields: tuple[str, str], domain: str = "NODE") -> str:
        task_id = f"n-{next(self.ids)}"
        await self.send(Task(req, domain, out, None, (("ID", task_id), *fields)))
        return task_id

    async def next(self) -> Frame | None:
        """The next frame from the daemon, or None at EOF."""
        with trio.fail_after(self.timeout_s):
            while True:
                event = self.codec.next_event()
                if event is CLOSED:
                    return None
                if event is not NEED_DATA:
                    assert isinstance(event, Task | Reply)
                    return event
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                self.codec.receive_data(data)

    async def call(self, req: str, out: str, *fields: tuple[str, str]) -> Reply:
        await self.task(req, out, *fields)
        reply = await self.next()
        assert isinstance(reply, Reply), reply
        return reply

    async def next_task(self) -> Task:
        frame = await self.next()
        assert isinstance(frame, Task), frame
        return frame

    async def answer(self, task: Task, status: Status, *fields: tuple[str, str]) -> None:
        await self.send(Reply(status, (("ID", task.id or ""), *fields)))


def identity(name: str, caps: tuple[str, ...] = CAPS) -> tuple[tuple[str, str], ...]:
    return (("NAME", name), ("PLATFORM", "Linux/test"), *(("CAPABILITY", c) for c in caps))


@asynccontextmanager
async def scripted(path: str) -> AsyncIterator[ScriptedNode]:
    stream = await trio.open_unix_socket(path)
    async with stream:
        yield ScriptedNode(stream)


async def nodes_op(client: Client, action: str, *fields: tuple[str, str]) -> Reply:
    return await client.call(Task("nodes", "SYS", "NODES", None, (("ACTION", action), *fields)))


async def pair(
    daemon: NodeDaemon, name: str, caps: tuple[str, ...] = CAPS
) -> tuple[ScriptedNode, str]:
    """Pair a scripted node through the whole exchange; returns it (connected: the caller
    closes ``node.stream``) and its token."""
    stream = await trio.open_unix_socket(daemon.node_path)
    node = ScriptedNode(stream)
    reply = await node.call("pair", "PAIR_CODE", *identity(name, caps))
    assert reply.status is Status.OK, reply
    code = (reply.get("DATA") or "").removeprefix("code:")
    async with open_client(daemon.client_path) as client, trio.open_nursery() as nursery:
        approved: list[Reply] = []

        async def approve() -> None:
            approved.append(await nodes_op(client, "approve", ("CODE", code)))

        nursery.start_soon(approve)
        paired = await node.next_task()
        assert (paired.req, paired.domain, paired.out) == ("paired", "NODE", "ACK")
        await node.answer(paired, Status.OK, ("SCOPE", "[node]"), ("DATA", "stored"))
    assert approved[0].status is Status.OK, approved[0]
    return node, paired.get("TOKEN") or ""


def node_task(name: str, action: str, params: str | None = None) -> Task:
    fields = [("ACTION", action), ("NODE", name)]
    if params is not None:
        fields.append(("PARAMS", params))
    return Task("node", "TOOL", "NODE_RESULT", None, tuple(fields))

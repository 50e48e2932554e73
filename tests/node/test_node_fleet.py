"""Nodes across a fleet (redis.url): two in-process daemons on one real redis-server, each
with its own client and node sockets; nodes connect to daemon A, clients ask daemon B
(protocol/NODES.md N-16 to N-18). The reference node is a real process; the scripted
node speaks the link's frames by hand where a test must hold a task open."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace

import pytest
import redis
import trio

from csp_web.client.trio_client import open_client
from csp_web.config import Config
from csp_web.infra.redis_link import RedisLink
from protocol import Reply, Status
from specialists.node.fleet import NodeFleet
from tests.redis.conftest import (  # noqa: F401  (fixtures)
    OpenLink,
    open_link,
    redis_config,
    redis_server,
)
from tests.redis_server import RedisServer

from ..conftest import Sink
from .procs import child, csp_web
from .support import (
    NodeDaemon,
    ScriptedNode,
    identity,
    node_config,
    node_task,
    nodes_op,
    pair,
    scripted,
    start_node_daemon,
)

CAMERA = "testsrc=size=320x240:rate=1"


@dataclass
class Fleet:
    a: NodeDaemon
    b: NodeDaemon
    link_a: RedisLink
    link_b: RedisLink
    directory: str


def fleet_of(daemon: NodeDaemon) -> NodeFleet:
    assert daemon.services.fleet is not None
    return daemon.services.fleet


@asynccontextmanager
async def open_fleet(
    config: Config,
    sock_dir: str,
    open_link: OpenLink,  # noqa: F811
    redis: dict[str, object] | None = None,
    **nodes: object,
) -> AsyncIterator[Fleet]:
    """Daemons A and B on one Redis, each with its own state, client and node sockets;
    ``redis`` overrides their links' settings, ``nodes`` their ``nodes`` sections."""
    overrides = redis or {}
    async with (
        open_link(**overrides) as link_a,
        open_link(**overrides) as link_b,
        trio.open_nursery() as nursery,
    ):
        daemons = []
        for name, link in (("a", link_a), ("b", link_b)):
            directory = os.path.join(sock_dir, name)
            os.mkdir(directory, 0o700)
            state = replace(config.daemon, state_dir=os.path.join(directory, "state"))
            each = node_config(replace(config, daemon=state), directory, **nodes)
            daemons.append(await start_node_daemon(nursery, each, directory, link=link))
        yield Fleet(daemons[0], daemons[1], link_a, link_b, sock_dir)
        nursery.cancel_scope.cancel()


OpenFleet = Callable[..., AbstractAsyncContextManager[Fleet]]


@pytest.fixture
def two_daemons(
    config: Config,
    sink: Sink,
    sock_dir: str,
    open_link: OpenLink,  # noqa: F811
    redis_server: RedisServer,  # noqa: F811
) -> OpenFleet:
    """``async with two_daemons(redis=..., **nodes) as fleet``: ``open_fleet`` on the test's
    Redis, Memory Specialist and socket folder."""
    return functools.partial(open_fleet, config, sock_dir, open_link)


async def paired_at_a(fleet: Fleet, name: str = "lab1") -> ScriptedNode:
    """A scripted node paired and connected at daemon A, its link registered fleet-wide."""
    node, _ = await pair(fleet.a, name)
    await wait_registered(fleet.a, name)
    return node


async def wait_registered(daemon: NodeDaemon, name: str, registered: bool = True) -> None:
    """Until ``daemon``'s registry entry for ``name`` is written (or removed), bounded."""
    fleet = fleet_of(daemon)
    with trio.fail_after(10):
        while (name in fleet.registered) != registered or fleet._fresh or fleet._gone:
            await fleet.synced.wait()


async def ask(daemon: NodeDaemon, task_name: str, action: str, params: str | None = None) -> Reply:
    async with open_client(daemon.client_path) as client:
        return await client.call(node_task(task_name, action, params), timeout_s=60)


def link_entry(server: RedisServer, name: str) -> dict[str, str] | None:
    return server.json_at(f"csp-web:node:link:{name}")  # type: ignore[no-any-return]


async def test_a_reference_node_on_daemon_a_pairs_and_runs_tasks_asked_of_daemon_b(
    two_daemons: OpenFleet,
    sock_dir: str,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """N-16, N-17, N-18: approved at B, registered by A, tasks and media through B."""
    async with two_daemons() as fleet:
        token_file = os.path.join(sock_dir, "lab1.token")
        argv = csp_web(
            "node", "run", "--connect", fleet.a.node_path, "--name", "lab1",
            "--token-file", token_file, "--location", "41.01,28.97,25", "--camera-source", CAMERA,
        )  # fmt: skip
        async with child(argv) as node:
            code = (await node.wait_for(r"pairing code: (\S+)"))[1]
            async with open_client(fleet.b.client_path) as client:
                approved = await nodes_op(client, "approve", ("CODE", code))
            assert approved.get("DATA") == "approved:lab1", approved
            await node.wait_for("paired; token stored")
            await wait_registered(fleet.a, "lab1")
            assert link_entry(redis_server, "lab1") == {"daemon": fleet.link_a.daemon_id}
            assert 0 < lease_left_ms(redis_server, "lab1") <= 30_000  # ends with a dead daemon

            location = await ask(fleet.b, "lab1", "location_get")
            assert location.status is Status.OK, location
            assert location.get("DATA") == "lat:41.010000,lon:28.970000"
            assert location.get("SOURCE") == "fixed"
            assert location.get("NODE") == "lab1"

            photo = await ask(fleet.b, "lab1", "camera_snap", '{"quality":0.5}')
            assert photo.status is Status.OK, photo
            path = (photo.get("DATA") or "").removeprefix("media:")
            assert path.startswith(os.path.join(sock_dir, "b", "state", "media"))  # B's own
            with open(path, "rb") as file:
                data = file.read()
            assert data[:3] == b"\xff\xd8\xff"
            assert photo.get("MEDIA_SHA256") == hashlib.sha256(data).hexdigest()
            assert os.listdir(os.path.join(sock_dir, "a", "state")).count("media") == 0

            missing = await ask(fleet.b, "lab1", "notify", '{"title":"t"}')
            assert missing.get("ERROR") == "node_capability_missing:notify"  # A's checks

            async with open_client(fleet.b.client_path) as client:
                listed = await nodes_op(client, "list")
                (row,) = [json.loads(line) for line in listed.get_all("NODE")]
                assert (row["name"], row["connected"]) == ("lab1", True)
                revoked = await nodes_op(client, "revoke", ("NAME", "lab1"))
            assert revoked.get("DATA") == "revoked:lab1"
            assert await node.wait() == 3  # A cut its link at B's revoke
        gone = await ask(fleet.b, "lab1", "location_get")
        assert gone.get("ERROR") == "node_unknown:lab1"
        await wait_registered(fleet.a, "lab1", registered=False)
        assert link_entry(redis_server, "lab1") is None


def lease_left_ms(server: RedisServer, name: str) -> int:
    with server.client() as client:
        return int(client.pttl(f"csp-web:node:link:{name}"))


async def test_a_node_that_reconnects_to_another_daemon_has_its_older_link_cut(
    two_daemons: OpenFleet,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """N-16, N-13: the newer link, at B, replaces the one at A; tasks asked of A go to B."""
    async with two_daemons() as fleet:
        old, token = await pair(fleet.a, "lab1")
        await wait_registered(fleet.a, "lab1")
        async with scripted(fleet.b.node_path) as new:
            welcome = await new.call("hello", "WELCOME", *identity("lab1"), ("TOKEN", token))
            assert welcome.get("DATA") == "welcome", welcome
            assert await old.next() is None  # A cut it at B's node_attach
            await wait_registered(fleet.b, "lab1")
            assert link_entry(redis_server, "lab1") == {"daemon": fleet.link_b.daemon_id}
            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer_location, new)
                reply = await ask(fleet.a, "lab1", "location_get")
                nursery.cancel_scope.cancel()
        await old.stream.aclose()
    assert reply.get("DATA") == "lat:1.5,lon:2.5", reply


async def test_with_redis_stopped_a_local_node_still_works_and_a_peers_task_fails_clearly(
    two_daemons: OpenFleet,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """N-18: no hang; the refusal is counted in B's NODES stats line."""
    async with two_daemons() as fleet:
        node = await paired_at_a(fleet)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_location, node)
            redis_server.pause()
            try:
                here = await ask(fleet.a, "lab1", "location_get")
                there = await ask(fleet.b, "lab1", "location_get")
                async with open_client(fleet.b.client_path) as client:
                    revoke = await nodes_op(client, "revoke", ("NAME", "lab1"))
            finally:
                redis_server.resume()
            nursery.cancel_scope.cancel()
        await node.stream.aclose()
    assert here.status is Status.OK, here
    assert here.get("DATA") == "lat:1.5,lon:2.5"
    assert there.get("ERROR") in (
        "node_unavailable:lab1: not connected here, and redis is unavailable",
        "node_unavailable:lab1: not connected here, and the fleet's events are down",
    )
    assert "route_failures:1" in fleet.b.services.stats_line()
    assert revoke.get("ERROR") == "not_available:the fleet's node store is unavailable (redis)"


async def test_a_forwarded_task_whose_node_does_not_answer_ends_at_its_deadline(
    two_daemons: OpenFleet,
) -> None:
    """N-17: the holder took it, its node is silent: the caller's deadline ends the wait."""
    async with two_daemons() as fleet:
        node = await paired_at_a(fleet)
        task = node_task("lab1", "location_get")
        task = replace(task, fields=(*task.fields, ("TIMEOUT_MS", "300")))
        async with open_client(fleet.b.client_path) as client:
            with trio.fail_after(30):
                reply = await client.call(task, timeout_s=30)
        held = await node.next_task()  # it did reach the node, through A
        await node.stream.aclose()
    assert held.req == "location_get"
    assert reply.get("ERROR") == "timeout_exceeded:300ms"


async def answer_location(node: ScriptedNode) -> None:
    while True:
        task = await node.next_task()
        await node.answer(task, Status.OK, ("DATA", "lat:1.5,lon:2.5"), ("SOURCE", "fixed"))


async def test_a_holder_that_does_not_answer_fails_the_task_node_unavailable_after_node_ack_s(
    two_daemons: OpenFleet,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """N-17: a daemon that died still has its lease for a while; the caller does not hang."""
    async with two_daemons(redis={"node_ack_s": 0.3}) as fleet:
        node, _ = await pair(fleet.a, "lab1")
        await node.stream.aclose()
        await wait_registered(fleet.a, "lab1", registered=False)
        with redis_server.client() as client:
            client.set("csp-web:node:link:lab1", json.dumps({"daemon": "a-dead-daemon"}), px=60_000)
        with trio.fail_after(30):
            reply = await ask(fleet.b, "lab1", "location_get")
    ack_s = fleet.link_b.config.node_ack_s
    detail = f"lab1: its daemon a-dead-daemon did not answer in {ack_s:g} s"
    assert reply.get("ERROR") == f"node_unavailable:{detail}"


async def test_forwarded_tasks_run_up_to_max_forwarded_tasks_and_the_next_is_busy(
    two_daemons: OpenFleet,
) -> None:
    """N-17: the holder's limit holds for its peers' tasks (N = 1 taken, N + 1 busy)."""
    async with two_daemons(max_forwarded_tasks=1) as fleet:
        node = await paired_at_a(fleet)
        replies: list[Reply] = []
        async with trio.open_nursery() as nursery:

            async def first() -> None:
                replies.append(await ask(fleet.b, "lab1", "location_get"))

            nursery.start_soon(first)
            held = await node.next_task()  # the first is at the node: one forwarded task runs
            second = await ask(fleet.b, "lab1", "location_get")
            await node.answer(held, Status.OK, ("DATA", "lat:1.5,lon:2.5"), ("SOURCE", "fixed"))
        await node.stream.aclose()
    assert second.get("ERROR") == (
        "busy:1 forwarded node tasks run here (nodes.max_forwarded_tasks)"
    )
    assert replies[0].status is Status.OK, replies[0]
    assert "forward_refused:1" in fleet.a.services.stats_line()


async def test_a_malformed_task_from_a_peer_gets_an_answer_and_the_holder_keeps_serving(
    two_daemons: OpenFleet,
    redis_server: RedisServer,  # noqa: F811
) -> None:
    """N-17: an approve without its code, a deadline that is no number, or NaN (which
    once raised ValueError out of move_on_after and ended the holder's node services)."""
    async with two_daemons() as fleet:
        node = await paired_at_a(fleet)
        holder = fleet.link_a.daemon_id
        client = redis.Redis(unix_socket_path=redis_server.socket)
        pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
        pubsub.subscribe("csp-web:events")
        malformed: tuple[tuple[str, dict[str, object]], ...] = (
            ("r1", {"op": "approve", "deadline_s": 5}),
            ("r2", {"deadline_s": "x"}),
            ("r3", {"deadline_s": "nan"}),
            ("r4", {"deadline_s": float("nan")}),
        )
        for rid, extra in malformed:
            bad = {"from": "peer", "kind": "node_task", "to": holder, "rid": rid, **extra}
            client.publish("csp-web:events", json.dumps(bad))
        answers = await trio.to_thread.run_sync(read_answers, pubsub, 5)
        pubsub.close()
        client.close()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(answer_location, node)
            reply = await ask(fleet.b, "lab1", "location_get")
            nursery.cancel_scope.cancel()
        await node.stream.aclose()
    assert {"rid": "r1", "ok": False, "code": "internal_error"} in answers
    assert reply.get("DATA") == "lat:1.5,lon:2.5", reply


def read_answers(pubsub: redis.client.PubSub, count: int) -> list[dict[str, object]]:
    """The first ``count`` answers (acceptances and results) on the channel, bounded."""
    answers: list[dict[str, object]] = []
    deadline = time.monotonic() + 10
    while len(answers) < count and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1.0)
        if message is None or message["type"] != "message":
            continue
        event = json.loads(message["data"])
        if event["kind"] == "node_answer":
            keys = ("rid", "ok", "code")
            answers.append({k: event[k] for k in keys if k in event})
    return answers

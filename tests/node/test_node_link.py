"""The node link against a real daemon on real Unix sockets, the node scripted frame by frame
(so each rule can be broken on purpose): pairing, hello, tasks, media, revoke."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from functools import partial

import pytest
import trio

from csp_web.client.trio_client import open_client
from csp_web.config import Config
from protocol import Reply, Status
from specialists.node.store import STORE_FILE, hash_token

from ..conftest import Sink
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


@pytest.fixture
async def nd(nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str) -> NodeDaemon:
    return await start_node_daemon(nursery, node_config(config, sock_dir), sock_dir)


def error(reply: Reply) -> str:
    return reply.get("ERROR") or ""


async def test_pairing_gives_a_code_then_a_token_stored_hashed_in_a_private_file(
    nd: NodeDaemon, config: Config
) -> None:
    """N-4, N-5: pair → code; approve → the token goes to the waiting node, stored hashed."""
    async with scripted(nd.node_path) as node:
        reply = await node.call("pair", "PAIR_CODE", *identity("lab1"))
        assert reply.status is Status.OK
        data = reply.get("DATA") or ""
        assert data.startswith("code:")
        assert len(data) == len("code:XXXX-XXXX")
        assert reply.get("EXPIRES_S") == "300"
        async with open_client(nd.client_path) as client, trio.open_nursery() as nursery:
            results: list[Reply] = []

            async def approve() -> None:
                code = data.removeprefix("code:").lower()  # typed carelessly: still the code
                results.append(await nodes_op(client, "approve", ("CODE", code)))

            nursery.start_soon(approve)
            paired = await node.next_task()
            token = paired.get("TOKEN") or ""
            assert paired.get("NODE") == "lab1"
            assert len(token) == 43
            await node.answer(paired, Status.OK, ("SCOPE", "[node]"), ("DATA", "stored"))
        assert results[0].fields[-2:] == (("DATA", "approved:lab1"), ("NODE", "lab1"))
        beat = await node.call("heartbeat", "ACK")
        assert (beat.status, beat.get("DATA")) == (Status.OK, "alive")
    folder = os.path.join(config.daemon.state_dir, "nodes")
    path = os.path.join(folder, STORE_FILE)
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, encoding="utf-8") as file:
        text = file.read()
    assert token not in text
    assert hash_token(token) in text


async def test_a_used_or_unknown_code_is_pair_code_invalid(nd: NodeDaemon) -> None:
    """N-5: codes are single use."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client:
        reply = await nodes_op(client, "approve", ("CODE", "ZZZZ-ZZZZ"))
        assert error(reply) == "pair_code_invalid:unknown, expired or used"


async def test_hello_with_the_stored_token_reconnects_and_list_shows_the_node(
    nd: NodeDaemon,
) -> None:
    """N-2, N-14: reconnect with the token; list shows name, platform, capabilities."""
    node, token = await pair(nd, "lab1")
    await node.stream.aclose()
    async with scripted(nd.node_path) as again:
        caps = ("location_get", "notify")
        reply = await again.call("hello", "WELCOME", *identity("lab1", caps), ("TOKEN", token))
        assert reply.fields == (
            ("ID", "n-1"),
            ("SCOPE", "[node]"),
            ("DATA", "welcome"),
            ("NODE", "lab1"),
            ("HEARTBEAT_S", "10"),
        )
        async with open_client(nd.client_path) as client:
            listing = await nodes_op(client, "list")
    assert listing.get("DATA") == "nodes:1"
    entry = json.loads(listing.get("NODE") or "")
    assert entry["name"] == "lab1"
    assert entry["platform"] == "Linux/test"
    assert entry["capabilities"] == list(caps)
    assert entry["connected"] is True


async def test_another_nodes_token_is_refused_and_the_link_closed(nd: NodeDaemon) -> None:
    """N-5: a token is good only for its own name."""
    node, token = await pair(nd, "lab1")
    async with node.stream, scripted(nd.node_path) as thief:
        reply = await thief.call("hello", "WELCOME", *identity("lab2"), ("TOKEN", token))
        assert error(reply) == "permission_denied:token refused"
        assert await thief.next() is None


async def test_nodes_are_not_clients_and_cannot_reach_the_daemons_ops(nd: NodeDaemon) -> None:
    """N-3: only link frames; the daemon's ops are unknown on a node link."""
    async with scripted(nd.node_path) as node:
        beat = await node.call("heartbeat", "ACK")
        assert error(beat) == "permission_denied:say hello first"
        await node.task("ping", "PONG", domain="SYS")
        ping = await node.next()
        assert isinstance(ping, Reply)
        assert error(ping) == "unknown_op:a node may send only hello, pair, heartbeat, media"
    node, _ = await pair(nd, "lab1")
    async with node.stream:
        await node.task(
            "node", "NODE_RESULT", ("ACTION", "notify"), ("NODE", "lab1"), domain="TOOL"
        )
        refused = await node.next()
        assert isinstance(refused, Reply)
        assert error(refused).startswith("unknown_op:")


async def test_pair_requests_past_the_limit_are_rate_limited(nd: NodeDaemon) -> None:
    """N-6: 5 attempts per source per window pass, the 6th is rate_limited (N and N+1)."""
    for n in range(5):
        async with scripted(nd.node_path) as node:
            reply = await node.call("pair", "PAIR_CODE", *identity(f"n{n}"))
            assert reply.status is Status.OK
    async with scripted(nd.node_path) as node:
        reply = await node.call("pair", "PAIR_CODE", *identity("n6"))
        assert error(reply) == "rate_limited:too many pairing attempts"
        assert await node.next() is None


async def test_unknown_unavailable_and_missing_capability_are_told_apart(nd: NodeDaemon) -> None:
    """N-8: node_unknown, node_unavailable, node_capability_missing."""
    node, _ = await pair(nd, "lab1", caps=("notify",))
    async with open_client(nd.client_path) as client:
        link = nd.services.hub.links["lab1"]
        async with node.stream:
            missing = await client.call(node_task("lab1", "camera_snap"))
            assert error(missing) == "node_capability_missing:camera_snap"
            unknown = await client.call(node_task("lab9", "notify"))
            assert error(unknown) == "node_unknown:lab9"
        with trio.fail_after(5):
            await link.ended.wait()
        gone = await client.call(node_task("lab1", "notify"))
        assert error(gone) == "node_unavailable:lab1"
        assert gone.fields[1:3] == (("SCOPE", "[node]"), ("DATA", "none"))


async def _serve_one(
    node: ScriptedNode, *fields: tuple[str, str], status: Status = Status.OK
) -> dict[str, object]:
    task = await node.next_task()
    assert (task.domain, task.out, task.id) == ("NODE", "NODE_RESULT", "d-2")  # d-1: paired
    await node.answer(task, status, *fields)
    return {"action": task.req, "params": json.loads(task.get("PARAMS") or "")}


async def test_location_reply_passes_its_schema_and_reaches_the_client(nd: NodeDaemon) -> None:
    """N-8, N-11: the action goes to the node with its PARAMS; the reply is relayed."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        seen: list[dict[str, object]] = []

        async def serve() -> None:
            seen.append(
                await _serve_one(
                    node,
                    ("DATA", "lat:41.5,lon:-2.25"),
                    ("SOURCE", "fixed"),
                    ("ACCURACY_M", "10.0"),
                    ("WORK_MS", "0.5"),
                )
            )

        n.start_soon(serve)
        reply = await client.call(node_task("lab1", "location_get", "{}"))
    assert seen == [{"action": "location_get", "params": {}}]
    assert reply.status is Status.OK
    keys = [k for k, _ in reply.fields]
    assert keys == ["ID", "SCOPE", "DATA", "NODE", "EXEC_TIME", "SOURCE", "ACCURACY_M", "NODE_TIME"]
    assert reply.get("DATA") == "lat:41.5,lon:-2.25"
    assert reply.get("SOURCE") == "fixed"


async def test_params_with_a_lone_surrogate_is_invalid_field_and_never_reaches_the_node(
    nd: NodeDaemon,
) -> None:
    """V-2 for a JSON field: the frame to the node could not be serialized (internal_error,
    a traceback); refused before the node is asked, its link serves the next task."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client:
        refused = await client.call(node_task("lab1", "notify", '{"title":"\\ud800"}'))
        assert error(refused) == "invalid_field:PARAMS holds a lone surrogate"
        async with trio.open_nursery() as n:
            seen: list[dict[str, object]] = []

            async def serve() -> None:
                fields = (("DATA", "lat:1,lon:2"), ("SOURCE", "fixed"), ("WORK_MS", "0.5"))
                seen.append(await _serve_one(node, *fields))

            n.start_soon(serve)
            reply = await client.call(node_task("lab1", "location_get", "{}"))
    assert seen == [{"action": "location_get", "params": {}}]  # d-2: the refused one never went
    assert reply.status is Status.OK, reply


@pytest.mark.parametrize(
    "fields",
    [
        (("DATA", "lat:91x,lon:0"), ("SOURCE", "fixed")),
        (("DATA", "lat:1,lon:2"), ("SOURCE", "gps")),
        (("DATA", "lat:1,lon:2"), ("SOURCE", "fixed"), ("EXTRA", "x")),
        (("DATA", "lat:1,lon:2"), ("SOURCE", "fixed"), ("SOURCE", "fixed")),
        (("DATA", "media"), ("MEDIA", f"sha256:{'0' * 64},bytes:0,type:image/png")),
    ],
)
async def test_a_reply_breaking_its_schema_is_node_error(
    nd: NodeDaemon, fields: tuple[tuple[str, str], ...]
) -> None:
    """N-11: replies are untrusted input."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        n.start_soon(_serve_one, node, *fields)
        reply = await client.call(node_task("lab1", "location_get"))
    assert error(reply).startswith("node_error:invalid reply:")


@pytest.mark.parametrize(
    ("code", "expected"),
    [("command_failed", "command_failed:node: exit 1"), ("shutting_down", "node_error:")],
)
async def test_a_node_failure_keeps_only_codes_a_node_may_report(
    nd: NodeDaemon, code: str, expected: str
) -> None:
    """N-12."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        fields = (("DATA", "none"), ("ERROR", f"{code}:exit 1"))
        n.start_soon(partial(_serve_one, node, *fields, status=Status.FAIL))
        reply = await client.call(node_task("lab1", "notify", '{"title":"t"}'))
    assert error(reply).startswith(expected)


async def _send_media(
    node: ScriptedNode, task_id: str, chunks: list[bytes], mime: str = "image/jpeg"
) -> list[Reply]:
    acks = []
    for seq, chunk in enumerate(chunks):
        encoded = base64.b64encode(chunk).decode()
        acks.append(
            await node.call("media", "ACK", ("FOR", task_id), ("SEQ", str(seq)), ("CHUNK", encoded))
        )
    return acks


async def test_media_is_chunked_checked_and_saved_private(nd: NodeDaemon, config: Config) -> None:
    """N-9: chunks, size and checksum checked, the file 0600 under <state_dir>/media."""
    node, _ = await pair(nd, "lab1")
    photo = os.urandom(200_000)
    chunks = [photo[i : i + 65536] for i in range(0, len(photo), 65536)]
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:

        async def serve() -> None:
            task = await node.next_task()
            acks = await _send_media(node, task.id or "", chunks)
            assert [a.get("DATA") for a in acks][-1] == f"bytes:{len(photo)}"
            media = f"sha256:{hashlib.sha256(photo).hexdigest()},bytes:{len(photo)},type:image/jpeg"
            await node.answer(task, Status.OK, ("DATA", "media"), ("MEDIA", media))

        n.start_soon(serve)
        reply = await client.call(
            node_task("lab1", "camera_snap", '{"facing":"back","quality":0.8}')
        )
    path = (reply.get("DATA") or "").removeprefix("media:")
    assert path.startswith(os.path.join(config.daemon.state_dir, "media") + "/")
    assert path.endswith(".jpg")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path, "rb") as file:
        assert file.read() == photo
    assert reply.get("MEDIA_SHA256") == hashlib.sha256(photo).hexdigest()


async def test_media_with_a_wrong_checksum_is_node_error(nd: NodeDaemon) -> None:
    """N-10: the checksum is checked."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:

        async def serve() -> None:
            task = await node.next_task()
            await _send_media(node, task.id or "", [b"abc"])
            media = f"sha256:{hashlib.sha256(b'abd').hexdigest()},bytes:3,type:image/jpeg"
            await node.answer(task, Status.OK, ("DATA", "media"), ("MEDIA", media))

        n.start_soon(serve)
        reply = await client.call(node_task("lab1", "camera_snap"))
    assert error(reply) == "node_error:invalid reply: media checksum mismatch"


@pytest.mark.parametrize(("size", "ok"), [(1000, True), (1001, False)])
async def test_media_over_the_cap_is_too_large_at_once(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str, size: int, ok: bool
) -> None:
    """N-10: max_media_bytes at N passes, N+1 fails the chunk and the task at once."""
    nd = await start_node_daemon(
        nursery, node_config(config, sock_dir, max_media_bytes=1000), sock_dir
    )
    node, _ = await pair(nd, "lab1")
    data = b"x" * size
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:

        async def serve() -> None:
            task = await node.next_task()
            acks = await _send_media(node, task.id or "", [data[:600], data[600:]])
            if ok:
                media = f"sha256:{hashlib.sha256(data).hexdigest()},bytes:{size},type:image/png"
                await node.answer(task, Status.OK, ("DATA", "media"), ("MEDIA", media))
            else:  # the node's reply never comes: the task already failed
                assert error(acks[1]) == "too_large:media over 1000 bytes"

        n.start_soon(serve)
        reply = await client.call(node_task("lab1", "camera_snap"))
    if ok:
        assert reply.status is Status.OK
    else:
        assert error(reply) == "too_large:media over 1000 bytes"


@pytest.mark.parametrize(("size", "ok"), [(96 * 1024, True), (96 * 1024 + 1, False)])
async def test_a_chunk_over_max_chunk_bytes_is_too_large(
    nd: NodeDaemon, size: int, ok: bool
) -> None:
    """N-10: max_chunk_bytes at N and N+1."""
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        results: list[Reply] = []

        async def run() -> None:
            results.append(await client.call(node_task("lab1", "camera_snap")))

        n.start_soon(run)
        task = await node.next_task()
        (ack,) = await _send_media(node, task.id or "", [b"y" * size])
        if ok:
            assert ack.get("DATA") == f"bytes:{size}"
            n.cancel_scope.cancel()
        else:
            assert error(ack) == f"too_large:a chunk holds at most {96 * 1024} bytes"
    if not ok:
        assert error(results[0]).startswith("too_large:")


async def test_a_chunk_for_no_waiting_task_is_invalid_field(nd: NodeDaemon) -> None:
    """N-10."""
    node, _ = await pair(nd, "lab1")
    async with node.stream:
        (ack,) = await _send_media(node, "d-99", [b"z"])
        assert error(ack) == "invalid_field:no task d-99 awaits media"


async def test_a_node_dying_mid_task_fails_it_node_unavailable_at_once(nd: NodeDaemon) -> None:
    """N-13: no wait for the deadline."""
    node, _ = await pair(nd, "lab1")
    async with open_client(nd.client_path) as client, trio.open_nursery() as n:
        results: list[Reply] = []

        async def run() -> None:
            task = node_task("lab1", "screen_record", '{"duration_s":30}')
            results.append(await client.call(task, timeout_s=5))

        n.start_soon(run)
        await node.next_task()
        await node.stream.aclose()
    assert error(results[0]) == "node_unavailable:lab1"


async def test_revoke_cuts_the_link_at_once_and_forgets_the_token(nd: NodeDaemon) -> None:
    """N-14, N-13: revoke fails waiting tasks and closes the link; the token stops working."""
    node, token = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client, trio.open_nursery() as n:
        results: list[Reply] = []

        async def run() -> None:
            results.append(await client.call(node_task("lab1", "notify", '{"title":"t"}')))

        n.start_soon(run)
        await node.next_task()
        revoked = await nodes_op(client, "revoke", ("NAME", "lab1"))
        assert revoked.get("DATA") == "revoked:lab1"
        assert await node.next() is None
    assert error(results[0]) == "node_unavailable:lab1"
    async with scripted(nd.node_path) as again, open_client(nd.client_path) as client:
        reply = await again.call("hello", "WELCOME", *identity("lab1"), ("TOKEN", token))
        assert error(reply) == "permission_denied:token refused"
        unknown = await nodes_op(client, "revoke", ("NAME", "lab1"))
        assert error(unknown) == "node_unknown:lab1"


async def test_a_newer_link_under_the_same_name_replaces_the_older(nd: NodeDaemon) -> None:
    """N-13: the reconnecting node wins; the stale link is closed."""
    node, token = await pair(nd, "lab1")
    async with node.stream, scripted(nd.node_path) as again:
        reply = await again.call("hello", "WELCOME", *identity("lab1"), ("TOKEN", token))
        assert reply.status is Status.OK
        assert await node.next() is None
        assert nd.services.hub.links["lab1"].stream is not None


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (identity("Bad Name"), "invalid_field:NAME must be"),
        (identity("ok", ("teleport",)), "invalid_field:CAPABILITY must name"),
        ((*identity("ok"), ("COLOR", "red")), "unknown_field:COLOR"),
        ((*identity("ok"), ("TOKEN", "x" * 43)), "unknown_field:TOKEN"),
    ],
)
async def test_a_pair_request_with_bad_fields_is_refused(
    nd: NodeDaemon, fields: tuple[tuple[str, str], ...], expected: str
) -> None:
    """N-2, N-4: names, capabilities and fields are checked."""
    async with scripted(nd.node_path) as node:
        reply = await node.call("pair", "PAIR_CODE", *fields)
        assert error(reply).startswith(expected)


async def test_the_node_socket_refuses_a_uid_not_allowed(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    """N-1: the peer's uid (SO_PEERCRED) must be in nodes.allowed_uids."""
    other = os.geteuid() + 4242
    nd = await start_node_daemon(
        nursery, node_config(config, sock_dir, allowed_uids=(other,)), sock_dir
    )
    async with scripted(nd.node_path) as node:
        assert await node.next() is None


@pytest.mark.parametrize(("links", "ok"), [(1, True), (2, False)])
async def test_node_links_past_max_links_are_closed_at_once(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str, links: int, ok: bool
) -> None:
    """N-1: nodes.max_links at N and N+1."""
    nd = await start_node_daemon(nursery, node_config(config, sock_dir, max_links=1), sock_dir)
    first, _ = await pair(nd, "lab1")
    async with first.stream:
        if ok:
            assert (await first.call("heartbeat", "ACK")).get("DATA") == "alive"
            return
        async with scripted(nd.node_path) as second:
            assert await second.next() is None


async def test_malformed_frames_past_the_budget_close_the_link(nd: NodeDaemon) -> None:
    """N-3 with SPEC L-6's budget: 10 malformed frames answered, the 11th closes the link."""
    async with scripted(nd.node_path) as node:
        for _ in range(10):
            await node.stream.send_all(b"HELLO THERE\n\n")
            reply = await node.next()
            assert isinstance(reply, Reply)
            assert error(reply).startswith("bad_header:")
        await node.stream.send_all(b"HELLO THERE\n\n")
        last = await node.next()
        assert isinstance(last, Reply)
        assert error(last).startswith("too_many_bad_frames:")
        assert await node.next() is None

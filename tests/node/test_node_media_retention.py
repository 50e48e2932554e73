"""Node captures are kept under two bounds, as the browser's screenshots are: after each
capture the media folder loses the captures older than ``nodes.media_max_age_s``, then the
oldest until ``nodes.media_max_bytes`` holds (the one just saved always stays). A daemon on
real Unix sockets with a node scripted frame by frame, so each capture has the size the test
names. Every capture was kept before: 20 of 1 MB left 20 files, 20 MB, for good.
"""

from __future__ import annotations

import base64
import hashlib
import os
import time

import pytest
import trio

from csp_web.app.catalog import config_from_mapping, config_sections
from csp_web.client.trio_client import Client, open_client
from csp_web.config import Config, ConfigError, section_of
from protocol import Status
from specialists.node.config import NodesConfig

from ..conftest import Sink
from .support import NodeDaemon, ScriptedNode, node_config, node_task, pair, start_node_daemon


async def _daemon(
    nursery: trio.Nursery, config: Config, sock_dir: str, **nodes: float
) -> NodeDaemon:
    return await start_node_daemon(nursery, node_config(config, sock_dir, **nodes), sock_dir)


async def _capture(client: Client, node: ScriptedNode, data: bytes) -> str:
    """One camera_snap the node answers with ``data`` (in 64 KiB chunks); the saved path."""
    async with trio.open_nursery() as nursery:

        async def serve() -> None:
            task = await node.next_task()
            for seq, start in enumerate(range(0, max(len(data), 1), 65536)):
                chunk = base64.b64encode(data[start : start + 65536]).decode()
                fields = (("FOR", task.id or ""), ("SEQ", str(seq)), ("CHUNK", chunk))
                assert (await node.call("media", "ACK", *fields)).status is Status.OK
            media = f"sha256:{hashlib.sha256(data).hexdigest()},bytes:{len(data)},type:image/jpeg"
            await node.answer(task, Status.OK, ("DATA", "media"), ("MEDIA", media))

        nursery.start_soon(serve)
        with trio.fail_after(30):
            reply = await client.call(node_task("lab1", "camera_snap"))
    assert reply.status is Status.OK, reply
    return (reply.get("DATA") or "").removeprefix("media:")


def _aged(path: str, seconds: int) -> None:
    """Date ``path`` back ``seconds``: the store orders and ages captures by mtime, and two
    captures a millisecond apart may share one on a coarse clock."""
    then = (int(time.time()) - seconds) * 1_000_000_000
    os.utime(path, ns=(then, then))


async def test_a_capture_past_media_max_bytes_removes_the_oldest_at_n_plus_one(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    nd = await _daemon(nursery, config, sock_dir, media_max_bytes=2000)
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client:
        first = await _capture(client, node, b"a" * 1000)
        _aged(first, 20)
        second = await _capture(client, node, b"b" * 1000)  # 2000 bytes: at N, both kept
        _aged(second, 10)
        assert os.path.exists(first)
        assert os.path.exists(second)
        third = await _capture(client, node, b"c")  # 2001 bytes: the oldest goes
    assert not os.path.exists(first)
    assert os.path.exists(second)
    assert os.path.exists(third)


async def test_a_capture_removes_the_ones_older_than_media_max_age_s(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    # The bound at N and N+1 to the second is the store's (tests/test_media_store.py): here
    # the daemon applies the configured one, a minute either side of it.
    nd = await _daemon(nursery, config, sock_dir, media_max_age_s=3600.0)
    node, _ = await pair(nd, "lab1")
    async with node.stream, open_client(nd.client_path) as client:
        old = await _capture(client, node, b"a" * 10)
        _aged(old, 3600 + 60)
        young = await _capture(client, node, b"b" * 10)
        _aged(young, 3600 - 60)
        newest = await _capture(client, node, b"c" * 10)
    assert not os.path.exists(old)
    assert os.path.exists(young)
    assert os.path.exists(newest)


async def test_twenty_captures_of_a_megabyte_keep_no_more_than_media_max_bytes(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    """The review's case: 20 captures of 1 MB were 20 files, 20 MB; under a 3 MB bound the
    folder holds three captures at most, the newest among them."""
    nd = await _daemon(nursery, config, sock_dir, media_max_bytes=3_000_000)
    node, _ = await pair(nd, "lab1")
    folder = os.path.join(config.daemon.state_dir, "media")
    photo = os.urandom(1_000_000)
    async with node.stream, open_client(nd.client_path) as client:
        for k in range(20):
            path = await _capture(client, node, photo)
            _aged(path, 20 - k)
    files = [name for name in os.listdir(folder) if os.path.isfile(os.path.join(folder, name))]
    assert len(files) <= 3
    assert os.path.basename(path) in files
    assert sum(os.path.getsize(os.path.join(folder, name)) for name in files) <= 3_000_000


@pytest.mark.parametrize("key", ["media_max_bytes", "media_max_age_s"])
def test_the_bounds_are_keys_of_the_nodes_section(key: str) -> None:
    loaded = config_from_mapping({"nodes": {key: 5}}, sections=config_sections())
    assert getattr(section_of(loaded, "nodes", NodesConfig), key) == 5
    with pytest.raises(ConfigError, match=rf"nodes\.{key}"):
        config_from_mapping({"nodes": {key: 0}}, sections=config_sections())

"""The reference node against a real daemon, both real processes: pairing with two commands,
list, revoke, reconnect, token reuse, a node dying mid-task, oversized media, TLS with a
pinned certificate, screen capture under Xvfb with ffmpeg, a camera from an ffmpeg test
source, notify through a real D-Bus session bus and a stand-in notification server.

Needs Debian's ffmpeg, xvfb, libnotify-bin, dbus and python3-dbus/python3-gi
(scripts/install-system-deps); a test whose tool is missing fails, never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio

from csp_web.client.trio_client import open_client
from protocol import Reply, Status

from .procs import (
    HERE,
    Child,
    child,
    csp_web,
    daemon_process,
    run_cli,
    session_bus,
    write_config,
    xvfb,
)
from .support import node_task

CAMERA = "testsrc=size=320x240:rate=1"
pytestmark = pytest.mark.slow


@dataclass
class Setup:
    directory: str
    config: str
    client_path: str
    node_path: str


@pytest.fixture
def setup(sock_dir: str) -> Setup:
    return Setup(
        sock_dir,
        write_config(sock_dir, {}),
        os.path.join(sock_dir, "run", "csp.sock"),
        os.path.join(sock_dir, "run", "nodes.sock"),
    )


def node_argv(connect: str, name: str, token_file: str, *extra: str) -> list[str]:
    return csp_web(
        "node", "run", "--connect", connect, "--name", name, "--token-file", token_file, *extra
    )


@asynccontextmanager
async def paired_node(
    config: str,
    connect: str,
    name: str,
    token_file: str,
    *extra: str,
    env: dict[str, str] | None = None,
) -> AsyncIterator[Child]:
    """A reference node paired with the two commands a user types: node run, nodes approve."""
    async with child(node_argv(connect, name, token_file, *extra), env=env) as node:
        code = (await node.wait_for(r"pairing code: (\S+)"))[1]
        approved = await run_cli("nodes", "--config", config, "approve", code)
        assert approved.returncode == 0, approved.stderr
        assert approved.stdout.decode().strip() == f"approved:{name}"
        await node.wait_for("paired; token stored")
        yield node


async def test_nodes_approve_typed_as_the_readme_shows_it_reaches_the_running_daemon(
    setup: Setup,
) -> None:
    """README: `csp-web node run` prints a pairing code (on stdout now, for a script), and
    `csp-web nodes approve CODE`, with no --socket, no config and no CSP_WEB_CONFIG, pairs it
    with the daemon started as the README starts it (`serve --socket PATH --no-stdin`): the
    command finds the socket that daemon recorded in the user's state dir. It answered
    "nodes needs --socket or socket.path" (exit 2)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CSP_WEB_CONFIG", "XDG_RUNTIME_DIR")}
    env["XDG_STATE_HOME"] = os.path.join(setup.directory, "xdg")
    nodes_only = os.path.join(setup.directory, "nodes.yaml")  # the node transport, nothing else
    with open(nodes_only, "w", encoding="utf-8") as file:
        file.write(f"nodes:\n  socket_path: {setup.node_path}\n")
    serve = csp_web("serve", "--config", nodes_only, "--socket", setup.client_path, "--no-stdin")
    token_file = os.path.join(setup.directory, "readme.token")
    async with child(serve, env=env) as daemon:
        await daemon.wait_for(r"csp-web \S+ ready")
        async with child(node_argv(setup.node_path, "readme1", token_file), read="stdout") as node:
            code = (await node.wait_for(r"^pairing code: (\S+) "))[1]
            approved = await run_cli("nodes", "approve", code, env=env)
    assert (approved.returncode, approved.stdout.decode()) == (0, "approved:readme1\n")


async def call(client_path: str, name: str, action: str, params: str | None = None) -> Reply:
    async with open_client(client_path) as client:
        return await client.call(node_task(name, action, params), timeout_s=60)


async def test_a_node_pairs_with_two_commands_runs_its_actions_is_listed_and_revoked(
    setup: Setup,
) -> None:
    """N-5, N-14, N-8: the issue's "done when", on the node socket."""
    token_file = os.path.join(setup.directory, "lab1.token")
    extra = ("--location", "41.01,28.97,25", "--camera-source", CAMERA)
    async with (
        daemon_process(setup.config),
        paired_node(setup.config, setup.node_path, "lab1", token_file, *extra) as node,
    ):
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600
        listed = await run_cli("nodes", "--config", setup.config, "list")
        rows = listed.stdout.decode().splitlines()
        assert rows[1].split() == [
            "lab1",
            rows[1].split()[1],
            "yes",
            "now",
            "camera_snap,location_get",
        ]
        location = await call(setup.client_path, "lab1", "location_get")
        assert location.get("DATA") == "lat:41.010000,lon:28.970000"
        assert location.get("SOURCE") == "fixed"
        photo = await call(
            setup.client_path, "lab1", "camera_snap", '{"facing":"back","quality":0.8}'
        )
        assert photo.status is Status.OK, photo
        path = (photo.get("DATA") or "").removeprefix("media:")
        with open(path, "rb") as file:
            assert file.read(3) == b"\xff\xd8\xff"  # a JPEG
        missing = await call(setup.client_path, "lab1", "notify", '{"title":"t"}')
        assert missing.get("ERROR") == "node_capability_missing:notify"
        revoked = await run_cli("nodes", "--config", setup.config, "revoke", "lab1")
        assert revoked.stdout.decode().strip() == "revoked:lab1"
        assert await node.wait() == 3  # cut at once: the node sees its link end
        listed = await run_cli("nodes", "--config", setup.config, "list")
        assert len(listed.stdout.decode().splitlines()) == 1  # the header only


async def test_a_node_reconnects_with_its_token_and_another_name_cannot_reuse_it(
    setup: Setup,
) -> None:
    """N-2, N-5: the stored token brings the node back; under another name it is refused."""
    token_file = os.path.join(setup.directory, "lab1.token")
    extra = ("--location", "1,2")
    async with daemon_process(setup.config):
        async with paired_node(setup.config, setup.node_path, "lab1", token_file, *extra) as node:
            node.kill_group()
        async with child(node_argv(setup.node_path, "lab1", token_file, *extra)) as again:
            await again.wait_for("node lab1: connected")
            reply = await call(setup.client_path, "lab1", "location_get")
            assert reply.get("DATA") == "lat:1.000000,lon:2.000000"
        stolen = os.path.join(setup.directory, "lab2.token")
        shutil.copy(token_file, stolen)
        async with child(node_argv(setup.node_path, "lab2", stolen, *extra)) as thief:
            await thief.wait_for("hello refused: permission_denied:token refused")
            assert await thief.wait() == 5


async def test_a_node_killed_mid_task_gives_node_unavailable_promptly(setup: Setup) -> None:
    """N-13: the client does not wait out the 20 s recording."""
    token_file = os.path.join(setup.directory, "lab1.token")
    async with (
        xvfb() as display,
        daemon_process(setup.config),
        paired_node(
            setup.config, setup.node_path, "lab1", token_file, "--display", display
        ) as node,
        trio.open_nursery() as nursery,
    ):
        replies: list[Reply] = []

        async def record() -> None:
            replies.append(
                await call(setup.client_path, "lab1", "screen_record", '{"duration_s":20}')
            )

        nursery.start_soon(record)
        await node.wait_for("running screen_record")
        node.kill_group()
    assert replies[0].get("ERROR") == "node_unavailable:lab1"


async def test_oversized_media_from_a_real_node_is_too_large(sock_dir: str) -> None:
    """N-10: the camera's frame passes max_media_bytes; the task fails too_large."""
    config = write_config(sock_dir, {"max_media_bytes": 1000})
    token_file = os.path.join(sock_dir, "lab1.token")
    node_path = os.path.join(sock_dir, "run", "nodes.sock")
    async with (
        daemon_process(config),
        paired_node(config, node_path, "lab1", token_file, "--camera-source", CAMERA),
    ):
        reply = await call(os.path.join(sock_dir, "run", "csp.sock"), "lab1", "camera_snap")
    assert reply.get("ERROR") == "too_large:media over 1000 bytes"


async def test_a_real_nodes_captures_are_trimmed_to_media_max_bytes(sock_dir: str) -> None:
    """Each capture was kept for good; under a 1-byte bound the folder keeps the newest
    alone (the store never removes the file it just wrote), however many were taken."""
    config = write_config(sock_dir, {"media_max_bytes": 1})
    token_file = os.path.join(sock_dir, "lab1.token")
    node_path = os.path.join(sock_dir, "run", "nodes.sock")
    folder = os.path.join(sock_dir, "state", "media")
    async with (
        daemon_process(config),
        paired_node(config, node_path, "lab1", token_file, "--camera-source", CAMERA),
    ):
        for _ in range(3):
            photo = await call(os.path.join(sock_dir, "run", "csp.sock"), "lab1", "camera_snap")
            assert photo.status is Status.OK, photo
            path = (photo.get("DATA") or "").removeprefix("media:")
            assert os.listdir(folder) == [os.path.basename(path)]


async def test_screen_capture_under_xvfb_gives_a_png_and_an_mp4(setup: Setup) -> None:
    """N-9, N-11: ffmpeg x11grab on a virtual display, the media checked and saved."""
    token_file = os.path.join(setup.directory, "lab1.token")
    async with (
        xvfb() as display,
        daemon_process(setup.config),
        paired_node(setup.config, setup.node_path, "lab1", token_file, "--display", display),
    ):
        shot = await call(setup.client_path, "lab1", "screen_record", '{"format":"png"}')
        clip = await call(setup.client_path, "lab1", "screen_record", '{"duration_s":1}')
        too_long = await call(setup.client_path, "lab1", "screen_record", '{"duration_s":31}')
    with open((shot.get("DATA") or "").removeprefix("media:"), "rb") as file:
        assert file.read(8) == b"\x89PNG\r\n\x1a\n"
    clip_path = (clip.get("DATA") or "").removeprefix("media:")
    assert clip_path.endswith(".mp4")
    with open(clip_path, "rb") as file:
        assert file.read(8)[4:] == b"ftyp"
    assert too_long.get("ERROR") == "invalid_field:node: duration_s must be in (0, 30]"


async def test_notify_reaches_a_notification_server_over_dbus(setup: Setup) -> None:
    """N-8, N-12: notify-send on a private session bus; the stand-in server records it."""
    token_file = os.path.join(setup.directory, "lab1.token")
    async with session_bus(setup.directory) as address:
        env = {"DBUS_SESSION_BUS_ADDRESS": address}
        server_argv = [os.path.join(HERE, "notify-server")]
        async with child(server_argv, env=env, read="stdout") as server:
            await server.wait_for("^ready$")
            async with (
                daemon_process(setup.config),
                paired_node(setup.config, setup.node_path, "lab1", token_file, env=env),
            ):
                params = '{"title":"Build done","body":"all green","urgency":"critical"}'
                reply = await call(setup.client_path, "lab1", "notify", params)
                assert reply.get("DATA") == "notified"
                line = await server.wait_for(r"^\{")
                bad = await call(setup.client_path, "lab1", "notify", '{"body":"no title"}')
    assert json.loads(line.string) == {"summary": "Build done", "body": "all green", "urgency": 2}
    assert (bad.get("ERROR") or "").startswith("invalid_field:node: title must be")


async def test_a_node_pins_the_daemons_tls_certificate(sock_dir: str) -> None:
    """N-1: TLS off by default, on here; the CLI shows the fingerprint, the node pins it."""
    config = write_config(sock_dir, {"socket_path": None, "tls": {"enabled": True, "port": 0}})
    async with daemon_process(config):
        listed = await run_cli("nodes", "--config", config, "list")
        tls_line = listed.stdout.decode().splitlines()[-1]
        address, fingerprint = tls_line.removeprefix("TLS listener ").split(", certificate sha256:")
        token_file = os.path.join(sock_dir, "lab1.token")
        wrong = "0" * 64
        async with child(node_argv(address, "lab1", token_file, "--fingerprint", wrong)) as node:
            await node.wait_for("not the pinned one")
            assert await node.wait() == 3
        async with paired_node(
            config, address, "lab1", token_file, "--fingerprint", fingerprint, "--location", "0,0"
        ):
            reply = await call(os.path.join(sock_dir, "run", "csp.sock"), "lab1", "location_get")
            assert reply.status is Status.OK
    key = os.path.join(sock_dir, "state", "nodes", "tls", "key.pem")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600

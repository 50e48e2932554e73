"""The reference node's code in this process against an in-process daemon, over TLS and the
node socket: the same exchanges as the process tests, where coverage can see them."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import trio

from csp_web.app.nodes import render
from csp_web.client.trio_client import open_client
from csp_web.config import Config
from protocol import Reply, Status
from specialists.node.agent import (
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    NodeOptions,
    is_tcp_address,
    run_node,
    seconds,
)
from specialists.node.backends import BackendOptions, detect, geoclue_values
from specialists.node.config import NodeTlsConfig

from ..conftest import Sink
from .support import NodeDaemon, node_config, node_task, nodes_op, start_node_daemon

CAMERA = "testsrc=size=160x120:rate=1"


@pytest.fixture
async def tls_daemon(
    nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> NodeDaemon:
    tls = NodeTlsConfig(enabled=True, port=0)
    return await start_node_daemon(nursery, node_config(config, sock_dir, tls=tls), sock_dir)


def options(nd: NodeDaemon, sock_dir: str, name: str = "lab1", **backends: object) -> NodeOptions:
    hub = nd.services.hub
    assert hub.tls_address is not None
    settings = BackendOptions(location=(41.0, 29.0, 5.0), camera_source=CAMERA)
    return NodeOptions(
        hub.tls_address,
        name,
        os.path.join(sock_dir, f"{name}.token"),
        hub.fingerprint,
        "Linux/test",
        replace(settings, **backends),  # type: ignore[arg-type]
    )


async def run_paired(
    nursery: trio.Nursery, nd: NodeDaemon, opts: NodeOptions
) -> tuple[trio.Event, list[int]]:
    """Start the node, approve its code, and return once it is paired: (ended, its code)."""
    codes: trio.MemorySendChannel[str]
    codes, received = trio.open_memory_channel[str](1)
    ended, exits = trio.Event(), list[int]()

    async def run() -> None:
        exits.append(await run_node(opts, on_code=codes.send_nowait))
        ended.set()

    nursery.start_soon(run)
    with trio.fail_after(30):
        code = await received.receive()
    async with open_client(nd.client_path) as client:
        approved = await nodes_op(client, "approve", ("CODE", code))
    assert approved.get("DATA") == f"approved:{opts.name}"
    return ended, exits


async def test_the_reference_node_pairs_over_tls_and_runs_its_actions(
    nursery: trio.Nursery, tls_daemon: NodeDaemon, sock_dir: str
) -> None:
    """N-1, N-5, N-8, N-9: pinned TLS, pairing, a fixed location, a test-source camera."""
    opts = options(tls_daemon, sock_dir)
    ended, exits = await run_paired(nursery, tls_daemon, opts)
    async with open_client(tls_daemon.client_path) as client:
        location = await client.call(node_task("lab1", "location_get"))
        photo = await client.call(node_task("lab1", "camera_snap", '{"quality":0.5}'))
        bad = await client.call(node_task("lab1", "camera_snap", '{"quality":2}'))
        missing = await client.call(node_task("lab1", "canvas", '{"url":"about:blank"}'))
        listing = await nodes_op(client, "list")
        await nodes_op(client, "revoke", ("NAME", "lab1"))
    with trio.fail_after(10):
        await ended.wait()
    assert exits == [EXIT_UNREACHABLE]
    assert location.get("DATA") == "lat:41.000000,lon:29.000000"
    assert photo.status is Status.OK
    with open((photo.get("DATA") or "").removeprefix("media:"), "rb") as file:
        assert file.read(2) == b"\xff\xd8"
    assert bad.get("ERROR") == "invalid_field:node: quality must be in [0, 1]"
    assert missing.get("ERROR") == "node_capability_missing:canvas"
    table = render(listing).splitlines()
    assert table[1].split()[:4] == ["lab1", "Linux/test", "yes", "now"]
    hub = tls_daemon.services.hub
    assert table[2] == f"TLS listener {hub.tls_address}, certificate sha256:{hub.fingerprint}"


async def test_the_reference_node_comes_back_with_its_token_and_refuses_another_name(
    nursery: trio.Nursery, tls_daemon: NodeDaemon, sock_dir: str
) -> None:
    """N-2, N-5: reconnect with the stored token; the same token under another name: exit 5."""
    opts = options(tls_daemon, sock_dir)
    ended, _ = await run_paired(nursery, tls_daemon, opts)
    link = tls_daemon.services.hub.links["lab1"]
    link.cut()
    with trio.fail_after(10):
        await ended.wait()
    again = trio.Event()

    async def rerun() -> None:
        await run_node(opts)
        again.set()

    nursery.start_soon(rerun)
    with trio.fail_after(10):
        await tls_daemon.services.hub.wait_link("lab1", other_than=link)
    async with open_client(tls_daemon.client_path) as client:
        reply = await client.call(node_task("lab1", "location_get"))
    assert reply.status is Status.OK
    stolen = replace(opts, name="lab2")
    assert await run_node(stolen) == EXIT_REFUSED
    wrong = replace(opts, fingerprint="0" * 64)
    assert await run_node(wrong) == EXIT_UNREACHABLE
    assert await run_node(replace(opts, fingerprint=None)) == EXIT_UNREACHABLE


def test_capabilities_are_offered_only_when_their_backend_is_present(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reference node offers what its tools allow (NODES.md section 5)."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    assert sorted(detect(BackendOptions(camera_device="/nonexistent"))) == []
    found = detect(BackendOptions(display=":99", camera_source=CAMERA, location=(0, 0, 0)))
    assert sorted(found) == ["camera_snap", "location_get", "screen_record"]
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent")
    assert "notify" in detect(BackendOptions(notify_send="notify-send"))
    assert "notify" not in detect(BackendOptions(notify_send="no-such-notify-send"))


def test_a_host_and_port_is_tcp_and_a_path_is_a_socket() -> None:
    assert is_tcp_address("daemon.lan:7443")
    assert is_tcp_address("[::1]:7443")
    assert not is_tcp_address("/run/csp/nodes.sock")
    assert not is_tcp_address("nodes.sock")


@pytest.mark.parametrize("port", ["²", "١", "0", "65536", "+1", " 1", "9" * 5000])
def test_a_port_that_is_not_ascii_digits_from_1_to_65535_is_no_tcp_address(port: str) -> None:
    """ "²" passed str.isdigit() here and then made open_link's int() raise."""
    assert is_tcp_address("daemon.lan:65535")
    assert not is_tcp_address(f"daemon.lan:{port}")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10", 10.0),
        ("2.5", 2.5),
        (None, 7.0),
        ("0", 7.0),
        ("nan", 7.0),
        ("inf", 7.0),
        ("1e3", 7.0),
        ("-1", 7.0),
        ("²", 7.0),
        ("1" * 13, 7.0),
    ],
)
def test_a_duration_from_the_daemon_is_an_ascii_decimal_above_zero_or_the_default(
    text: str | None, value: float
) -> None:
    """HEARTBEAT_S and EXPIRES_S: NaN made the node's sleep raise, inf stopped its beats."""
    assert seconds(text, 7.0) == value


def test_geoclue_values_are_ascii_decimals_and_anything_else_is_left_out() -> None:
    text = "Latitude: 53.5\nLongitude: -8.25\nAccuracy: 1.2.3\nAltitude: ²\nLatitude: ١٢\n"
    assert geoclue_values(text) == {"Latitude": 53.5, "Longitude": -8.25}


def test_render_prints_a_failure_and_plain_data() -> None:
    fail = Reply(Status.FAIL, (("SCOPE", "[node]"), ("DATA", "none"), ("ERROR", "node_unknown:x")))
    assert render(fail) == "FAIL node_unknown:x"
    assert render(Reply(Status.OK, (("DATA", "revoked:x"),))) == "revoked:x"

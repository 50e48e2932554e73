"""Fixtures shared by the whole suite: a real memory sink, a real daemon on a Unix socket.

Sockets live under short private directories in /tmp (a Unix socket path is capped at 107
bytes, which pytest's tmp_path can exceed). Proxy variables are cleared for every test so no
test can reach out through an inherited proxy.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any

import pytest
import trio
import trustme
from hypothesis import settings

from csp_web.app.catalog import config_sections
from csp_web.app.compose import open_app_daemon
from csp_web.app.memory_path import open_memory_path
from csp_web.config import AuditConfig, Config, DaemonConfig, MemoryConfig
from csp_web.config.load import complete_sections
from csp_web.core.api.ops import Op
from csp_web.core.api.specialist import Composable
from csp_web.core.api.trace import TaskTracer
from csp_web.core.daemon.compose import Daemon as ComposedDaemon
from csp_web.core.daemon.compose import open_daemon
from csp_web.core.daemon.lifecycle import serve
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.sink.server import SinkStore, serve_memory_sink
from csp_web.sink.store import STORE_FILE
from tests.harness import given

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")

# Hypothesis's 200 ms deadline per example is a timed assertion, which the house forbids: on
# a loaded host test_denylist's nat64 property took 335 ms once and 0.17 ms on the retry.
settings.register_profile("csp", deadline=None)
settings.load_profile("csp")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def trust(ca: trustme.CA) -> ssl.SSLContext:
    """A client context for the HTTPS test origins; it trusts only the test CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ca.configure_trust(context)
    return context


@pytest.fixture
def sock_dir() -> Iterator[str]:
    """A fresh 0700 directory with a short path, for Unix sockets."""
    path = tempfile.mkdtemp(prefix="csp-", dir="/tmp")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def config(tmp_path: os.PathLike[str], sock_dir: str) -> Config:
    """Embedded defaults, with state in tmp_path and the memory sink's socket configured.

    Pings are the tests' cheapest audited op: one IN:SYS frame per audit summary here, so each
    is written (durable) before its reply, as other ops' records are (SPEC O-4). Every
    specialist's own section is there at its defaults, as the daemon loads a file
    (``complete_sections``): what a section declares (credentials, paths) is seen."""
    config = Config(
        daemon=DaemonConfig(state_dir=str(tmp_path), grace_period_s=5.0),
        audit=AuditConfig(sys_summary_max_frames=1),
        memory=MemoryConfig(
            socket_path=os.path.join(sock_dir, "memory.sock"),
            backoff_initial_s=0.01,
            backoff_max_s=0.05,
        ),
    )
    return complete_sections(config, config_sections())


STOP_WAIT_S = 10.0  # a bound on a stop that ends on an event, never a timing assertion


@dataclass
class Sink:
    store: SinkStore
    directory: str
    scope: trio.CancelScope
    stopped: trio.Event

    async def stop(self) -> None:
        """Cancel the sink and return once it has ended (its socket file removed)."""
        self.scope.cancel()
        with trio.fail_after(STOP_WAIT_S):
            await self.stopped.wait()


async def start_sink(nursery: trio.Nursery, socket_path: str, directory: str) -> Sink:
    """Run the reference Memory Specialist until the returned scope is cancelled."""
    scope, stopped = trio.CancelScope(), trio.Event()

    async def run(*, task_status: trio.TaskStatus[SinkStore]) -> None:
        try:
            with scope:
                await serve_memory_sink(socket_path, directory, task_status=task_status)
        finally:
            stopped.set()

    store = await nursery.start(run)
    return Sink(store, directory, scope, stopped)


@pytest.fixture
async def sink(nursery: trio.Nursery, config: Config, tmp_path: os.PathLike[str]) -> Sink:
    assert config.memory.socket_path is not None
    return await start_sink(nursery, config.memory.socket_path, os.path.join(tmp_path, "mem"))


@dataclass
class Daemon:
    socket_path: str
    dispatcher: Dispatcher
    scope: trio.CancelScope
    stopped: trio.Event

    async def stop(self) -> None:
        """Cancel the daemon and return once it has ended (its socket file removed)."""
        self.scope.cancel()
        with trio.fail_after(STOP_WAIT_S):
            await self.stopped.wait()


async def start_daemon(
    nursery: trio.Nursery,
    config: Config,
    socket_path: str,
    ops: Sequence[Op[Any]] | None = None,
    *,
    specialists: bool | Sequence[Composable] = False,
    tracer: TaskTracer | None = None,
) -> Daemon:
    """A daemon serving ``socket_path`` (no stdin) until its scope is cancelled: with ``ops``
    only, with the ``specialists`` given, or (True) with every specialist as ``csp-web serve``
    runs them (the composition root: redis.url shared state included). ``tracer``: a span per
    task (not with ``specialists=True``, which builds its own from ``otel:``)."""
    scope, stopped = trio.CancelScope(), trio.Event()

    def composed() -> AbstractAsyncContextManager[ComposedDaemon]:
        if specialists is True:
            return open_app_daemon(config)
        chosen = specialists or (given(None, ops or []),)
        return open_daemon(config, chosen, memory=open_memory_path(config), tracer=tracer)

    async def run(*, task_status: trio.TaskStatus[Dispatcher]) -> None:
        try:
            with scope:
                async with composed() as daemon:
                    await serve(
                        daemon, stdio=None, socket_path=socket_path, task_status=task_status
                    )
        finally:
            stopped.set()

    dispatcher = await nursery.start(run)
    return Daemon(socket_path, dispatcher, scope, stopped)


@pytest.fixture
async def daemon(nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str) -> Daemon:
    """The daemon with every specialist, on a socket, its memory peer the reference sink."""
    path = os.path.join(sock_dir, "csp.sock")
    return await start_daemon(nursery, config, path, specialists=True)


def sink_text(directory: str, path: str) -> str | None:
    """What the memory sink at ``directory`` stored at logical ``path`` (its writes joined in
    order, as ``REQ:read`` returns them), or None. Read-only: the sink may be another process."""
    db = sqlite3.connect(f"file:{os.path.join(directory, STORE_FILE)}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT data FROM writes WHERE path = ? ORDER BY seq", (path,)).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return None
    finally:
        db.close()
    return "".join(d if d.endswith("\n") else d + "\n" for (d,) in rows) if rows else None


def sink_records(directory: str, folder: str) -> list[dict[str, Any]]:
    """The JSON records the memory sink stored under ``folder`` of ``directory``."""
    if not os.path.exists(os.path.join(directory, STORE_FILE)):
        return []
    db = sqlite3.connect(f"file:{os.path.join(directory, STORE_FILE)}?mode=ro", uri=True)
    try:
        prefix = folder.rstrip("/") + "/"
        rows = db.execute(
            "SELECT data FROM writes WHERE substr(path, 1, ?) = ? ORDER BY seq",
            (len(prefix), prefix),
        ).fetchall()
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        db.close()
    records = []
    for (text,) in rows:
        record = json.loads(text)
        if isinstance(record, dict):
            records.append(record)
    return records


def audit_ids(directory: str) -> set[str]:
    """IDs of the tasks whose audit records reached the sink: an op's own record, or an
    IN:SYS summary listing them (SPEC O-4)."""
    ids: set[str] = set()
    for record in sink_records(directory, "audit"):
        if isinstance(record.get("id"), str):
            ids.add(record["id"])
        listed = record.get("ids")
        if isinstance(listed, list):
            ids.update(str(task_id) for task_id in listed)
    return ids


def with_memory(config: Config, socket_path: str | None) -> Config:
    return replace(config, memory=replace(config.memory, socket_path=socket_path))


async def wait_until(predicate: object, *, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` (a zero-argument callable) until true; fails after ``timeout_s``.

    Only for state an outside process changes (a child's log or files, a database another
    process writes): nothing in this process can signal it. In-process code has events to
    wait on (``Outbox.wait_drained``/``wait_changed``, ``Sink.stop``, ``Daemon.stop``)."""
    assert callable(predicate)
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)

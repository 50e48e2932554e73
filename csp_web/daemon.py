"""The daemon's lifecycle: compose the services, serve the transports, stop gracefully.

Shutdown (a signal, or EOF on stdin) stops accepting and reading, lets in-flight frames finish
and reply within ``grace_period_s``, then gives the outbox what is left of the grace period to
deliver pending memory writes (the rest stay on disk for the next start). A second signal
cancels at once.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
from collections.abc import Sequence
from typing import Any

import trio

from . import __version__
from .config import Config
from .connection import Shutdown, StreamOptions, serve_stream
from .context import Peer, Services
from .dispatch import Dispatcher
from .outbox import Outbox, open_outbox
from .registry import Op, Registry
from .relay import MemoryRelay
from .stats import Stats
from .sysops import make_sys_ops
from .unix import serve_unix

log = logging.getLogger("csp_web.daemon")


def build_dispatcher(
    config: Config,
    outbox: Outbox,
    ops: Sequence[Op],
    *,
    extras: dict[str, Any] | None = None,
) -> Dispatcher:
    """A dispatcher over the IN:SYS ops plus ``ops``, relaying IN:MEMORY frames.

    ``extras`` are the specialists' shared services (``Services.extras``), owned by the caller.
    """
    stats = Stats()
    registry_ref: list[Registry] = []
    registry = Registry([*make_sys_ops(registry_ref, stats), *ops])
    registry_ref.append(registry)
    services = Services(config, outbox, extras if extras is not None else {})
    return Dispatcher(registry, services, stats, relay=MemoryRelay(config.memory))


def build_op_table(ops: Sequence[Op]) -> list[Op]:
    """Every op a daemon with ``ops`` serves, sorted by (IN, REQ), for documentation."""
    return list(Registry([*make_sys_ops([], Stats()), *ops]))


def open_stdio_stream() -> trio.StapledStream[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    """The wire on stdin/stdout. fd 1 is then pointed at stderr and fd 0 at /dev/null, so a
    stray print or a child process can never write into (or read from) the protocol stream."""
    wire_out, wire_in = os.dup(1), os.dup(0)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return trio.StapledStream(trio.lowlevel.FdStream(wire_out), trio.lowlevel.FdStream(wire_in))


async def serve_daemon(
    config: Config,
    ops: Sequence[Op],
    *,
    stdio: trio.abc.Stream | None,
    socket_path: str | None,
    extras: dict[str, Any] | None = None,
    task_status: trio.TaskStatus[Dispatcher] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run until shutdown; ``stdio`` is the stdin/stdout stream when serving it.

    ``extras`` are the specialists' shared services, opened and closed by the caller.
    """
    if stdio is None and socket_path is None:
        raise ValueError("nothing to serve: neither stdin nor a socket")
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(config, outbox, ops, extras=extras)
        shutdown = Shutdown()
        async with trio.open_nursery() as root:
            stop_now = trio.CancelScope()  # a second signal: no more grace for anything
            root.start_soon(_watch_signals, shutdown, stop_now)
            for serve in dispatcher.services.extras.get("background", []):
                await root.start(serve, dispatcher)
            with stop_now:
                deadline = await _serve_until_stopped(
                    dispatcher,
                    config,
                    shutdown,
                    stdio=stdio,
                    path=socket_path,
                    task_status=task_status,
                )
                if config.memory.socket_path is not None:
                    with trio.move_on_at(deadline):
                        await outbox.wait_flushed()  # not while the specialist is down
            log.info("stopped; %d memory writes left in the outbox", outbox.depth)
            root.cancel_scope.cancel()


async def _serve_until_stopped(
    dispatcher: Dispatcher,
    config: Config,
    shutdown: Shutdown,
    *,
    stdio: trio.abc.Stream | None,
    path: str | None,
    task_status: trio.TaskStatus[Dispatcher],
) -> float:
    """Serve the transports until shutdown and in-flight work ends (or the grace period does);
    returns the grace deadline, which also bounds the outbox flush that follows."""
    connections = trio.CancelScope()
    with connections:
        async with trio.open_nursery() as nursery:
            await _start_transports(nursery, dispatcher, config, shutdown, stdio=stdio, path=path)
            log.info(
                "csp-web %s ready (socket %s, stdin %s, outbox %d pending)",
                __version__,
                path,
                stdio is not None,
                dispatcher.services.outbox.depth,
            )
            # Everything built so far lives as long as the daemon: keep the collector
            # from walking it again on every cycle (measured in bench/fetch.py).
            gc.freeze()
            task_status.started(dispatcher)
            await shutdown.begun.wait()
            dispatcher.shutting_down = True
            connections.deadline = trio.current_time() + config.daemon.grace_period_s
    return connections.deadline


async def _start_transports(
    nursery: trio.Nursery,
    dispatcher: Dispatcher,
    config: Config,
    shutdown: Shutdown,
    *,
    stdio: trio.abc.Stream | None,
    path: str | None,
) -> None:
    conn_config = config.connection
    if path is not None:
        listener_scope = trio.CancelScope()
        options = StreamOptions(conn_config, conn_config.idle_timeout_s)

        async def handle(stream: trio.SocketStream, peer: Peer) -> None:
            await serve_stream(stream, dispatcher, peer, options, shutdown)

        async def run_listener(*, task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
            with listener_scope:
                await serve_unix(
                    path, config.socket, handle, handler_nursery=nursery, task_status=task_status
                )

        await nursery.start(run_listener)
        nursery.start_soon(_stop_on, shutdown, listener_scope)
    if stdio is not None:
        nursery.start_soon(
            _serve_stdio, stdio, dispatcher, StreamOptions(conn_config, None), shutdown
        )


async def _serve_stdio(
    stream: trio.abc.Stream, dispatcher: Dispatcher, options: StreamOptions, shutdown: Shutdown
) -> None:
    # EOF on stdin means the orchestrator is done with us: finish, flush, exit 0.
    await serve_stream(
        stream, dispatcher, Peer("stdin", os.getuid(), os.getppid()), options, shutdown
    )
    shutdown.begin()


async def _stop_on(shutdown: Shutdown, scope: trio.CancelScope) -> None:
    await shutdown.begun.wait()
    scope.cancel()


async def _watch_signals(shutdown: Shutdown, stop_now: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if shutdown.begun.is_set():
                log.warning("second signal: cancelling in-flight work and the outbox flush")
                stop_now.cancel()
                continue
            log.info("%s: finishing in-flight work", signal.Signals(signum).name)
            shutdown.begin()

"""The daemon's lifecycle: serve a composed daemon on its transports, stop gracefully.

Shutdown (a signal, or EOF on stdin) stops accepting and reading and answers ``shutting_down``
to every frame already received but not started; in-flight frames finish and reply within
``grace_period_s``. Work the grace period cuts is cancelled and answered ``shutting_down`` too
(SPEC R-1), written within one write limit (``connection.write_timeout_s``), and one log line
gives the counts. Then the outbox gets what is left of the grace period to deliver pending
memory writes (the rest stay on disk for the next start). A second signal ends the grace
period at once: the work still running is cut (answered ``shutting_down``, counted) and the
outbox flush is skipped. ``serve`` returns how many tasks were cut (the CLI exits 4 when any).
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import os
import signal
import time
from collections.abc import Callable, Sequence

import trio

from csp_web import __version__
from csp_web.config import Config, ConfigError
from csp_web.config.reload import Reloader, ReloadPlan, apply_reload, plan_reload
from csp_web.core.api.context import Peer
from csp_web.core.api.ports import allowed_uids
from csp_web.core.daemon.compose import Daemon
from csp_web.core.dispatch.dispatcher import Dispatcher
from csp_web.core.dispatch.stats import ReloadRecord
from csp_web.core.transports import systemd
from csp_web.core.transports.unix import Gate, Lease, serve_unix
from csp_web.core.wire.connection import Shutdown, StreamOptions, serve_connection
from csp_web.core.wire.turns import FairStarts

log = logging.getLogger(__name__)

# The collector's thresholds while serving: a young collection every 50,000 net container
# allocations (CPython's default is 700), older ones after 20 and 10 of the younger ones.
# Behind 1,000 busy connections (bench/fairness.py --only busy --pauses, 2 runs each on a
# loaded host, daemon CPU time): the default spent 405-427 ms of the scenario's ~3.9 s CPU in
# 309-346 collections, its longest a full one of 46-72 ms; these spent 87-102 ms in 3 young
# collections, the longest 32-44 ms, none of the older ones. Still bounded: cyclic garbage
# is collected every 50,000 allocations, and what survives is walked later, never kept.
COLLECTOR_THRESHOLDS = (50_000, 20, 10)


async def serve(
    daemon: Daemon,
    *,
    stdio: trio.abc.Stream | None,
    socket_path: str | None,
    reload: Callable[[], Config] | None = None,
    task_status: trio.TaskStatus[Dispatcher] = trio.TASK_STATUS_IGNORED,
) -> int:
    """Serve ``daemon`` (core.compose.open_daemon) until shutdown; ``stdio`` is the
    stdin/stdout stream when serving it. Returns the number of tasks the grace period cut
    (each was answered ``shutting_down``). ``reload`` loads the configuration again on SIGHUP
    (``reload_settings``)."""
    if stdio is None and socket_path is None:
        raise ValueError("nothing to serve: neither stdin nor a socket")
    dispatcher = daemon.dispatcher
    config = dispatcher.services.config
    memory = dispatcher.services.memory
    shutdown = Shutdown()
    reloaders: list[Reloader] = []  # the daemon's own: the socket's allow-list
    async with trio.open_nursery() as root:
        stop_now = trio.CancelScope()  # a second signal: no flush of the outbox
        root.start_soon(_watch_signals, shutdown, stop_now)
        root.start_soon(systemd.serve_watchdog)
        await root.start(_watch_reload, daemon, reload, reloaders)
        for background in daemon.background:
            await root.start(background, daemon.port)
        deadline = await _serve_until_stopped(
            dispatcher,
            config,
            shutdown,
            stdio=stdio,
            path=socket_path,
            reloaders=reloaders,
            task_status=task_status,
        )
        dispatcher.flush_audits()  # the summaries of IN:SYS frames (SPEC O-4)
        with stop_now:
            if memory is not None:
                with trio.move_on_at(deadline):
                    await memory.outbox.wait_flushed()  # not while the specialist is down
        if memory is not None:
            log.info("stopped; %d memory writes left in the outbox", memory.outbox.room.depth)
        root.cancel_scope.cancel()
    return shutdown.cut


async def _serve_until_stopped(
    dispatcher: Dispatcher,
    config: Config,
    shutdown: Shutdown,
    *,
    stdio: trio.abc.Stream | None,
    path: str | None,
    reloaders: list[Reloader],
    task_status: trio.TaskStatus[Dispatcher],
) -> float:
    """Serve the transports until shutdown and in-flight work ends (or the grace period does);
    returns the grace deadline, which also bounds the outbox flush that follows.

    At the grace deadline the work still running is cancelled and answered ``shutting_down``;
    the connections then have one write limit more to send those replies and close."""
    connections = trio.CancelScope()
    deadline = math.inf
    with connections:
        async with trio.open_nursery() as nursery:
            await _start_transports(
                nursery, dispatcher, config, shutdown, stdio=stdio, path=path, reloaders=reloaders
            )
            log.info(
                "csp-web %s ready (socket %s, stdin %s, outbox %d pending)",
                __version__,
                path,
                stdio is not None,
                _outbox_depth(dispatcher),
            )
            tune_collector()
            task_status.started(dispatcher)
            systemd.notify(f"READY=1\nSTATUS=serving (socket {path}, stdin {stdio is not None})")
            await shutdown.begun.wait()
            systemd.notify("STOPPING=1\nSTATUS=finishing in-flight work")
            dispatcher.shutting_down = True
            shutdown.close_after(connections, config.connection.write_timeout_s)
            shutdown.cut_at(trio.current_time() + config.daemon.grace_period_s)
            deadline = shutdown.grace.deadline  # earlier when a second signal came first
    _log_shutdown(shutdown, config.daemon.grace_period_s)
    return deadline


def tune_collector() -> None:
    """Set the collector up for serving (``COLLECTOR_THRESHOLDS``); called once the daemon
    is built and ready. Process-wide."""
    # Everything built so far lives as long as the daemon: keep the collector from walking
    # it again on every cycle (measured in bench/fetch.py).
    gc.freeze()
    gc.set_threshold(*COLLECTOR_THRESHOLDS)


def _outbox_depth(dispatcher: Dispatcher) -> int:
    memory = dispatcher.services.memory
    return 0 if memory is None else memory.outbox.room.depth


def _log_shutdown(shutdown: Shutdown, grace_period_s: float) -> None:
    counts = (shutdown.answered, shutdown.cut, shutdown.refused)
    message = "shutdown: %d in-flight tasks answered, %d cut by the %gs grace period, %d refused"
    if shutdown.cut:
        log.warning(message, counts[0], counts[1], grace_period_s, counts[2])
    else:
        log.info(message, counts[0], counts[1], grace_period_s, counts[2])


async def _start_transports(
    nursery: trio.Nursery,
    dispatcher: Dispatcher,
    config: Config,
    shutdown: Shutdown,
    *,
    stdio: trio.abc.Stream | None,
    path: str | None,
    reloaders: list[Reloader],
) -> None:
    conn_config = config.connection
    # One fair queue for every connection (SPEC L-10).
    starts = FairStarts(conn_config.frames_per_round, conn_config.max_running_frames)
    if path is not None:
        listener_scope = trio.CancelScope()
        options = StreamOptions(conn_config, conn_config.idle_timeout_s)
        # The running settings' allow-list, the one cron reads too: a reload judges every
        # later accept, and closes the connections of the uids it removed.
        gate = Gate(config.socket, lambda: allowed_uids(dispatcher.services.config.socket))
        reloaders.append(lambda new: functools.partial(gate.revoke, allowed_uids(new.socket)))

        async def handle(stream: trio.SocketStream, peer: Peer, lease: Lease) -> None:
            await serve_connection(
                stream, dispatcher, peer, options, shutdown, lease=lease, starts=starts
            )

        async def run_listener(*, task_status: trio.TaskStatus[list[trio.SocketListener]]) -> None:
            with listener_scope:
                await serve_unix(
                    path,
                    config.socket,
                    handle,
                    handler_nursery=nursery,
                    gate=gate,
                    task_status=task_status,
                )

        await nursery.start(run_listener)
        nursery.start_soon(_stop_on, shutdown, listener_scope)
    if stdio is not None:
        options = StreamOptions(conn_config, None)
        nursery.start_soon(_serve_stdio, stdio, dispatcher, options, shutdown, starts)


async def _serve_stdio(
    stream: trio.abc.Stream,
    dispatcher: Dispatcher,
    options: StreamOptions,
    shutdown: Shutdown,
    starts: FairStarts,
) -> None:
    # EOF on stdin means the orchestrator is done with us: finish, flush, exit 0.
    peer = Peer("stdin", os.getuid(), os.getppid())
    await serve_connection(stream, dispatcher, peer, options, shutdown, starts=starts)
    shutdown.begin()


async def _stop_on(shutdown: Shutdown, scope: trio.CancelScope) -> None:
    await shutdown.begun.wait()
    scope.cancel()


async def _watch_signals(shutdown: Shutdown, stop_now: trio.CancelScope) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            if shutdown.begun.is_set():
                log.warning("second signal: cutting in-flight work, skipping the outbox flush")
                shutdown.stop_now()
                stop_now.cancel()
                continue
            log.info("%s: finishing in-flight work", signal.Signals(signum).name)
            shutdown.begin()


async def _watch_reload(
    daemon: Daemon,
    load: Callable[[], Config] | None,
    reloaders: Sequence[Reloader] = (),
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    # Installed before the daemon says it is ready: from then on SIGHUP never kills it.
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        task_status.started()
        async for _ in signals:
            systemd.notify_reloading()
            await reload_settings(daemon, load, reloaders)
            systemd.notify("READY=1")


async def reload_settings(
    daemon: Daemon, load: Callable[[], Config] | None, reloaders: Sequence[Reloader] = ()
) -> ReloadPlan | None:
    """Load the configuration again and apply what may change at runtime
    (``csp_web.config.reload``), logging what changed and what needs a restart. A file that
    does not load, or that a service refuses, changes nothing: logged, returns None. Either
    way ``REQ:stats`` shows the outcome on its ``RELOAD`` line.

    ``reloaders`` are the daemon's own hooks, run after the specialists' (in their order)."""
    dispatcher = daemon.dispatcher
    if load is None:
        log.warning("SIGHUP: started without a configuration to reload; nothing changed")
        dispatcher.stats.last_reload = ReloadRecord(time.time(), "refused", error="no file")
        return None
    services = dispatcher.services
    try:
        # abandon_on_cancel: a file that never ends (a FIFO) must not hold up shutdown.
        new = await trio.to_thread.run_sync(load, abandon_on_cancel=True)
        plan = plan_reload(services.config, new, daemon.reloadable, daemon.restart_only)
        apply_reload(plan, [*daemon.reloaders, *reloaders])
    except (ConfigError, ValueError) as exc:
        log.error("SIGHUP: reload refused, keeping the running settings: %s", exc)
        dispatcher.stats.last_reload = ReloadRecord(time.time(), "refused", error=str(exc))
        return None
    except Exception as exc:  # a bug in a hook: logged in full, never the end of the daemon
        log.exception("SIGHUP: reload failed; the running settings are kept")
        error = f"internal_error:{type(exc).__name__}"
        dispatcher.stats.last_reload = ReloadRecord(time.time(), "refused", error=error)
        return None
    services.config = plan.config
    dispatcher.stats.last_reload = ReloadRecord(
        time.time(), "applied", plan.applied, plan.needs_restart
    )
    log.info(
        "SIGHUP: settings reloaded; applied: %s; needs a restart (kept): %s",
        ", ".join(plan.applied) or "none",
        ", ".join(plan.needs_restart) or "none",
    )
    return plan

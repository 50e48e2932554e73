"""``run_command``: prepare, spawn in the sandbox, read both outputs, time out, kill, reap."""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, replace
from functools import partial

import trio

from csp_web.core.api.deadlines import work_deadline
from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.tool.exec.config import ExecConfig

from ._capture import CappedOutput, drain
from ._cgroup import CgroupUsage, CommandCgroup
from ._errors import SCOPE, too_long, unavailable
from ._limits import cpu_seconds
from ._network import Bridge, ExecNetwork, open_bridge
from ._prepare import PreparedCommand, prepare_command
from ._process import Child, Exit, Pipes, spawn_child
from ._protect import release_placeholders, take_placeholders
from ._request import ExecRequest, open_working_dir
from ._result import ExecResult, Limit, describe_status, limits_from_signal, parse_time_report
from ._sandbox import Sandbox, wrap_argv
from ._tree import TOKEN_ENV, tree_cpu_ms

log = logging.getLogger(__name__)

# One thread makes and removes placeholders: their table (_protect._held) is shared.
PLACEHOLDER_THREAD = trio.CapacityLimiter(1)

# Spawn errors are about the wrappers (prlimit, setpriv, bwrap), not the command, which was
# resolved beforehand: a wrapper that vanished means the host changed under the daemon.
_SPAWN_UNAVAILABLE = frozenset({errno.ENOENT, errno.EACCES, errno.ENOEXEC})
_REPORT_BYTES = 1024  # GNU time writes one short line
# How often a command's CPU time is read against the task's budget (exec_cpu_ms): it may
# pass the budget by at most this much CPU per core it uses before it is killed. Each read
# is one cgroup file, or a walk of /proc without a cgroup (~1 ms on a busy host).
CPU_POLL_S = 1.0


@dataclass(slots=True)
class CpuSpent:
    """What a command that ended without a result (cancelled, failed) or killed before its own
    report burned, for its CPU budget (SPEC D-3): ``started`` once its spawn was tried (it may
    have run), ``cpu_ms`` its CPU time read just before it was killed (None: never read)."""

    started: bool = False
    cpu_ms: int | None = None

    def read(self, watch: _CpuWatch, child: Child) -> None:
        """Note ``child``'s CPU time now; left unknown (None) when it cannot be read."""
        try:
            used = watch.cpu_ms(child)
        except OSError:
            log.warning("exec: CPU time of a killed command not readable", exc_info=True)
            return
        if used is not None:
            self.cpu_ms = max(self.cpu_ms or 0, used)


@dataclass(slots=True)
class _Run:
    """What supervising one child observed."""

    stdout: CappedOutput
    stderr: CappedOutput
    report: CappedOutput  # GNU time's line; the command inherits the pipe and may write too
    timed_out: bool = False
    cpu_cut_ms: int | None = None  # its CPU time when killed for passing the task's budget
    exit: Exit | None = None


async def run_command(
    request: ExecRequest,
    config: ExecConfig,
    *,
    sandbox: Sandbox,
    network: ExecNetwork | None = None,
    cpu_left_ms: int | None = None,
    spent: CpuSpent | None = None,
) -> ExecResult:
    """Run ``request`` under ``config``'s policy and limits inside ``sandbox``.

    Returns an ``ExecResult`` for every command that started, however it ended (non-zero exit,
    a signal, the timeout): the op logs it and raises ``result.failure()`` if there is one.
    Raises OpError before anything starts for every refusal listed at ``prepare_command``,
    and NOT_AVAILABLE / COMMAND_FAILED if the spawn itself fails. When cancelled from outside
    it kills the whole tree and reaps it before letting the cancellation through.

    The timeout counts from this call, not from the spawn, and ends by the task's own work
    deadline at the latest (``work_deadline``): the placeholders and the spawn take a loaded
    host 100 ms and more, which would otherwise eat the reserve kept to report the timeout.

    A command whose program rule has ``network`` runs behind a lane of ``network``'s guard
    proxy (_network.py); NOT_AVAILABLE when there is none to open it on.

    ``cpu_left_ms``: the task's budget of CPU time (SPEC D-3, exec_cpu_ms); the command is
    killed once its CPU time, read every ``CPU_POLL_S``, passes it (``ExecResult.cpu_cut_ms``).
    ``spent``: filled with whether the command was started and, when it is killed other than
    by its own exit or the budget (cancelled, timed out), the CPU time it had burned then:
    what a budget charges a command that has no measured result.
    """
    plan = prepare_command(request, config, sandbox=sandbox)
    deadline = min(trio.current_time() + plan.timeout_ms / 1000, work_deadline())
    token = secrets.token_hex(16) if _swept(sandbox) else None
    env = {**plan.env, TOKEN_ENV: token} if token else dict(plan.env)
    _check_wrappers(sandbox)
    group = _open_cgroup(sandbox, config)
    try:
        started = time.monotonic()
        # Held until the sandbox is reaped: a placeholder removed earlier frees its name.
        # Made and removed in one worker thread: file work (about 40 ms for every default
        # path, bench/exec_protected.py) must not stall the event loop, and the table of held
        # placeholders is shared.
        taken = await _take_placeholders(plan, sandbox)
        try:
            async with _open_network(plan, network, sandbox, config) as bridge:
                watch = _CpuWatch(cpu_left_ms, group)
                run = await _run(
                    plan, config, sandbox, env, token, watch, deadline, bridge, spent or CpuSpent()
                )
                refused, more = bridge.refused() if bridge is not None else ((), 0)
        finally:
            if taken:
                with trio.CancelScope(shield=True):
                    await trio.to_thread.run_sync(
                        release_placeholders, taken, limiter=PLACEHOLDER_THREAD
                    )
        duration_ms = round((time.monotonic() - started) * 1000)
        usage = group.usage() if group is not None else None
    finally:
        if group is not None:
            with trio.CancelScope(shield=True):
                await group.close()
    result = _result(plan, run, config, sandbox=sandbox, duration_ms=duration_ms, usage=usage)
    if run.cpu_cut_ms is not None:
        result = replace(result, cpu_cut_ms=run.cpu_cut_ms)
    if not refused and not more:
        return result
    return replace(result, network_refused=refused, network_refused_more=more)


def _open_network(
    plan: PreparedCommand, network: ExecNetwork | None, sandbox: Sandbox, config: ExecConfig
) -> AbstractAsyncContextManager[Bridge | None]:
    """The command's lane when its rule lists destinations, else nothing (no network)."""
    if not plan.destinations:
        return nullcontext()
    if network is None:
        raise unavailable("network: no guard proxy for exec")
    return open_bridge(
        network,
        plan.destinations,
        run_as=sandbox.run_as,
        hidden=sandbox.hidden,
        search_path=config.search_path,
    )


async def _take_placeholders(plan: PreparedCommand, sandbox: Sandbox) -> list[str]:
    """The placeholders taken for ``plan`` (``take_placeholders``), made in the one thread
    that owns their table. A layout without any (most working directories) skips both trips
    to that thread: each is a wake-up of another thread, 2-6 ms of wall time on a loaded
    2-core host (bench/exec_spawn.py, "exec true in bwrap")."""
    if not plan.layout.placeholders:
        return []
    chown = sandbox.run_as is not None
    return await trio.to_thread.run_sync(
        partial(take_placeholders, plan.layout, chown=chown), limiter=PLACEHOLDER_THREAD
    )


def _swept(sandbox: Sandbox) -> bool:
    """True when leftovers are found by walking /proc (``kill_tree``, with a token in the
    environment), False when the command's cgroup holds every process of it.

    A cgroup holds them when the command cannot write to any ``cgroup.procs`` or ``tasks``
    to leave it: under bwrap (/sys is read-only there) or as the sandbox uid (the files are
    root's; tests/tool/test_exec_sandbox.py tries every entry file from inside). Then
    ``cgroup.kill`` (v2) or a kill of each pid in ``cgroup.procs`` (v1) replaces the sweep,
    which costs 9-10 ms of CPU and 33-45 ms of wall per command on a loaded 2-core host
    (bench/exec_spawn.py, "exec: /proc sweep"); it also finds at once what left the tree
    *and* dropped the token, which only the cgroup's removal found before. A daemon that is
    not root, without bwrap, runs commands as its own uid, which owns a delegated cgroup:
    there the sweep stays.
    """
    if sandbox.cgroup is not None and (sandbox.kind == "bwrap" or sandbox.run_as is not None):
        return False
    return sandbox.kind == "none"


def _check_wrappers(sandbox: Sandbox) -> None:
    """NOT_AVAILABLE naming a wrapper program that vanished since the probe. Checked here
    because behind the cgroup's entering shell its absence would read as the command's 127."""
    shell = sandbox.cgroup.shell if sandbox.cgroup is not None else None
    wrappers = (sandbox.prlimit, sandbox.setpriv, sandbox.bwrap, sandbox.time, shell)
    for path in filter(None, wrappers):
        if not os.access(path, os.X_OK):
            raise unavailable(path)


def _open_cgroup(sandbox: Sandbox, config: ExecConfig) -> CommandCgroup | None:
    """The command's own cgroup when the host gave one; NOT_AVAILABLE if it cannot be made
    (the host changed since the probe): running unbounded instead would be a silent downgrade."""
    if sandbox.cgroup is None:
        return None
    try:
        return CommandCgroup.create(
            sandbox.cgroup,
            secrets.token_hex(8),
            memory_bytes=config.max_memory_bytes,
            max_tasks=config.max_processes,
        )
    except OSError as error:
        raise unavailable(f"cgroup: {error.strerror or error}") from error


async def _run(
    plan: PreparedCommand,
    config: ExecConfig,
    sandbox: Sandbox,
    env: dict[str, str],
    token: str | None,
    watch: _CpuWatch,
    deadline: float,
    bridge: Bridge | None,
    spent: CpuSpent,
) -> _Run:
    command, mounts = list(plan.argv), []
    if bridge is not None:  # the command behind its network bridge (_network.py)
        command, env, mounts = bridge.argv(plan.argv), bridge.env(env), bridge.mounts()
    working_dir_fd = open_working_dir(plan.working_dir, config)
    try:
        pipes = Pipes(pass_report=sandbox.time is not None)
        argv = wrap_argv(
            command,
            sandbox=sandbox,
            config=config,
            working_dir=plan.working_dir,
            timeout_ms=plan.timeout_ms,
            report_fd=pipes.report_fd,
            working_dir_fd=working_dir_fd,
            cgroup=watch.group,
            layout=plan.layout,
            mounts=mounts,
        )
        spent.started = True  # a spawn cancelled midway may have started it
        child = await _spawn(argv, env, pipes, plan, token, working_dir_fd, spent)
    finally:
        os.close(working_dir_fd)
    try:
        cleared = watch.group if not _swept(sandbox) else None
        return await _supervise(child, config, deadline, cleared, watch, spent)
    except BaseException:
        spent.read(watch, child)  # still running: aclose kills it
        raise
    finally:
        await child.aclose(grace_s=config.reap_grace_ms / 1000)


async def _spawn(
    argv: list[str],
    env: dict[str, str],
    pipes: Pipes,
    plan: PreparedCommand,
    token: str | None,
    working_dir_fd: int,
    spent: CpuSpent,
) -> Child:
    try:
        return await spawn_child(
            argv, env=env, cwd=plan.working_dir, pipes=pipes, token=token, cwd_fd=working_dir_fd
        )
    except OSError as error:
        spent.started = False  # Popen raises only when nothing was started
        if error.errno in _SPAWN_UNAVAILABLE:
            raise unavailable(argv[0]) from error
        if error.errno == errno.E2BIG:  # each string fits (check_env): all of them do not
            arg_max = os.sysconf("SC_ARG_MAX")
            raise too_long("ENV with COMMAND", f"ARG_MAX, {arg_max} bytes") from error
        raise OpError(
            ErrorCode.COMMAND_FAILED, plan.command, scope=SCOPE, data="exit:null"
        ) from error


async def _supervise(
    child: Child,
    config: ExecConfig,
    deadline: float,
    group: CommandCgroup | None,
    watch: _CpuWatch,
    spent: CpuSpent,
) -> _Run:
    """Read both pipes while waiting for exit or the timeout (trio time ``deadline``), then
    clear up what is left: every process in ``group`` when the cgroup holds the command
    (see ``_swept``), else the tree.

    After the exit, leftovers are killed (so a daemonised grandchild cannot hold the pipes
    open), then the pipes get ``drain_grace_ms`` to reach EOF; a process that escaped the
    kill and still holds them is cut off there rather than hanging the op.
    """
    run = _Run(
        CappedOutput(max_bytes=config.max_output_bytes, tail_bytes=config.output_tail_bytes),
        CappedOutput(max_bytes=config.max_output_bytes, tail_bytes=config.output_tail_bytes),
        CappedOutput(max_bytes=_REPORT_BYTES, tail_bytes=_REPORT_BYTES // 2),
    )
    drained = trio.Event()
    owed = trio.CancelScope()  # shielded once the timer fires: see below
    with owed:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_drain_all, child, run, drained)
            with trio.move_on_at(deadline) as timer:
                run.cpu_cut_ms = await watch.until_exited(child)
            run.timed_out = timer.cancelled_caught
            # Past its own timer the op owes the caller the timeout reply (COMMAND, exit:null,
            # the log): the clear-up below, bounded by the two graces, finishes even if the
            # task's deadline passes meanwhile, as it does on a loaded host where killing and
            # reaping outlast the reserve (100 ms of a 500 ms budget).
            owed.shield = run.timed_out
            if run.timed_out:
                spent.read(watch, child)  # GNU time is killed with it: no report
            if group is not None:
                group.kill()
                child.kill_group()
            elif run.timed_out or run.cpu_cut_ms is not None or child.token is not None:
                await child.kill_tree()
            else:  # bwrap: the namespace died with its init; only the group is left to check
                child.kill_group()
            run.exit = await child.reap(grace_s=config.reap_grace_ms / 1000)
            with trio.move_on_after(config.drain_grace_ms / 1000):
                await drained.wait()
            nursery.cancel_scope.cancel()
    return run


@dataclass(slots=True)
class _CpuWatch:
    """The command's cgroup, and the CPU time (ms) it may use before it is killed (None:
    no budget limits it)."""

    left_ms: int | None
    group: CommandCgroup | None

    async def until_exited(self, child: Child) -> int | None:
        """Wait for ``child`` to exit: None; or, at once, the CPU time (ms) it had used when
        that was read to have passed ``left_ms``, for the caller to kill it."""
        if self.left_ms is None:
            await child.wait_exited()
            return None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_when_exited, child, nursery.cancel_scope)
            while True:
                await trio.sleep(CPU_POLL_S)
                used = self.cpu_ms(child)
                if used is not None and used > self.left_ms:
                    nursery.cancel_scope.cancel()
                    return used
        return None  # it exited first

    def cpu_ms(self, child: Child) -> int | None:
        """The CPU time (ms) of ``child``'s command so far: its cgroup's, else its tree's;
        None once it is reaped without a cgroup (its pid may name another process)."""
        if self.group is not None:
            used = self.group.cpu_ms()
            if used is not None:
                return used
        return tree_cpu_ms(child.pid) if child.exit is None else None


async def _cancel_when_exited(child: Child, scope: trio.CancelScope) -> None:
    await child.wait_exited()
    scope.cancel()


async def _drain_all(child: Child, run: _Run, drained: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, child.stdout, run.stdout)
        nursery.start_soon(drain, child.stderr, run.stderr)
        nursery.start_soon(drain, child.report, run.report)
    drained.set()


def _result(
    plan: PreparedCommand,
    run: _Run,
    config: ExecConfig,
    *,
    sandbox: Sandbox,
    duration_ms: int,
    usage: CgroupUsage | None,
) -> ExecResult:
    exit_code, signo = describe_status(run.exit.status) if run.exit else (None, None)
    cpu_ms, peak_rss_kib = parse_time_report(run.report.text())
    limits = limits_from_signal(
        signo, cpu_ms=cpu_ms, cpu_limit_s=cpu_seconds(plan.timeout_ms, config.cpu_cores)
    )
    if run.timed_out:
        limits = {Limit.TIMEOUT}
        exit_code = None
    if run.stdout.truncated or run.stderr.truncated:
        limits.add(Limit.OUTPUT)
    if usage is not None and usage.oom_killed:
        limits.add(Limit.MEMORY)
    if usage is not None and usage.tasks_refused:
        limits.add(Limit.PROCESSES)
    return ExecResult(
        command=plan.command,
        program=plan.program,
        argv=plan.argv,
        working_dir=plan.working_dir,
        sandbox=sandbox.kind,
        limits_by=sandbox.limits,
        timeout_ms=plan.timeout_ms,
        exit_code=exit_code,
        signal=signo,
        limits=frozenset(limits),
        duration_ms=duration_ms,
        cpu_ms=cpu_ms,
        peak_rss_kib=peak_rss_kib,
        stdout=run.stdout.text(),
        stderr=run.stderr.text(),
        stdout_bytes=run.stdout.total_bytes,
        stderr_bytes=run.stderr.total_bytes,
        stdout_summary=run.stdout.summary(config.summary_max_chars),
        stderr_summary=run.stderr.summary(config.summary_max_chars),
    )

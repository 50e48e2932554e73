"""The ``exec`` op (IN:SHELL, OUT:EXEC_RESULT): run a command in the sandbox, under limits.

The reply carries the seed's summaries; the full (capped) output goes to memory as an
``exec_log`` write, and the op's audit record (``ExecAudit``) names the command, its exit and
that write's path. Commands that config marks
safe to cache (``cache_safe_patterns``) are answered from a 60 s cache (the seed's TTL).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

import trio

from csp_web.config import Config, GuardConfig, daemon_paths, egress_proxy, shared_section
from csp_web.core.api import budget as task_budget
from csp_web.core.api.audit import OpAudit, redact_userinfo
from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import budget_ms, work_seconds
from csp_web.core.api.errors import OpError, audit_failures
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import Effects, Op
from csp_web.core.api.records import json_record
from csp_web.core.api.replies import Result
from csp_web.infra.redis_cache import open_response_cache
from csp_web.infra.redis_link import RedisLink
from csp_web.net import parse_proxy
from csp_web.net.guard_proxy import GuardProxy
from protocol import ErrorCode
from specialists.tool.config import protected_paths, tool_section, workspace_unwritable
from specialists.tool.exec.config import ExecConfig

from .exec import (
    CpuSpent,
    ExecNetwork,
    ExecRequest,
    ExecResult,
    Limit,
    cache_key,
    cacheable,
    probe_sandbox,
    run_command,
    sweep_lane_roots,
)
from .exec._limits import cpu_seconds
from .exec._request import check_timeout
from .services import ExecServices, ToolServices

log = logging.getLogger(__name__)


def _masked_private(private: tuple[str, ...]) -> tuple[str, ...]:
    """The daemon paths bubblewrap must mask. A root daemon runs commands as an unprivileged
    uid: a path behind a directory closed to others is already out of its reach, and bwrap
    (running as that uid) could not place a mask there; the working-directory check still
    covers every path."""
    if os.geteuid() != 0:
        return private
    return tuple(p for p in private if _others_can_reach(p))


def _others_can_reach(path: str) -> bool:
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            if not os.stat(parent).st_mode & 0o001:
                return False
        except OSError:
            return False
        if parent == os.path.dirname(parent):
            return True
        parent = os.path.dirname(parent)


def _effective_config(config: Config) -> ExecConfig:
    """The exec policy with the daemon's own paths masked, and its protected paths expanded
    (``~`` is the daemon user's home) and joined by every file the daemon reads as config or
    runs (``daemon_inputs``). A workspace root among the daemon's paths never gets here:
    building the Config refuses it (``specialists.tool.exec.config.refuse_private_workspaces``)."""
    exec_config = tool_section(config).exec
    private = _masked_private(daemon_paths(config))
    masked = tuple(dict.fromkeys((*exec_config.masked_paths, *private)))
    return replace(exec_config, masked_paths=masked, protected_paths=protected_paths(config))


def prepare_exec_reload(tool: ToolServices, config: Config) -> Callable[[], None]:
    """The reload hook (``csp_web.config.reload``) for ``tool.exec``: commands started after
    it run under the new policy (running ones keep theirs: a handler reads ``tool.exec``
    once); the sandbox stays as probed."""
    running = tool.exec
    if running is None:
        return lambda: None
    exec_config = _effective_config(config)
    network = _network(config, exec_config)
    reloaded = ExecServices(exec_config, running.sandbox, running.cache, network)

    def commit() -> None:
        tool.exec = reloaded

    return commit


@asynccontextmanager
async def open_exec_services(
    config: Config, *, link: RedisLink | None = None
) -> AsyncIterator[ExecServices]:
    """Probe the sandbox once (logged) and open the exec result cache.

    Raises ValueError when exec is configured (workspace roots) for a daemon that is not root
    and has no bubblewrap: its commands would run as the daemon's own uid, free to read the
    outbox and talk to the daemon's socket.
    """
    exec_config = _effective_config(config)
    concurrent = config.tasks.specialists.tool.max_running
    sandbox = await probe_sandbox(exec_config, private=daemon_paths(config), concurrent=concurrent)
    if sandbox.kind == "none":
        if os.geteuid() != 0 and exec_config.workspace_roots:
            raise ValueError(
                "tool.exec needs bubblewrap when the daemon is not root (commands would run"
                f" as the daemon's own uid, beside its state): {sandbox.reason}"
            )
        log.warning("exec runs WITHOUT bubblewrap: %s", sandbox.reason)
    else:
        log.info("exec sandbox: %s", sandbox.kind)
    if sandbox.cgroup is None:
        log.warning(
            "exec limits: rlimit (RLIMIT_AS per process, RLIMIT_NPROC %d): no cgroup: %s",
            sandbox.nproc,
            sandbox.cgroup_reason,
        )
    else:
        log.info("exec limits: %s under %s", sandbox.limits, sandbox.cgroup.memory_dir)
    for unwritable in workspace_unwritable(config):
        log.warning("tool.exec.workspace_roots: %s", unwritable)
    directory = os.path.join(config.cache_dir, "exec")
    async with open_response_cache(
        directory,
        size_limit_bytes=64 * 1024 * 1024,
        memory_bytes=32 * 1024 * 1024,
        link=link,  # shared with the fleet when redis.url is set
        store="exec",
    ) as cache:
        yield ExecServices(exec_config, sandbox, cache, _network(config, exec_config))


def _network(config: Config, exec_config: ExecConfig) -> ExecNetwork:
    """Where a network rule's lanes open: a guard proxy of exec's own (lanes only, no port)
    judging by ``web.guard`` and going out through ``web.proxy`` as fetch does."""
    sweep_lane_roots()  # a daemon killed before it removed its lanes left them behind
    upstream = egress_proxy(config)
    proxy = GuardProxy(
        lambda: shared_section(config, GuardConfig),
        upstream=parse_proxy(upstream) if upstream is not None else None,
    )
    return ExecNetwork(proxy, exec_config.network_max_connections)


def exec_services(tool: ToolServices) -> ExecServices:
    services = tool.exec
    if services is None:
        raise OpError(ErrorCode.NOT_AVAILABLE, "exec is not configured", scope=("shell",))
    return services


def _env(params: Params) -> dict[str, str]:
    value = params.json("ENV")
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise OpError(ErrorCode.INVALID_FIELD, "ENV must be a JSON object of strings")
    return {str(k): v for k, v in value.items()}


def _request(params: Params, services: ExecServices) -> tuple[ExecRequest, int]:
    """The request to run and the timeout a ``timeout_exceeded`` reply names."""
    timeout_ms = params.opt_integer("TIMEOUT_MS") or services.config.default_timeout_ms
    timeout_ms = min(timeout_ms, budget_ms() or timeout_ms)
    # Finish inside the task's own deadline, so the engine reports the timeout (with the
    # command and exit:null) and kills the tree, rather than the dispatcher cutting it off.
    # The reserve kept for that is internal: the reply names the budget (issue 8.16).
    left_ms = work_seconds(default_s=timeout_ms / 1000) * 1000
    request = ExecRequest(
        params.text("COMMAND"),
        timeout_ms=max(1, min(timeout_ms, int(left_ms))),
        working_dir=params.opt_text("WORKING_DIR"),
        env=_env(params),
        shell=params.flag("SHELL"),
    )
    return request, timeout_ms


def _reply_fields(result: ExecResult) -> tuple[tuple[str, str], ...]:
    fields = [
        ("EXIT_CODE", str(result.exit_code)),
        ("EXEC_TIME", str(result.duration_ms)),
        ("STDOUT_SUMMARY", result.stdout_summary),
        ("STDERR_SUMMARY", result.stderr_summary),
    ]
    if result.cpu_ms is not None:
        fields.append(("CPU_MS", str(result.cpu_ms)))
    if result.peak_rss_kib is not None:
        fields.append(("PEAK_RSS_KIB", str(result.peak_rss_kib)))
    if result.signal is not None:
        fields.append(("SIGNAL", str(result.signal)))
    fields += [("LIMIT", limit) for limit in sorted(result.limits)]
    fields.append(("SANDBOX", result.sandbox))
    fields.append(("LIMITS", result.limits_by))
    fields += [("NETWORK_REFUSED", line) for line in result.network_refused]
    if result.network_refused_more:
        fields.append(("NETWORK_REFUSED_MORE", str(result.network_refused_more)))
    return tuple(fields)


async def _log_output(ctx: OpContext, result: ExecResult) -> str:
    header = json_record(  # metadata as the audit keeps it: a URL's password written ***@
        command=redact_userinfo(result.command),
        argv=[redact_userinfo(arg) for arg in result.argv],
        working_dir=result.working_dir,
        exit=result.exit_code,
        signal=result.signal,
        limits=sorted(result.limits),
        duration_ms=result.duration_ms,
        stdout_bytes=result.stdout_bytes,
        stderr_bytes=result.stderr_bytes,
    )
    body = f"{header}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}\n"
    write = await ctx.remember("tool", "exec_log", "exec-logs", body, suffix=".log")
    return write.path


@dataclass(frozen=True)
class ExecAudit(OpAudit):
    """What an exec adds to its audit record: the command as given (never its ENV values),
    and once it ran, its exit code, the limits it hit and its ``exec_log`` write's path."""

    command: str
    working_dir: str | None
    exit: int | None = None
    limits: tuple[str, ...] = ()
    log: str | None = None


def _cached_result(value: Any) -> Result | None:
    if not isinstance(value, dict):
        return None
    fields = (*((str(k), str(v)) for k, v in value["fields"]), ("CACHED", "true"))
    return Result(str(value["data"]), tuple(value["scope"]), fields)


async def _run_budgeted(request: ExecRequest, services: ExecServices) -> ExecResult:
    """``run_command`` with its CPU time reserved from ``exec_cpu_ms`` before it starts (the
    most RLIMIT_CPU lets it take, or what is left when less), killed once its CPU passes the
    reserve (SPEC D-3), and settled by what it used: past the reserve, the budget runs out.
    A command cut short (cancelled, timed out) is charged the CPU read before it was killed,
    the whole reserve when that could not be read; only one never started is charged 0."""
    timeout_ms = check_timeout(request.timeout_ms, services.config)
    most_ms = cpu_seconds(timeout_ms, services.config.cpu_cores) * 1000
    limited = task_budget.left("exec_cpu_ms") is not None
    reserved = await task_budget.reserve("exec_cpu_ms", most_ms)
    spent = CpuSpent()
    result = None
    try:
        result = await run_command(
            request,
            services.config,
            sandbox=services.sandbox,
            network=services.network,
            cpu_left_ms=reserved if limited else None,  # killed once past it
            spent=spent,
        )
        return result
    finally:
        with trio.CancelScope(shield=True):  # what it did not take goes back, cancelled too
            await task_budget.settle("exec_cpu_ms", reserved, _cpu_used(result, spent, reserved))


def _cpu_used(result: ExecResult | None, spent: CpuSpent, reserved: int) -> int:
    """What a command's budget is charged: its measured CPU time; 0 if it never started;
    all of ``reserved`` if it started and nothing measured it (it may have burned it all)."""
    readings: tuple[int | None, ...] = (spent.cpu_ms,)
    if result is not None:
        readings += (result.cpu_ms, result.cpu_cut_ms)
    measured = [reading for reading in readings if reading is not None]
    if measured:
        return max(measured)
    return reserved if spent.started else 0


async def exec_command(params: Params, ctx: OpContext, tool: ToolServices) -> Result:
    services = exec_services(tool)
    request, budget = _request(params, services)
    audit = ExecAudit(request.command, request.working_dir)
    key = cache_key(
        request.command, request.working_dir or "", shell=request.shell, env=dict(request.env)
    )
    use_cache = cacheable(request.command, services.config) and not params.flag("NO_CACHE")
    with audit_failures(audit):
        if use_cache and (hit := _cached_result(await services.cache.get("exec", key))):
            return replace(hit, audit=audit)
        result = await _run_budgeted(request, services)
        result = replace(result, timeout_ms=budget)
        # A command the engine timed out is owed its log and reply even when the task's
        # deadline passes during the clear-up (run_command's timeout leaves it only the reserve).
        with trio.CancelScope(shield=Limit.TIMEOUT in result.limits):
            log_path = await _log_output(ctx, result)
    audit = replace(audit, exit=result.exit_code, limits=tuple(sorted(result.limits)), log=log_path)
    error = result.failure()
    if error is not None:
        raise OpError(
            error.code,
            error.detail,
            scope=error.scope,
            data=error.data,
            fields=(*error.fields, ("LOG_PATH", log_path)),
            audit=audit,
        )
    reply = Result(
        f"exit:{result.exit_code}",
        (result.program,),
        (*_reply_fields(result), ("LOG_PATH", log_path)),
        audit=audit,
    )
    if use_cache:
        entry = {"data": reply.data, "scope": list(reply.scope), "fields": reply.fields}
        await services.cache.set("exec", key, entry, ttl_s=services.config.cache_ttl_s)
    return reply


EXEC_REPLIES = (
    ReplyField(
        "EXIT_CODE", "the command ran and exited (not at a timeout)", "its exit status", kind="int"
    ),
    ReplyField("EXEC_TIME", "the command ran", "ms it ran", kind="int"),
    ReplyField(
        "STDOUT_SUMMARY",
        "the command ran; FAIL: command_failed when it wrote to stdout",
        "its output, capped",
    ),
    ReplyField(
        "STDERR_SUMMARY", "the command ran; FAIL: command_failed", "its error output, capped"
    ),
    ReplyField("CPU_MS", "measured", "CPU time used", kind="int"),
    ReplyField("PEAK_RSS_KIB", "measured", "peak memory", kind="int"),
    ReplyField("SIGNAL", "a signal ended it", "the signal's number", kind="int"),
    ReplyField("LIMIT", "one per limit it hit", "which (time, memory, output, ...)", repeat=True),
    ReplyField("SANDBOX", "the command ran", "bwrap or none"),
    ReplyField("LIMITS", "the command ran", "what enforced the limits"),
    ReplyField("CACHED", "a cached result", "true", kind="bool"),
    ReplyField(
        "NETWORK_REFUSED",
        "one per destination its network lane refused (at most 16)",
        "<host>:<port> <code>:<detail>",
        repeat=True,
    ),
    ReplyField(
        "NETWORK_REFUSED_MORE",
        "its lane refused connections the NETWORK_REFUSED lines do not name",
        "how many",
        kind="int",
    ),
    ReplyField("COMMAND", "FAIL: the policy refused it", "the command refused"),
    ReplyField("LOG_PATH", "always but refusals", "the exec log file of this run"),
)
EXEC_EXAMPLE = Example(
    ('TASK REQ:exec IN:SHELL OUT:EXEC_RESULT\nID 1\nCOMMAND "echo high tide"\nSHELL true\n'),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [shell]\n"
        "DATA exit:0\n"
        "EXIT_CODE 0\n"
        "EXEC_TIME 0\n"
        'STDOUT_SUMMARY "high tide"\n'
        'STDERR_SUMMARY ""\n'
        "CPU_MS …\n"
        "PEAK_RSS_KIB …\n"
        "SANDBOX bwrap\n"
        "LIMITS …\n"
        "LOG_PATH …\n"
    ),
    volatile=("CPU_MS", "PEAK_RSS_KIB", "LIMITS", "LOG_PATH"),
)


OPS: list[Op[ToolServices]] = [
    Op(
        "exec",
        "SHELL",
        "EXEC_RESULT",
        "tool",
        exec_command,
        (
            FieldSpec("COMMAND", required=True, max_chars=8192),
            FieldSpec("TIMEOUT_MS", "int", minimum=1, maximum=600_000),
            FieldSpec("WORKING_DIR", max_chars=4096),
            FieldSpec("ENV", "json", doc="a JSON object of variables to add (allow-listed)"),
            FieldSpec("SHELL", "bool", default=False),
            FieldSpec("NO_CACHE", "bool", default=False),
        ),
        inline="COMMAND",
        replies=EXEC_REPLIES,
        example=EXEC_EXAMPLE,
        doc="run a command in the sandbox under time, memory, process and output limits",
        # A command may do anything its sandbox allows (without bwrap, the network too).
        effects=Effects(),
    )
]

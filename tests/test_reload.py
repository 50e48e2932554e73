"""SIGHUP reloads what may change at runtime (issue 9.6: it killed the daemon, exit 129).

A real ``csp-web serve`` process: the test edits its config file, sends SIGHUP, and checks the
new behaviour over the socket and the line the daemon logs. A file that does not load, or that
a service refuses, keeps the running settings.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from csp_web.app.catalog import SPECIALISTS, config_from_mapping, config_sections, load_config
from csp_web.client.trio_client import open_client
from csp_web.config import Config, ConfigError, SocketConfig, with_section
from csp_web.config.reload import plan_reload
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import allowed_uids
from csp_web.core.daemon.compose import reload_paths
from csp_web.core.transports.unix import Gate, Lease
from csp_web.infra.ratelimit import Rate, RateLimits
from protocol import ErrorCode, Reply, Status, Task, serialize
from specialists.tool.config import tool_section
from specialists.web.config import web_section
from tests.conftest import wait_until
from tests.net._origin import Origin
from tests.tool.exec_support import scratch_dir
from tests.tool.mcp_servers.support import TOY_SERVER

CSP_WEB = shutil.which("csp-web") or "csp-web"
PROCESS_TIMEOUT_S = 30  # a bound for hangs, far above the second or so a start takes


@pytest.fixture
def workspace() -> Iterator[str]:
    with scratch_dir() as path:
        yield path


class Served:
    """A ``csp-web serve --config`` process on a socket, its config file and its log."""

    def __init__(self, tmp_path: Path, sock_dir: str, workspace: str) -> None:
        self.config_path = tmp_path / "config.yaml"
        self.log_path = tmp_path / "daemon.log"
        self.socket_path = os.path.join(sock_dir, "csp.sock")
        self.state_dir = str(tmp_path / "state")
        self.workspace = workspace
        self.process: trio.Process | None = None

    def write_config(
        self, programs: list[str], mcp: dict[str, Any] | None = None, **extra: Any
    ) -> None:
        data: dict[str, Any] = {
            "daemon": {"state_dir": self.state_dir, "grace_period_s": 5.0},
            "tool": {
                "exec": {
                    "workspace_roots": [self.workspace],
                    "allowed_programs": [{"program": name} for name in programs],
                },
                "mcp": {"servers": mcp or {}},
            },
            **extra,
        }
        self.config_path.write_text(yaml.safe_dump(data))

    def log(self) -> str:
        return self.log_path.read_text()

    def socket_args(self) -> list[str]:
        return ["--socket", self.socket_path, "--no-stdin"]

    async def start(self) -> None:
        fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.process = await trio.lowlevel.open_process(
                [CSP_WEB, "serve", "--config", str(self.config_path), *self.socket_args()],
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=fd,
                env={k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"},
            )
        finally:
            os.close(fd)
        # The daemon is a process: its log is polled (bounded); nothing here can signal it.
        await wait_until(lambda: " ready " in self.log(), timeout_s=PROCESS_TIMEOUT_S)

    async def run(self, command: str) -> Reply:
        return await self.call(
            Task("exec", "SHELL", "EXEC_RESULT", command, (("NO_CACHE", "true"),))
        )

    async def call(self, task: Task) -> Reply:
        assert self.process is not None
        assert self.process.poll() is None, self.log()
        async with open_client(self.socket_path) as client:
            return await client.call(task, timeout_s=PROCESS_TIMEOUT_S)

    async def stats(self, key: str) -> list[str]:
        reply = await self.call(Task("stats", "SYS", "STATS"))
        return [value for name, value in reply.fields if name == key]

    async def hangup_and_wait_for(self, text: str) -> None:
        assert self.process is not None
        seen = self.log().count(text)
        self.process.send_signal(signal.SIGHUP)
        # The daemon is a process: its log is polled (bounded); nothing here can signal it.
        await wait_until(lambda: self.log().count(text) > seen, timeout_s=PROCESS_TIMEOUT_S)

    async def stop(self) -> int:
        assert self.process is not None
        try:
            self.process.send_signal(signal.SIGTERM)
            with trio.fail_after(PROCESS_TIMEOUT_S):
                return await self.process.wait()
        finally:
            if self.process.returncode is None:
                self.process.kill()
                await self.process.wait()


@pytest.fixture
async def served(tmp_path: Path, sock_dir: str, workspace: str) -> AsyncIterator[Served]:
    served = Served(tmp_path, sock_dir, workspace)
    served.write_config(["echo", "printf"])
    await served.start()
    try:
        yield served
    finally:
        if served.process is not None and served.process.returncode is None:
            served.process.kill()
            await served.process.wait()


def _error(reply: Reply) -> str:
    assert reply.status is Status.FAIL, reply
    return (reply.get("ERROR") or "").partition(":")[0]


async def test_sighup_applies_a_new_exec_allow_list_and_logs_what_changed(
    served: Served,
) -> None:
    assert (await served.run("echo hi")).status is Status.OK
    served.write_config(["printf"], connection={"max_fields": 64})
    await served.hangup_and_wait_for(
        "SIGHUP: settings reloaded; applied: tool.exec.allowed_programs;"
        " needs a restart (kept): connection.max_fields"
    )
    assert _error(await served.run("echo hi")) == "command_blocked"
    assert (await served.run("printf hi")).status is Status.OK
    assert await served.stop() == 0


async def test_a_bad_file_at_sighup_keeps_the_running_settings_and_logs_why(
    served: Served,
) -> None:
    text = served.config_path.read_text()
    served.config_path.write_text(text.replace("allowed_programs", "allowed_programz"))
    await served.hangup_and_wait_for(
        "SIGHUP: reload refused, keeping the running settings:"
        " tool.exec.allowed_programz: unknown key"
    )
    assert (await served.run("echo hi")).status is Status.OK
    # A workspace inside the daemon's own state: the strict load itself refuses it.
    served.workspace = served.state_dir
    served.write_config(["printf"])
    await served.hangup_and_wait_for(
        f"SIGHUP: reload refused, keeping the running settings: tool.exec.workspace_roots:"
        f" {served.state_dir} overlaps the daemon's own"
    )
    assert (await served.run("echo hi")).status is Status.OK  # echo is still allowed
    # YAML nested past Python's stack: once a RecursionError that ended the daemon.
    served.config_path.write_text("daemon: " + "[" * 5000 + "]" * 5000 + "\n")
    await served.hangup_and_wait_for(
        f"SIGHUP: reload refused, keeping the running settings: {served.config_path}:"
        " not valid YAML: nested too deeply"
    )
    assert (await served.run("echo hi")).status is Status.OK
    assert "Traceback" not in served.log()
    assert await served.stop() == 0


async def test_a_fifo_in_the_configs_place_at_sighup_is_refused_and_later_reloads_apply(
    served: Served,
) -> None:
    """A FIFO with no writer once held the reload's open for good, and every later SIGHUP
    (a uid revoked, say) waited behind it, unlogged."""
    served.config_path.unlink()
    os.mkfifo(served.config_path)
    try:
        await served.hangup_and_wait_for(
            "SIGHUP: reload refused, keeping the running settings:"
            f" {served.config_path}: not a regular file"
        )
    finally:
        served.config_path.unlink()
    served.write_config(["printf"])
    await served.hangup_and_wait_for(
        "SIGHUP: settings reloaded; applied: tool.exec.allowed_programs"
    )
    assert _error(await served.run("echo hi")) == "command_blocked"
    assert await served.stop() == 0


def test_a_reload_refuses_a_config_path_naming_a_device_or_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^/dev/null: not a regular file$"):
        load_config("/dev/null", regular_only=True)  # once read as an empty file: defaults
    with pytest.raises(ConfigError, match=f"^{re.escape(str(tmp_path))}: "):
        load_config(str(tmp_path), regular_only=True)


def _config(**data: Any) -> Config:
    return config_from_mapping(data, sections=config_sections())


def test_a_reload_plan_applies_reloadable_paths_and_keeps_the_rest() -> None:
    running = _config()
    new = _config(
        tasks={"default_timeout_ms": 5000, "specialists": {"web": {"max_running": 2}}},
        web={
            "fetch": {"rate": {"per_minute": 1, "burst": 1}},
            "guard": {"allow_private": ["127.0.0.1"], "user_agent": "other/1"},
        },
        tool={
            "exec": {"allow_shell": True, "bwrap_program": "/opt/bwrap"},
            "mcp": {"servers": {"fs": {"command": "mcp-fs"}}},
        },
        socket={"allowed_uids": [1234], "max_connections": 8},
    )
    plan = plan_reload(running, new, *reload_paths(SPECIALISTS))
    assert plan.applied == (
        "socket.allowed_uids",
        "tasks.default_timeout_ms",
        "web.guard.allow_private",
        "web.fetch.rate.per_minute",
        "web.fetch.rate.burst",
        "tool.exec.allow_shell",
        "tool.mcp.servers",
    )
    assert plan.needs_restart == (
        "socket.max_connections",
        "tasks.specialists",
        "web.guard.user_agent",
        "tool.exec.bwrap_program",
    )
    assert plan.config.tasks.default_timeout_ms == 5000
    assert web_section(plan.config).fetch.rate.per_minute == 1.0
    assert web_section(plan.config).guard.allow_private == ("127.0.0.1",)
    assert web_section(plan.config).guard.user_agent == web_section(running).guard.user_agent
    assert tool_section(plan.config).exec.allow_shell is True
    assert tool_section(plan.config).exec.bwrap_program == tool_section(running).exec.bwrap_program
    assert tool_section(plan.config).mcp.servers.keys() == {"fs"}
    assert plan.config.tasks.specialists == running.tasks.specialists
    assert plan.config.socket.allowed_uids == (1234,)
    assert plan.config.socket.max_connections == running.socket.max_connections


def test_a_change_in_a_real_specialists_own_section_is_planned_key_by_key() -> None:
    """Issue 23: node's own section (``nodes``) is planned like the core's, each key by its
    dotted path, not as one opaque ``sections`` change."""
    new = _config(nodes={"max_nodes": 8, "tls": {"port": 0}}, socket={"allowed_uids": [7]})
    plan = plan_reload(_config(), new, *reload_paths(SPECIALISTS))
    assert plan.applied == ("socket.allowed_uids",)
    assert plan.needs_restart == ("nodes.tls.port", "nodes.max_nodes")
    assert plan.config.sections == _config().sections


def test_an_unchanged_file_plans_nothing() -> None:
    plan = plan_reload(_config(), _config(), *reload_paths(SPECIALISTS))
    assert (plan.applied, plan.needs_restart) == ((), ())


async def test_reloaded_rate_limits_keep_the_buckets_whose_rate_did_not_change() -> None:
    limits = RateLimits({"fetch": Rate(20, 20), "api:github": Rate(60, 10)})
    fetch, github = limits.bucket("fetch"), limits.bucket("api:github")
    limits.reload({"fetch": Rate(20, 20), "api:github": Rate(1, 1)})
    assert limits.bucket("fetch") is fetch  # its tokens spent so far still count
    renewed = limits.bucket("api:github")
    assert renewed is not None
    assert renewed is not github
    assert renewed.rate == Rate(1, 1)


RELOADED = "SIGHUP: settings reloaded"


def _mcp(*fields: tuple[str, str]) -> Task:
    return Task("mcp", "TOOL", "MCP_RESULT", None, fields)


def _toy(**env: str) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(TOY_SERVER)], "env": env}


async def test_sighup_adds_changes_and_removes_mcp_servers_the_first_one_opening_the_pool(
    served: Served,
) -> None:
    getenv = _mcp(("SERVER", "toy"), ("TOOL", "getenv"), ("PARAMS", '{"name":"CSP_TOY"}'))
    before = await served.call(getenv)
    assert (_error(before), before.get("REASON")) == ("mcp_unavailable", "not_configured")
    assert await served.stats("MCP") == []

    served.write_config(["echo", "printf"], mcp={"toy": _toy(CSP_TOY="1")})
    await served.hangup_and_wait_for(f"{RELOADED}; applied: tool.mcp.servers;")
    assert (await served.call(getenv)).get("DATA") == "1"
    assert "MCP servers reloaded: added toy" in served.log()

    served.write_config(["echo", "printf"], mcp={"toy": _toy(CSP_TOY="2")})
    await served.hangup_and_wait_for(f"{RELOADED}; applied: tool.mcp.servers;")
    assert (await served.call(getenv)).get("DATA") == "2"  # a new process with the new env
    assert "MCP servers reloaded: restarted (changed) toy" in served.log()
    [line] = await served.stats("MCP")
    assert json.loads(line)["state"] == "running"

    served.write_config(["echo", "printf"])
    await served.hangup_and_wait_for("MCP servers reloaded: removed toy")
    after = await served.call(getenv)
    assert (_error(after), after.get("REASON")) == ("mcp_unavailable", "not_configured")
    assert await served.stats("MCP") == []
    assert await served.stop() == 0


async def test_sighup_widens_then_narrows_allow_private_for_a_real_local_origin(
    served: Served, nursery: trio.Nursery
) -> None:
    origin = Origin("http")
    await nursery.start(functools.partial(origin.serve, ssl_context=None))
    guard: dict[str, Any] = {"allow_http": True, "allowed_ports": [origin.port]}
    fetch = Task("fetch", "WEB", "CONTENT", origin.url("127.0.0.1"), (("NO_CACHE", "true"),))

    served.write_config(["echo"], web={"guard": guard})
    await served.hangup_and_wait_for(RELOADED)
    assert _error(await served.call(fetch)) == "ssrf_blocked"
    assert origin.requests == []

    served.write_config(["echo"], web={"guard": guard | {"allow_private": ["127.0.0.1"]}})
    await served.hangup_and_wait_for(f"{RELOADED}; applied: web.guard.allow_private;")
    opened = await served.call(fetch)
    assert opened.status is Status.OK, opened
    assert "hello" in (opened.get("DATA") or "")

    served.write_config(["echo"], web={"guard": guard})
    await served.hangup_and_wait_for(f"{RELOADED}; applied: web.guard.allow_private;")
    assert _error(await served.call(fetch)) == "ssrf_blocked"
    assert origin.paths() == ["/robots.txt", "/page"]
    assert await served.stop() == 0


async def test_sighup_narrowing_allowed_uids_closes_a_removed_uids_connection_and_refuses_new_ones(
    served: Served,
) -> None:
    connected = await trio.open_unix_socket(served.socket_path)
    async with connected:
        await connected.send_all(serialize(Task("ping", "SYS", "PONG", None, (("ID", "p1"),))))
        with trio.fail_after(PROCESS_TIMEOUT_S):
            assert (await connected.receive_some(65536)).startswith(b"STATUS OK\n")
        other_uid = os.geteuid() + 4242
        served.write_config(["echo", "printf"], socket={"allowed_uids": [other_uid]})
        await served.hangup_and_wait_for(f"{RELOADED}; applied: socket.allowed_uids;")
        with trio.fail_after(PROCESS_TIMEOUT_S):
            assert await connected.receive_some(65536) == b""  # closed by the daemon
    assert f"uid {os.geteuid()} may no longer connect" in served.log()
    refused = await trio.open_unix_socket(served.socket_path)
    async with refused:
        with trio.fail_after(PROCESS_TIMEOUT_S):
            frame = await refused.receive_some(65536)
    assert frame == (
        b"STATUS FAIL\nSCOPE []\nDATA none\n"
        + f"ERROR permission_denied:uid {os.geteuid()} may not connect\n\n".encode()
    )
    assert await served.stop() == 0


async def test_stats_show_the_last_reload_applied_or_refused(served: Served) -> None:
    assert await served.stats("RELOAD") == []
    served.write_config(["printf"], connection={"max_fields": 64})
    await served.hangup_and_wait_for(RELOADED)
    [applied] = await served.stats("RELOAD")
    record = json.loads(applied)
    assert datetime.datetime.fromisoformat(record.pop("at")).tzinfo is not None
    assert record == {
        "outcome": "applied",
        "applied": ["tool.exec.allowed_programs"],
        "kept": ["connection.max_fields"],
    }
    served.config_path.write_text("tool: [")
    await served.hangup_and_wait_for("SIGHUP: reload refused")
    [refused] = await served.stats("RELOAD")
    record = json.loads(refused)
    assert record["outcome"] == "refused"
    assert record["error"].startswith(str(served.config_path))
    assert await served.stop() == 0


class _Tenant:
    """A connection as the gate sees it (idle since 0)."""

    def __init__(self) -> None:
        self.evicted = False

    def idle_since(self) -> float | None:
        return 0.0

    def evict(self) -> None:
        self.evicted = True


def test_the_gate_judges_each_accept_by_the_allow_list_in_force_then() -> None:
    allowed = frozenset({1000})
    gate = Gate(SocketConfig(), lambda: allowed)
    assert isinstance(gate.admit(1000, "unix-1", 1), Lease)
    allowed = frozenset({2000})
    refused = gate.admit(1000, "unix-2", 2)
    assert isinstance(refused, OpError)
    assert (refused.code, refused.detail) == (
        ErrorCode.PERMISSION_DENIED,
        "uid 1000 may not connect",
    )
    assert isinstance(gate.admit(2000, "unix-3", 3), Lease)


def test_revoking_closes_only_the_connections_of_uids_no_longer_allowed() -> None:
    gate = Gate(SocketConfig(allowed_uids=(1000, 2000)))
    kept, removed = _Tenant(), _Tenant()
    for number, (uid, tenant) in enumerate(((2000, kept), (1000, removed)), 1):
        lease = gate.admit(uid, f"unix-{number}", number)
        assert isinstance(lease, Lease)
        lease.tenant = tenant
    gate.revoke(frozenset({2000}))
    assert (kept.evicted, removed.evicted) == (False, True)


def test_the_allow_list_defaults_to_the_daemons_own_uid() -> None:
    assert allowed_uids(SocketConfig()) == {os.geteuid()}
    assert allowed_uids(SocketConfig(allowed_uids=(7,))) == {7}


async def test_a_reload_reaches_every_specialist_of_the_app_daemon_in_process(
    config: Config,
) -> None:
    """Issue 7: composed by the app's root (WEB, TOOL, the configured memory path), a reload
    plans with the core's and the specialists' paths, runs each specialist's hook, swaps the
    one running Config and shows on REQ:stats; a refused reload changes nothing."""
    from dataclasses import replace

    from csp_web.app.compose import open_app_daemon
    from csp_web.core.api.context import Peer
    from csp_web.core.daemon.lifecycle import reload_settings

    fetch = replace(web_section(config).fetch, default_max_chars=4000)
    new = with_section(config, "web", replace(web_section(config), fetch=fetch))
    async with open_app_daemon(config) as daemon:
        dispatcher = daemon.dispatcher
        plan = await reload_settings(daemon, lambda: new)
        assert plan is not None
        assert plan.applied == ("web.fetch.default_max_chars",)
        assert web_section(dispatcher.services.config).fetch.default_max_chars == 4000
        stats = await dispatcher.run(Task("stats", "SYS", "STATS", None, ()), Peer("t"))
        assert json.loads(stats.get("RELOAD") or "{}")["outcome"] == "applied"
        assert stats.get("SANDBOX") is not None  # TOOL's stats lines, merged once

        def refused() -> Config:
            raise ValueError("not today")

        assert await reload_settings(daemon, refused) is None
        assert web_section(dispatcher.services.config).fetch.default_max_chars == 4000

        def broken(_new: Config) -> Callable[[], None]:  # a hook with a bug in its check
            raise RuntimeError("bug")

        wider = replace(fetch, default_max_chars=5000)
        again = with_section(config, "web", replace(web_section(config), fetch=wider))
        assert await reload_settings(daemon, lambda: again, [broken]) is None
        assert web_section(dispatcher.services.config).fetch.default_max_chars == 4000
        stats = await dispatcher.run(Task("stats", "SYS", "STATS", None, ()), Peer("t"))
        assert json.loads(stats.get("RELOAD") or "{}")["error"] == "internal_error:RuntimeError"

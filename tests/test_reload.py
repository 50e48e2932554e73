"""SIGHUP reloads what may change at runtime (issue 9.6: it killed the daemon, exit 129).

A real ``csp-web serve`` process: the test edits its config file, sends SIGHUP, and checks the
new behaviour over the socket and the line the daemon logs. A file that does not load, or that
a service refuses, keeps the running settings.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from csp_web.client import open_client
from csp_web.config import Config
from csp_web.config_load import config_from_mapping
from csp_web.config_reload import plan_reload
from csp_web.ratelimit import Rate, RateLimits
from protocol import Reply, Status, Task
from tests.conftest import wait_until
from tests.tool.exec_support import scratch_dir

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

    def write_config(self, programs: list[str], **extra: Any) -> None:
        data: dict[str, Any] = {
            "daemon": {"state_dir": self.state_dir, "grace_period_s": 5.0},
            "tool": {
                "exec": {
                    "workspace_roots": [self.workspace],
                    "allowed_programs": [{"program": name} for name in programs],
                }
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
        await wait_until(lambda: " ready " in self.log(), timeout_s=PROCESS_TIMEOUT_S)

    async def run(self, command: str) -> Reply:
        assert self.process is not None
        assert self.process.poll() is None, self.log()
        async with open_client(self.socket_path) as client:
            task = Task("exec", "SHELL", "EXEC_RESULT", command, (("NO_CACHE", "true"),))
            return await client.call(task, timeout_s=PROCESS_TIMEOUT_S)

    async def hangup_and_wait_for(self, text: str) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)
        await wait_until(lambda: text in self.log(), timeout_s=PROCESS_TIMEOUT_S)

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
    assert "Traceback" not in served.log()
    assert await served.stop() == 0


def _config(**data: Any) -> Config:
    return config_from_mapping(data)


def test_a_reload_plan_applies_reloadable_paths_and_keeps_the_rest() -> None:
    running = _config()
    new = _config(
        tasks={"default_timeout_ms": 5000, "specialists": {"web": {"max_running": 2}}},
        web={"fetch": {"rate": {"per_minute": 1, "burst": 1}}},
        tool={"exec": {"allow_shell": True, "bwrap_program": "/opt/bwrap"}},
        socket={"allowed_uids": [1234]},
    )
    plan = plan_reload(running, new)
    assert plan.applied == (
        "tasks.default_timeout_ms",
        "web.fetch.rate.per_minute",
        "web.fetch.rate.burst",
        "tool.exec.allow_shell",
    )
    assert plan.needs_restart == (
        "socket.allowed_uids",
        "tasks.specialists",
        "tool.exec.bwrap_program",
    )
    assert plan.config.tasks.default_timeout_ms == 5000
    assert plan.config.web.fetch.rate.per_minute == 1.0
    assert plan.config.tool.exec.allow_shell is True
    assert plan.config.tool.exec.bwrap_program == running.tool.exec.bwrap_program
    assert plan.config.tasks.specialists == running.tasks.specialists
    assert plan.config.socket == running.socket


def test_an_unchanged_file_plans_nothing() -> None:
    plan = plan_reload(_config(), _config())
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

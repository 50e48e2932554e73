"""exec of `true` over the real Unix socket, with and without the sandbox, next to a bare spawn.

An in-process daemon serves the exec op (audited, its output logged to the outbox as in
production); a client on one connection runs `TASK REQ:exec true IN:SHELL OUT:EXEC_RESULT`
again and again. Goal (issue 4): the sandbox adds <= 10 ms over the bare spawn at p50.

    python bench/exec_socket.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/exec_socket.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from csp_web.app.memory_path import open_memory_path  # noqa: E402
from csp_web.client.trio_client import open_client  # noqa: E402
from csp_web.config import Config, DaemonConfig, with_section  # noqa: E402
from csp_web.core.api.specialist import Specialist  # noqa: E402
from csp_web.core.daemon.compose import open_daemon  # noqa: E402
from csp_web.core.daemon.lifecycle import serve  # noqa: E402
from protocol import Status, Task  # noqa: E402
from specialists.tool.config import (  # noqa: E402
    ToolConfig,
    tool_section,
)
from specialists.tool.exec.config import ExecConfig, ProgramRule  # noqa: E402
from specialists.tool.ops_exec import OPS, open_exec_services  # noqa: E402
from specialists.tool.services import ExecServices, ToolServices  # noqa: E402


def _exec_only(services: ExecServices) -> Specialist[ToolConfig, ToolServices]:
    """The tool specialist with only exec, over ``services`` opened here."""
    return Specialist(
        name="tool",
        ops=tuple(OPS),
        slots=lambda slots: slots.tool,
        section=lambda config: tool_section(config),
        own_section=None,
        reloadable=(),
        restart_only=(),
        open_services=lambda section, config: nullcontext(ToolServices(services, None, None)),
        background=lambda _: (),
        stats_lines=lambda _: {},
        storage=lambda _: {},
        reload=None,
    )


NOBODY = 65534


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return f"p50 {statistics.median(ordered):7.2f} ms   p99 {p99:7.2f} ms"


async def bare(runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        await trio.run_process(["true"])
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def over_socket(config: Config, workdir: str, runs: int) -> tuple[list[float], str]:
    socket_path = os.path.join(workdir, "s", "csp.sock")
    async with (
        open_exec_services(config) as services,
        open_daemon(config, (_exec_only(services),), memory=open_memory_path(config)) as daemon,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(
            lambda task_status: serve(
                daemon, stdio=None, socket_path=socket_path, task_status=task_status
            )
        )
        samples = []
        async with open_client(socket_path) as client:
            for n in range(runs + 10):
                start = time.perf_counter()
                reply = await client.call(Task("exec", "SHELL", "EXEC_RESULT", "true"))
                if reply.status is not Status.OK:
                    raise SystemExit(f"exec failed: {reply}")
                if n >= 10:  # warm-up
                    samples.append((time.perf_counter() - start) * 1000)
        nursery.cancel_scope.cancel()
        return samples, services.sandbox.kind


def make_config(workdir: str, workspace: str, *, sandbox: bool) -> Config:
    exec_config = ExecConfig(
        workspace_roots=(workspace,),
        allowed_programs=(ProgramRule("true"),),
        bwrap_program="bwrap" if sandbox else None,
        max_processes=10_000 if not sandbox else 10,  # no sandbox: one budget for the uid
    )
    state = os.path.join(workdir, "state")
    return with_section(
        Config(daemon=DaemonConfig(state_dir=state, log_level="warning")),
        "tool",
        replace(ToolConfig(), exec=exec_config),
    )


async def run(runs: int) -> None:
    workdir = tempfile.mkdtemp(prefix="csp-bench-", dir="/tmp")
    workspace = tempfile.mkdtemp(prefix="csp-ws-", dir="/tmp")
    os.chmod(workspace, 0o755)
    if os.geteuid() == 0:
        os.chown(workspace, NOBODY, NOBODY)
    try:
        base = await bare(runs)
        print(f"bare trio.run_process(['true'])       {percentiles(base)}")
        for sandbox in (False, True):
            config = make_config(workdir, workspace, sandbox=sandbox)
            samples, kind = await over_socket(config, workdir, runs)
            overhead = statistics.median(samples) - statistics.median(base)
            print(
                f"exec true over the socket, sandbox {kind:5} {percentiles(samples)}"
                f"   p50 overhead {overhead:6.2f} ms"
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(workspace, ignore_errors=True)
    print(f"reproduce: python bench/exec_socket.py --runs {runs}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    trio.run(run, parser.parse_args().runs)


if __name__ == "__main__":
    main()

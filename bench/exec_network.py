"""What a rule's ``network`` adds to starting a command (issue 29 §3): the lane, the bridge.

Run from the repository root (as root, the engine also switches to nobody)::

    python bench/exec_network.py [--runs 40]

Two series of ``run_command("true")`` in bubblewrap, interleaved (each first in turn) so drift
hits both alike: ``true`` under a rule without ``network`` (the anchor), and under a rule with
one, where the engine opens a purpose lane of the guard proxy and the command starts behind the
bridge (``python3 -I -S _bridge.py``, which listens, forks its forwarder and execs ``true``).
Each prints its p50 wall time and its p50 CPU time (this process's, where the lane is served,
plus the command's as GNU time measures it inside the sandbox: the bridge becomes the command,
so its start-up is counted there), and both as ratios to the anchor.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/exec_network.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from csp_web.net import GuardConfig  # noqa: E402
from csp_web.net.guard_proxy import GuardProxy  # noqa: E402
from specialists.tool.exec import (  # noqa: E402
    ExecNetwork,
    ExecRequest,
    probe_sandbox,
    run_command,
)
from specialists.tool.exec.config import ExecConfig, ProgramRule  # noqa: E402

NOBODY = 65534


def _cpu_s() -> float:
    """CPU seconds of this process (the sandbox's own are not reaped here: bwrap's init is
    re-parented to the host's PID 1)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


async def main(runs: int) -> None:
    workspace = tempfile.mkdtemp(prefix="csp-bench-", dir="/tmp")
    if os.geteuid() == 0:
        os.chown(workspace, NOBODY, NOBODY)
    try:
        base = ExecConfig(workspace_roots=(workspace,))
        networked = replace(
            base,
            allowed_programs=(
                ProgramRule("true", network=("registry.example",)),
                *base.allowed_programs,
            ),
        )
        configs = {"no network": base, "network rule": networked}
        sandbox = await probe_sandbox(base)
        network = ExecNetwork(GuardProxy(GuardConfig), 32)
        wall: dict[str, list[float]] = {name: [] for name in configs}
        cpu: dict[str, list[float]] = {name: [] for name in configs}
        order = list(configs)
        for run in range(runs):
            for name in order[run % 2 :] + order[: run % 2]:  # each goes first in turn
                started, cpu_started = time.perf_counter(), _cpu_s()
                result = await run_command(
                    ExecRequest("true", working_dir=workspace),
                    configs[name],
                    sandbox=sandbox,
                    network=network,
                )
                assert result.exit_code == 0, result.stderr
                wall[name].append((time.perf_counter() - started) * 1000)
                cpu[name].append((_cpu_s() - cpu_started) * 1000 + (result.cpu_ms or 0))
        anchor_wall, anchor_cpu = (statistics.median(s["no network"]) for s in (wall, cpu))
        for name in configs:
            p50_wall, p50_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
            print(
                f"{name:13} wall p50 {p50_wall:6.1f} ms ratio {p50_wall / anchor_wall:4.2f}"
                f"  cpu p50 {p50_cpu:6.1f} ms ratio {p50_cpu / anchor_cpu:4.2f}"
            )
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    trio.run(main, parser.parse_args().runs)

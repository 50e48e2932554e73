"""What the exec engine adds to starting a process: ``run_command("true")`` against a bare spawn.

Run from the repository root (as root, the engine also switches to nobody)::

    python bench/exec_spawn.py [--runs 200]

Series are timed in the same process, interleaved so drift hits all alike: a bare
``trio.run_process(["/bin/true"])``; a Popen of /bin/true (reaped at once) on one of trio's
worker threads and on the engine's spawner threads (what the spawner costs or saves);
``run_command`` without the sandbox (prlimit, setpriv, GNU time, the /proc sweep for
leftovers); and ``run_command`` inside bubblewrap, with and without GNU time (the price of the
CPU and RSS figures) and without its cgroup. Each prints p50 and p99 in ms, and the p50
overhead over the bare spawn. The goal is <= 10 ms for the sandbox.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/exec_spawn.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.tool.exec import (  # noqa: E402
    ExecRequest,
    Sandbox,
    probe_sandbox,
    run_command,
)
from specialists.tool.exec._spawner import run_in_spawner  # noqa: E402
from specialists.tool.exec.config import ExecConfig  # noqa: E402

WARMUP = 10
NOBODY = 65534

Step = Callable[[], Awaitable[object]]


def percentile(samples: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``samples`` (ms)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def timed(step: Step) -> float:
    started = time.perf_counter()
    await step()
    return (time.perf_counter() - started) * 1000


async def measure(steps: dict[str, Step], runs: int) -> dict[str, list[float]]:
    """Each step ``runs`` times after a warm-up, round-robin."""
    for step in steps.values():
        for _ in range(WARMUP):
            await step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(runs):
        for name, step in steps.items():
            samples[name].append(await timed(step))
    return samples


def command_step(config: ExecConfig, sandbox: Sandbox) -> Step:
    async def step() -> object:
        result = await run_command(ExecRequest("true"), config, sandbox=sandbox)
        assert result.exit_code == 0, result.stderr
        return result

    return step


async def bare_step() -> object:
    return await trio.run_process(["/bin/true"])


def _popen_true() -> subprocess.Popen[bytes]:
    return subprocess.Popen(["/bin/true"], stdin=subprocess.DEVNULL, start_new_session=True)


async def worker_thread_step() -> object:
    """A Popen on one of trio's worker threads (what the engine did before the spawner)."""
    return (await trio.to_thread.run_sync(_popen_true)).wait()


async def spawner_thread_step() -> object:
    """The same Popen on the engine's long-lived spawner threads."""
    return (await run_in_spawner(_popen_true)).wait()


async def main(runs: int) -> None:
    workspace = tempfile.mkdtemp(prefix="csp-exec-bench-", dir="/tmp")
    os.chmod(workspace, 0o755)
    if os.geteuid() == 0:
        os.chown(workspace, NOBODY, NOBODY)
    try:
        config = ExecConfig(workspace_roots=(workspace,))
        bwrap = await probe_sandbox(config)
        # Without bwrap RLIMIT_NPROC is one budget for every process of the uid on the host,
        # and the bwrap series leaves sandbox inits for the host's init to reap (some
        # container inits do so lazily), so the unsandboxed series gets room.
        loose = replace(config, bwrap_program=None, max_processes=4096)
        bare = await probe_sandbox(loose)
        steps = {
            "bare trio.run_process": bare_step,
            "Popen, trio worker thread": worker_thread_step,
            "Popen, spawner thread": spawner_thread_step,
            "run_command, no sandbox": command_step(loose, bare),
        }
        if bwrap.kind == "bwrap":
            steps["run_command, bwrap"] = command_step(config, bwrap)
            # What the CPU/RSS figures cost: the same without GNU time in the chain.
            steps["  the same, no GNU time"] = command_step(config, replace(bwrap, time=None))
            # What the per-command cgroup (made, entered, read, removed) costs.
            if bwrap.cgroup is not None:
                off = replace(config, cgroup="off")
                steps["  the same, no cgroup"] = command_step(off, replace(bwrap, cgroup=None))
            print(f"limits: {bwrap.limits} {bwrap.cgroup_reason}")
        else:
            print(f"bwrap unavailable: {bwrap.reason}")
        report(await measure(steps, runs), runs)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def report(samples: dict[str, list[float]], runs: int) -> None:
    print(f"{runs} runs each, uid {os.geteuid()}, {os.cpu_count()} CPUs; ms")
    print(f"{'series':<28}{'p50':>8}{'p99':>8}{'mean':>8}")
    for name, values in samples.items():
        p50, p99, mean = percentile(values, 0.5), percentile(values, 0.99), statistics.mean(values)
        print(f"{name:<28}{p50:>8.2f}{p99:>8.2f}{mean:>8.2f}")
    base = percentile(samples["bare trio.run_process"], 0.5)
    for name, values in samples.items():
        if name != "bare trio.run_process":
            print(f"p50 overhead of {name.strip()}: {percentile(values, 0.5) - base:.2f} ms")
    print("reproduce: python bench/exec_spawn.py --runs", runs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    trio.run(main, parser.parse_args().runs)

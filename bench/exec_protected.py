"""What protected paths add to a command whose working directory holds them (issue 22).

Run from the repository root (as root, the engine also switches to nobody)::

    python bench/exec_protected.py [--runs 40]

Three series of ``run_command("true")`` in bubblewrap, interleaved (each first in turn) so
drift hits all alike: a working directory holding no protected path; a scratch $HOME holding
every default one (each bound read-only onto itself); and an empty scratch $HOME, where each
is a placeholder made before and removed after the command. Each prints p50 in ms and its
ratio to the first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/exec_protected.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.tool.exec import ExecRequest, probe_sandbox, run_command  # noqa: E402
from specialists.tool.exec.config import (  # noqa: E402
    DEFAULT_PROTECTED,
    ExecConfig,
)

NOBODY = 65534


def _scratch(filled: bool) -> str:
    """A directory under /tmp the sandbox user owns; ``filled``: every default protected
    path present in it."""
    path = tempfile.mkdtemp(prefix="csp-bench-", dir="/tmp")
    for entry in DEFAULT_PROTECTED if filled else ():
        name = os.path.join(path, entry.removeprefix("~/").rstrip("/"))
        os.makedirs(name) if entry.endswith("/") else Path(name).write_text("x\n")
    if os.geteuid() == 0:
        for directory, subdirs, files in os.walk(path):
            for name in [directory, *(os.path.join(directory, n) for n in subdirs + files)]:
                os.lchown(name, NOBODY, NOBODY)
    return path


async def main(runs: int) -> None:
    plain, present, empty = _scratch(False), _scratch(True), _scratch(False)
    try:
        configs = {
            "no protected path": (ExecConfig(workspace_roots=(plain,)), "/nonexistent", plain),
            "all present": (ExecConfig(workspace_roots=(present,)), present, present),
            "all placeholders": (ExecConfig(workspace_roots=(empty,)), empty, empty),
        }
        sandbox = await probe_sandbox(configs["no protected path"][0])
        times: dict[str, list[float]] = {name: [] for name in configs}
        order = list(configs)
        for run in range(runs):
            for name in order[run % 3 :] + order[: run % 3]:  # each goes first in turn
                config, home, working_dir = configs[name]
                os.environ["HOME"] = home  # ~ in protected_paths expands here
                started = time.perf_counter()
                await run_command(
                    ExecRequest("true", working_dir=working_dir), config, sandbox=sandbox
                )
                times[name].append((time.perf_counter() - started) * 1000)
        base = statistics.median(times["no protected path"])
        for name, series in times.items():
            p50 = statistics.median(series)
            print(f"{name:20} p50 {p50:7.1f} ms  ratio {p50 / base:5.2f}")
    finally:
        for path in (plain, present, empty):
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    trio.run(main, parser.parse_args().runs)

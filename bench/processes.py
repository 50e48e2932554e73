"""Helper processes for the benchmarks: a child that serves something and prints its port."""

from __future__ import annotations

import subprocess
import sys


def start_serving(script: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    """Run ``python script args...``, which must print the port it serves on as its first
    line; the process and that port. Exits the benchmark if the child prints anything else."""
    proc = subprocess.Popen([sys.executable, script, *args], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        proc.kill()
        raise SystemExit(f"{script} {' '.join(args)} did not start")
    return proc, int(line)

"""Run the benches that carry issue 26's figures and print them as one table (``scripts/bench``).

Each bench runs as its own subprocess (``python bench/<name>.py [--quick]``), one after the
other so that none measures another's load; its figure lines (bench/table.py) become rows. A
bench that is missing, fails, times out or prints no figure shows as one ``error`` row with
the reason, and the others still run. Beside each row: the 1-minute load average when the
bench started and when it ended (/proc/loadavg), as the machine is shared.

    scripts/bench [--quick] [--only NAME ...] [--log-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/suite.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.daemon_process import descendants  # noqa: E402
from bench.table import Row, failed, parse, render  # noqa: E402

# In the order: cached and uncached fetch, cores (goals 1-3), overload (4), pipelined
# frames (5), exec (6), then the fleet (3, past one machine).
BENCHES = ("fetch", "workers", "overload", "daemon", "exec_spawn", "redis_fleet")
# A safety net, not the target: quick modes aim at 3 minutes in all on an idle host, but on
# this 2-core host under a load of 10 fetch.py --quick took 86 s and daemon.py --quick 75 s;
# a bench past its time is cut off (its figures so far kept), so a run never hangs.
TIMEOUT_S = {"quick": 150.0, "full": 1800.0}


def load_average() -> str:
    """The 1-minute load average, as /proc/loadavg gives it."""
    with open("/proc/loadavg") as file:
        return file.read().split()[0]


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:160] if lines else ""


def run_bench(script: Path, *, quick: bool, log_dir: Path, timeout_s: float) -> list[Row]:
    """The rows of the bench ``script`` (named by its stem), then an error row if it is
    missing, fails, runs past ``timeout_s`` (then killed) or prints no figure; its whole output
    is kept in ``log_dir/<name>.log``."""
    name = script.stem
    command = [sys.executable, str(script), *(["--quick"] if quick else [])]
    before = load_average()
    if not script.exists():
        return [failed(name, f"missing: {os.path.relpath(script, REPO_ROOT)}", before)]
    print(f"running {' '.join(command[1:])} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
        error = exit_error(proc.returncode, stderr)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        stdout, stderr = proc.communicate()
        error = f"timed out after {timeout_s:g} s"
    load = f"{before}→{load_average()}"
    elapsed = time.monotonic() - started
    (log_dir / f"{name}.log").write_text(f"$ {' '.join(command)}\n{stdout}\n--- stderr\n{stderr}")
    rows = parse(name, stdout, load)
    if error is None and not rows:
        error = "printed no figure line: " + (last_line(stdout) or "(no output)")
    print(f"  {name}: {len(rows)} figure(s) in {elapsed:.0f} s", file=sys.stderr, flush=True)
    return rows + ([failed(name, error, load)] if error else [])


def exit_error(returncode: int, stderr: str) -> str | None:
    if returncode == 0:
        return None
    return f"exit {returncode}: {last_line(stderr) or '(no stderr)'}"


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it, whatever session each leads (a bench's
    daemon has its own, so that its workers stop with it): a bench cut off at its time never
    leaves a daemon, origin or redis-server behind."""
    for victim in [*descendants(pid), pid]:
        with suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each bench's quick mode (< 3 min)")
    parser.add_argument("--only", nargs="+", choices=BENCHES, help="run these benches only")
    parser.add_argument("--log-dir", type=Path, help="keep each bench's output here")
    args = parser.parse_args()
    log_dir = args.log_dir or Path(f"/tmp/csp-bench-logs-{os.getpid()}")
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    timeout_s = TIMEOUT_S["quick" if args.quick else "full"]
    rows = [
        row
        for name in args.only or BENCHES
        for row in run_bench(
            REPO_ROOT / "bench" / f"{name}.py",
            quick=args.quick,
            log_dir=log_dir,
            timeout_s=timeout_s,
        )
    ]
    print(render(rows))
    flags = " --quick" if args.quick else ""
    flags += f" --only {' '.join(args.only)}" if args.only else ""
    print(
        f"\n{os.cpu_count()} cores; {time.monotonic() - started:.0f} s in all; "
        f"each bench's output in {log_dir}/"
    )
    print(f"reproduce: scripts/bench{flags}")


if __name__ == "__main__":
    main()

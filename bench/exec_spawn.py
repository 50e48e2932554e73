"""What the exec engine adds to starting a process, step by step, against a bare posix_spawn.

Run from the repository root (as root, the engine also switches to nobody)::

    python bench/exec_spawn.py [--quick] [--runs N]

Every series runs in the same process, round-robin in small blocks so that the host's drift
(2 shared cores) hits all alike. The anchor is ``os.posix_spawn`` of /bin/true and its
``waitpid``. Issue 26's goal 6 is the first figure: ``run_command("true")`` in bubblewrap,
p50, minus the anchor's p50, at most 10 ms. The rest break that total down:

- the engine without one part (GNU time, its cgroup): what leaving the part out saves;
- the daemon's own steps alone: ``prepare_command`` (policy, path resolution, protected-path
  layout, environment), a command cgroup made, read and removed, one /proc sweep (what
  ``kill_tree`` walks after every command without bubblewrap, and at every timeout);
- each program of the wrapper chain alone in front of /bin/true: the shell entering the
  cgroup, setpriv, prlimit, GNU time, bubblewrap with the engine's own mounts (run after
  setpriv as the sandbox uid, so it is setpriv+bwrap less setpriv), and bubblewrap with no
  mount but ``/`` and no namespace but the user's (what is left of the former is what the
  engine's mounts and namespaces cost);
- a Popen of /bin/true on the engine's spawner threads (the spawn path itself).

The wrapper series run back to back, five in a row, so a cost that only shows after the
kernel has been idle for a few ms hides from them: a cgroup v1 ``cgroup.procs`` write slept
an RCU grace period (3-6 ms) only when no other move came just before, as between commands.
The engine's ablations ("without its cgroup", "without GNU time") catch such costs.

Each prints p50 wall time less the anchor's, and where the bench can give itself a cgroup the
engine does not use (the unified hierarchy on a hybrid host, or cpuacct) the CPU per run of
every process involved, daemon and children together, less the anchor's: on a loaded host
that is steadier than wall time. ``main`` ends with one ``measure<TAB>value<TAB>anchor<TAB>
ratio<TAB>goal`` line per figure, which the one table of issue 26 (goal 7) collects.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/exec_spawn.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from specialists.tool.exec import (  # noqa: E402
    ExecRequest,
    Sandbox,
    prepare_command,
    probe_sandbox,
    run_command,
)
from specialists.tool.exec._cgroup import CommandCgroup  # noqa: E402
from specialists.tool.exec._limits import prlimit_argv  # noqa: E402
from specialists.tool.exec._sandbox import wrap_argv  # noqa: E402
from specialists.tool.exec._spawner import run_in_spawner  # noqa: E402
from specialists.tool.exec._tree import kill_tree  # noqa: E402
from specialists.tool.exec.config import ExecConfig  # noqa: E402

NOBODY = 65534
TRUE = "/bin/true"
BLOCK = 5  # runs of one series in a row: small, so drift spreads evenly over the series
GOAL_MS = 10.0
ANCHOR = "bare posix_spawn"
TOTAL = "exec true, bwrap"
BARE_BWRAP = "setpriv + bwrap, no mounts"

Step = Callable[[], Awaitable[object]]


@dataclass
class Series:
    """One measured step: wall ms per run, and CPU ms per block of runs when metered."""

    step: Step
    walls: list[float] = field(default_factory=list)
    cpu_ms: float = 0.0
    cpu_runs: int = 0

    @property
    def p50(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float | None:
        return self.cpu_ms / self.cpu_runs if self.cpu_runs else None


class CpuMeter:
    """CPU of this process and every process it starts, from a cgroup the bench moves itself
    into: v2's ``cpu.stat`` (present without any controller) or v1's ``cpuacct.usage``.
    Only in a hierarchy the engine leaves alone, else the commands would leave it."""

    def __init__(self, directory: str, file: str, key: str | None) -> None:
        self.directory, self.file, self.key = directory, file, key

    @classmethod
    @contextlib.contextmanager
    def open(cls, engine_kind: str | None) -> Iterator[CpuMeter | None]:
        meter = cls._make(engine_kind)
        try:
            yield meter
        finally:
            if meter is not None:
                meter._leave()

    @classmethod
    def _make(cls, engine_kind: str | None) -> CpuMeter | None:
        candidates: list[tuple[str, str, str | None]] = []
        if engine_kind != "cgroup2":
            candidates.append(("/sys/fs/cgroup/unified", "cpu.stat", "usage_usec"))
            candidates.append(("/sys/fs/cgroup", "cpu.stat", "usage_usec"))
        if engine_kind is None or engine_kind == "cgroup2":
            candidates.append(("/sys/fs/cgroup/cpuacct", "cpuacct.usage", None))
        for root, file, key in candidates:
            if not os.path.exists(os.path.join(root, file)):
                continue
            directory = os.path.join(root, f"csp-bench-exec-{os.getpid()}")
            try:
                os.mkdir(directory)
                _write(os.path.join(directory, "cgroup.procs"), "0")
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(directory)
                continue
            return cls(directory, file, key)
        return None

    def read_ms(self) -> float:
        with open(os.path.join(self.directory, self.file)) as f:
            if self.key is None:
                return int(f.read()) / 1e6  # ns
            for line in f:
                name, _, value = line.partition(" ")
                if name == self.key:
                    return int(value) / 1e3  # µs
        raise OSError(f"no {self.key} in {self.file}")

    def _leave(self) -> None:
        parent = os.path.dirname(self.directory)
        with contextlib.suppress(OSError):
            _write(os.path.join(parent, "cgroup.procs"), "0")
            time.sleep(0.2)  # bwrap's last orphaned inits exit
            os.rmdir(self.directory)


def _write(path: str, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def spawn_wait(argv: list[str]) -> None:
    """posix_spawn ``argv`` with an empty environment and wait for it: the anchor."""
    pid = os.posix_spawn(argv[0], argv, {})
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{argv[:3]}... exited {status}")


def chain_step(argv: list[str]) -> Step:
    async def step() -> object:
        spawn_wait([*argv, TRUE])
        return None

    return step


def command_step(config: ExecConfig, sandbox: Sandbox) -> Step:
    async def step() -> object:
        result = await run_command(ExecRequest("true"), config, sandbox=sandbox)
        assert result.exit_code == 0, result.stderr
        return result

    return step


def prepare_step(config: ExecConfig, sandbox: Sandbox) -> Step:
    async def step() -> object:
        return prepare_command(ExecRequest("true"), config, sandbox=sandbox)

    return step


def cgroup_step(config: ExecConfig, sandbox: Sandbox) -> Step:
    """A command cgroup made and limited, read and removed, as ``run_command`` does."""
    assert sandbox.cgroup is not None
    host = sandbox.cgroup

    async def step() -> object:
        group = CommandCgroup.create(
            host,
            secrets.token_hex(8),
            memory_bytes=config.max_memory_bytes,
            max_tasks=config.max_processes,
        )
        group.usage()
        await group.close()
        return None

    return step


def sweep_once() -> None:
    """One ``kill_tree`` over /proc for an exited (unreaped) child, with a token as without
    bwrap: it reads the environment of every process of the child's uid. The spawn and the
    reap around it are a bare spawn's (less the anchor, it is the sweep)."""
    pid = os.posix_spawn(TRUE, [TRUE], {})
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    kill_tree(pid, token=secrets.token_hex(16))
    os.waitpid(pid, 0)


async def sweep_step() -> object:
    sweep_once()
    return None


def _popen_true() -> subprocess.Popen[bytes]:
    return subprocess.Popen([TRUE], stdin=subprocess.DEVNULL, start_new_session=True)


async def spawner_step() -> object:
    return (await run_in_spawner(_popen_true)).wait()


def wrapper_chains(
    config: ExecConfig, sandbox: Sandbox, group: CommandCgroup | None
) -> dict[str, list[str]]:
    """Each wrapper program of the engine's chain alone, cut out of the argv it builds."""
    argv = wrap_argv(
        [TRUE], sandbox=sandbox, config=config, working_dir=config.workspace_roots[0],
        timeout_ms=config.default_timeout_ms, report_fd=None, cgroup=group,
    )  # fmt: skip
    chains: dict[str, list[str]] = {}
    if group is not None:
        chains["sh entering the cgroup"] = group.enter_argv()
    setpriv = _cut(argv, sandbox.setpriv)
    if setpriv and sandbox.run_as is not None:
        chains["setpriv (uid switch)"] = setpriv
    # Built here, not cut out: with a cgroup the engine may have left prlimit out.
    chains["prlimit"] = prlimit_argv(
        sandbox.prlimit, config, timeout_ms=config.default_timeout_ms, nproc=None
    )
    if sandbox.time is not None:
        chains["GNU time"] = [sandbox.time, "-q", "-f", "%U %S %M", "-o", "/dev/null", "--"]
    if sandbox.bwrap is not None:
        # Run as the sandbox uid, as in the engine; less the setpriv series when there is one.
        chains["setpriv + bwrap"] = [*setpriv, *_cut(argv, sandbox.bwrap)]
        # bwrap's own start (exec, user namespace, pivot, init), without the engine's mounts
        # and other namespaces: the rest of "setpriv + bwrap" is what those cost.
        chains[BARE_BWRAP] = [
            *setpriv,
            sandbox.bwrap,
            "--ro-bind",
            "/",
            "/",
            "--unshare-user",
            "--",
        ]
    return chains


def _cut(argv: list[str], program: str) -> list[str]:
    """``program`` and its options up to and including its ``--``; [] when not in ``argv``."""
    if program not in argv:
        return []
    start = argv.index(program)
    return argv[start : argv.index("--", start) + 1]


async def measure(series: dict[str, Series], runs: int, meter: CpuMeter | None) -> None:
    """Each series ``runs`` times after a warm-up, in blocks of ``BLOCK``, round-robin."""
    for one in series.values():
        for _ in range(2):
            await one.step()
    for _ in range(max(1, runs // BLOCK)):
        for one in series.values():
            cpu_before = meter.read_ms() if meter else 0.0
            for _ in range(BLOCK):
                started = time.perf_counter()
                await one.step()
                one.walls.append((time.perf_counter() - started) * 1000)
            if meter:
                one.cpu_ms += meter.read_ms() - cpu_before
                one.cpu_runs += BLOCK


async def bench(runs: int) -> tuple[dict[str, Series], Sandbox]:
    workspace = tempfile.mkdtemp(prefix="csp-exec-bench-", dir="/tmp")
    os.chmod(workspace, 0o755)
    if os.geteuid() == 0:
        os.chown(workspace, NOBODY, NOBODY)
    try:
        config = ExecConfig(workspace_roots=(workspace,))
        sandbox = await probe_sandbox(config)
        if sandbox.kind != "bwrap":
            raise SystemExit(f"bwrap unavailable: {sandbox.reason}")
        # Without bwrap RLIMIT_NPROC is one budget for every process of the uid on the host,
        # and the bwrap series leave sandbox inits for the host's init to reap (some
        # container inits do so lazily), so the unsandboxed series gets room.
        loose = replace(config, bwrap_program=None, max_processes=4096)
        bare = await probe_sandbox(loose)
        steps: dict[str, Step] = {
            ANCHOR: chain_step([]),
            TOTAL: command_step(config, sandbox),
            "  without GNU time": command_step(config, replace(sandbox, time=None)),
        }
        if sandbox.cgroup is not None:
            off = replace(config, cgroup="off")
            steps["  without its cgroup"] = command_step(off, replace(sandbox, cgroup=None))
        steps["exec true, no sandbox"] = command_step(loose, bare)
        steps["daemon: prepare_command"] = prepare_step(config, sandbox)
        if sandbox.cgroup is not None:
            steps["daemon: cgroup made+read+removed"] = cgroup_step(config, sandbox)
        steps["exec: /proc sweep (kill_tree, token)"] = sweep_step
        steps["daemon: Popen on a spawner thread"] = spawner_step
        with _chain_cgroup(config, sandbox) as group:
            for name, argv in wrapper_chains(config, sandbox, group).items():
                steps[f"exec: {name}"] = chain_step(argv)
            series = {name: Series(step) for name, step in steps.items()}
            with CpuMeter.open(sandbox.cgroup.kind if sandbox.cgroup else None) as meter:
                await measure(series, runs, meter)
        return series, sandbox
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


@contextlib.contextmanager
def _chain_cgroup(config: ExecConfig, sandbox: Sandbox) -> Iterator[CommandCgroup | None]:
    """One cgroup for the shell-entry series to enter, run after run (each run leaves it)."""
    if sandbox.cgroup is None:
        yield None
        return
    group = CommandCgroup.create(
        sandbox.cgroup, "bench", memory_bytes=config.max_memory_bytes, max_tasks=100
    )
    try:
        yield group
    finally:
        group.kill()
        for path in group.directories:
            with contextlib.suppress(OSError):
                os.rmdir(path)


def figures(series: dict[str, Series]) -> list[tuple[str, str, str, str, str]]:
    """The TAB lines: (measure, value, anchor, ratio, goal)."""
    anchor = series[ANCHOR]
    rows = []
    overhead = series[TOTAL].p50 - anchor.p50
    anchor_text = f"{anchor.p50:.2f} ms {ANCHOR} p50"
    rows.append(
        (
            "exec true in bwrap: overhead over a bare spawn, p50",
            f"{overhead:.1f} ms",
            anchor_text,
            f"{overhead / anchor.p50:.1f}x",
            f"<= {GOAL_MS:g} ms",
        )
    )
    setpriv = series.get("exec: setpriv (uid switch)")
    for name, one in series.items():
        if name in (ANCHOR, TOTAL):
            continue
        extra = one.p50 - anchor.p50
        label = name.strip()
        if name.startswith("  "):  # an ablation: what the part costs is total less this
            extra = series[TOTAL].p50 - one.p50
            label = f"exec true in bwrap: {label.removeprefix('without ')} costs"
        elif name == "exec: setpriv + bwrap" and setpriv is not None:
            extra = one.p50 - setpriv.p50
            label = "exec: bwrap with the engine's mounts"
        elif name == f"exec: {BARE_BWRAP}" and setpriv is not None:
            extra = one.p50 - setpriv.p50
            label = "exec: bwrap alone (read-only /, user namespace)"
        elif name.startswith("daemon:"):
            extra = one.p50  # in-process work: its own time, no spawn to subtract
        rows.append((label, f"{extra:.2f} ms", anchor_text, f"{extra / anchor.p50:.2f}x", ""))
    total_cpu, anchor_cpu = series[TOTAL].cpu, anchor.cpu
    if total_cpu is not None and anchor_cpu is not None:
        rows.append(
            (
                "exec true in bwrap: CPU of every process, per run",
                f"{total_cpu:.2f} ms",
                f"{anchor_cpu:.2f} ms {ANCHOR} CPU",
                f"{total_cpu / anchor_cpu:.1f}x",
                "",
            )
        )
    return rows


def report(series: dict[str, Series], sandbox: Sandbox, runs: int, quick: bool) -> None:
    anchor = series[ANCHOR]
    print(f"limits: {sandbox.limits} {sandbox.cgroup_reason}; uid {os.geteuid()}; ", end="")
    print(f"{os.cpu_count()} CPUs; {len(anchor.walls)} runs each; loadavg {_load()}")
    print(f"{'series':<36}{'p50':>8}{'p99':>8}{'+p50':>8}{'cpu':>8}{'+cpu':>8}   (ms)")
    for name, one in series.items():
        p99 = sorted(one.walls)[min(len(one.walls) - 1, round(0.99 * (len(one.walls) - 1)))]
        cpu = one.cpu
        cpu_text = f"{cpu:8.2f}{cpu - (anchor.cpu or 0):8.2f}" if cpu is not None else ""
        print(f"{name:<36}{one.p50:8.2f}{p99:8.2f}{one.p50 - anchor.p50:8.2f}{cpu_text}")
    print()
    for row in figures(series):
        print("\t".join(row))
    flags = " --quick" if quick else f" --runs {runs}"
    print(f"reproduce: python bench/exec_spawn.py{flags}  (loadavg {_load()})")


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs of each series")
    parser.add_argument("--quick", action="store_true", help="30 runs each: under a minute")
    args = parser.parse_args()
    runs = 30 if args.quick else args.runs
    series, sandbox = trio.run(bench, runs)
    report(series, sandbox, runs, args.quick)


if __name__ == "__main__":
    main()

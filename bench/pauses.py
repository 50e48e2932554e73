"""Run ``csp-web`` with its event loop's pauses recorded: what held the loop, and for how long.

    python bench/pauses.py serve --config FILE --socket PATH --no-stdin

Runs the daemon as ``python -m csp_web`` would, with two probes added from outside:

- a ``gc.callbacks`` hook timing every garbage collection, per generation;
- a trio instrument timing every task step (the time a task held the loop before yielding),
  keeping the longest steps per task name;
- the scheduler rounds: from the end of one I/O wait to the start of the next, with the task
  steps each ran (a fresh client's reply takes several rounds, so their length is its latency);
- the outbox store's commits (``OutboxStore.insert``) and settles, timed where they run.

Each pause is timed twice: on the wall clock, and in the thread's CPU time
(``time.thread_time``), which leaves out the time the OS gave the CPU to other processes, so
that the daemon's own work (GC, a long step) is told apart from preemption on a loaded host.

At exit (SIGTERM ends the daemon gracefully) it prints, on stderr, the collections per
generation with their total and longest pause, and the task names whose steps held the loop
longest. ``bench/fairness.py --pauses`` runs its daemon through this and prints the summary.
Measurement only: nothing here changes what the daemon does.
"""

from __future__ import annotations

import atexit
import collections
import gc
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SLOW_STEP_S = 0.005  # steps at least this long are kept by name


class _Pauses(trio.abc.Instrument):
    """The longest task steps and every collection's pause."""

    def __init__(self) -> None:
        self.gc_started = (0.0, 0.0)
        self.gc: dict[int, list[tuple[float, float]]] = collections.defaultdict(list)
        self.step_started = (0.0, 0.0)
        self.slow: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        self.steps = 0
        self.step_names: collections.Counter[str] = collections.Counter()
        self.store: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
        self.round_started = (0.0, 0.0)
        self.round_steps = 0
        self.rounds: list[tuple[float, float, int]] = []  # wall, cpu, steps

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            started = _now()
            try:
                return fn(*args)
            finally:
                self.store[name].append(_since(started))

        return run

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self.gc_started = _now()
        else:
            self.gc[info["generation"]].append(_since(self.gc_started))

    def after_io_wait(self, timeout: float) -> None:
        self.round_started = _now()
        self.round_steps = 0

    def before_io_wait(self, timeout: float) -> None:
        if self.round_steps:
            wall, cpu = _since(self.round_started)
            self.rounds.append((wall, cpu, self.round_steps))

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.step_started = _now()
        self.round_steps += 1

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps += 1
        self.step_names[task.name.rsplit(".", 1)[-1]] += 1
        took = _since(self.step_started)
        if took[0] >= SLOW_STEP_S:
            self.slow[task.name.rsplit(".", 1)[-1]].append(took)

    def report(self) -> None:
        out = sys.stderr
        print(f"pauses: (wall ms / cpu ms); daemon CPU {time.process_time():.2f} s", file=out)
        for generation in sorted(self.gc):
            pauses = self.gc[generation]
            print(
                f"pauses: gc gen {generation}: {len(pauses)} collections, {_sums(pauses)}", file=out
            )
        for name, took in self.store.items():
            print(f"pauses: outbox store {name}: {len(took)} calls, {_sums(took)}", file=out)
        print(
            f"pauses: {self.steps} task steps; steps >= {SLOW_STEP_S * 1000:g} ms wall:", file=out
        )
        if self.rounds:
            print(f"pauses: {_rounds(self.rounds)}", file=out)
        common = ", ".join(f"{name} {count}" for name, count in self.step_names.most_common(8))
        print(f"pauses: steps by task: {common}", file=out)
        ranked = sorted(self.slow.items(), key=lambda item: -sum(wall for wall, _ in item[1]))
        for name, took in ranked[:8]:
            print(f"pauses:   {name}: {len(took)} steps, {_sums(took)}", file=out)
        out.flush()


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.thread_time()


def _since(started: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _now()
    return wall - started[0], cpu - started[1]


def _sums(pauses: list[tuple[float, float]]) -> str:
    """Total and longest of ``pauses``, wall and CPU, in ms."""
    walls, cpus = [w * 1000 for w, _ in pauses], [c * 1000 for _, c in pauses]
    return f"total {sum(walls):.0f}/{sum(cpus):.0f} ms, longest {max(walls):.1f}/{max(cpus):.1f} ms"


def _rounds(rounds: list[tuple[float, float, int]]) -> str:
    """Scheduler rounds that ran a task: how many, their length and steps (p50/p99/max)."""
    walls = sorted(wall * 1000 for wall, _, _ in rounds)
    cpus = sorted(cpu * 1000 for _, cpu, _ in rounds)
    steps = sorted(count for _, _, count in rounds)

    def spread(values: list[float] | list[int]) -> str:
        at = [values[int(q * (len(values) - 1))] for q in (0.5, 0.99)]
        return f"{at[0]:.1f}/{at[1]:.1f}/{values[-1]:.1f}"

    return (
        f"{len(rounds)} rounds (p50/p99/max): wall {spread(walls)} ms, cpu {spread(cpus)} ms, "
        f"steps {spread(steps)}"
    )


def main() -> int:
    pauses = _Pauses()
    if thresholds := os.environ.get("CSP_BENCH_GC_THRESHOLD"):  # e.g. "700,10,10": A/B runs
        gc.set_threshold(*map(int, thresholds.split(",")))
    gc.callbacks.append(pauses.on_gc)
    atexit.register(pauses.report)
    real_run = trio.run

    def run(*args: Any, **kwargs: Any) -> Any:
        kwargs["instruments"] = [*kwargs.get("instruments", ()), pauses]
        return real_run(*args, **kwargs)

    trio.run = run  # type: ignore[assignment]  # the CLI's one trio.run: the daemon's loop
    from csp_web.memory.outbox_store import OutboxStore

    for name in ("insert", "settle"):
        setattr(OutboxStore, name, pauses.timed(name, getattr(OutboxStore, name)))
    from csp_web.app.main import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())

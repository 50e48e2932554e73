"""CPU per worker start: forked from the pool's template against a fresh interpreter, in one
run (issue 26; csp_web/infra/worker_template.py).

A pool of one worker warmed on the extractor (``specialists.web.pages.loading``, as the web
specialist's pool) replaces its worker after every task (``recycle_tasks=1``), so ``--starts``
tasks make that many starts, the last one warmed before the pool closes. The CPU counted is
this process's (the pool's side: the event loop, its threads) and every child it reaped (the
fresh workers, the templates, and through them the workers they forked and reaped), from
getrusage once the pool has closed and reaped them all. For
the template, its own start (about 1 s: an interpreter and the imports) is in the figure,
spread over ``--starts``; the fork alone is the figure without the template process's CPU.
The two settings alternate, ``--rounds`` times each, so a change in the host's load falls on
both.

    python bench/worker_starts.py [--starts N] [--rounds N]

Prints ``measure<TAB>value<TAB>anchor<TAB>ratio<TAB>goal`` lines, the command and the load
average.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/worker_starts.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.workers import stat_cpu_s  # noqa: E402
from csp_web.infra.workers import open_worker_pool  # noqa: E402

EXTRACTOR = "specialists.web.pages.loading"
WAIT_S = 120.0  # a fresh start is about 1 s of CPU; a loaded host stretches it


def cpu_s() -> float:
    """CPU seconds of this process and of every child it reaped."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


async def starts_cpu_s(starts: int, template: bool) -> tuple[float, float]:
    """(CPU seconds for ``starts`` worker starts, of which the template process's own)."""
    before = cpu_s()
    template_s = 0.0
    with trio.fail_after(WAIT_S * starts):
        async with open_worker_pool(1, warm=EXTRACTOR, recycle_tasks=1, template=template) as pool:
            for _ in range(starts - 1):
                await pool.run(os.getpid, deadline=trio.current_time() + WAIT_S, shape=int)
            await pool.wait_warm()
            if pool.template_pid is not None:
                template_s = stat_cpu_s(f"/proc/{pool.template_pid}/stat")
    return cpu_s() - before, template_s


async def measure(starts: int, rounds: int) -> dict[str, list[float]]:
    """Per-start CPU (ms) of each round: fresh interpreters, template forks (its start
    included), template forks alone."""
    figures: dict[str, list[float]] = {"fresh": [], "template": [], "fork": []}
    for _ in range(rounds):
        fresh_s, _ = await starts_cpu_s(starts, template=False)
        forked_s, template_s = await starts_cpu_s(starts, template=True)
        figures["fresh"].append(fresh_s * 1000 / starts)
        figures["template"].append(forked_s * 1000 / starts)
        figures["fork"].append((forked_s - template_s) * 1000 / starts)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=8, help="worker starts per setting")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the settings")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    figures = trio.run(measure, args.starts, args.rounds)
    fresh = min(figures["fresh"])
    for name, label in (("template", "its start spread over the starts"), ("fork", "fork alone")):
        best = min(figures[name])
        print(
            f"CPU ms per worker start, template ({label}) vs fresh interpreter\t{best:.1f}"
            f"\t{fresh:.1f}\t{best / fresh:.3f}\t-"
        )
    for name, rounds in figures.items():
        print(f"rounds, {name}: {', '.join(f'{ms:.1f}' for ms in rounds)} ms per start")
    command = f"python bench/worker_starts.py --starts {args.starts} --rounds {args.rounds}"
    load_after = os.getloadavg()[0]
    print(f"reproduce: {command}  (load average {load_before:.2f} before, {load_after:.2f} after)")


if __name__ == "__main__":
    main()

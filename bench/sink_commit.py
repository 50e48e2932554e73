"""CPU of the reference sink's group commit (csp_web/sink/commit.py) of small batches, committed
on the event loop against the same batches in a worker thread (the anchor), in one run,
whatever ``INLINE_ROWS`` picks for that size.

Batches of ``--per`` audit-sized writes (what delivery sends at one audited op at a time:
about nine per ``outbox.linger_s``) are staged and committed ``--rounds`` times each way,
alternating; ``time.process_time()`` counts every thread of the process, so the thread's hop
(and the GIL passed with the loop around each SQLite call) is counted.

    python bench/sink_commit.py [--rounds 300] [--per 9]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/sink_commit.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from csp_web.sink import commit  # noqa: E402
from csp_web.sink.store import Retention, SinkStore  # noqa: E402

RECORD = (
    '{"connection":"unix:12","domain":"WEB","duration_ms":0.412,"error":null,"id":"t-000123",'
    '"op":"fetch","outcome":"OK","pid":4242,"time":1764300000.123,"uid":1000,'
    '"url":"https://origin.test/page/17","cached":true}'
)
WAYS = {"loop": sys.maxsize, "thread": 0}  # as INLINE_ROWS: every batch on the loop, or none


async def measure(rounds: int, per: int) -> dict[str, float]:
    """CPU seconds per write of each way."""
    spent = dict.fromkeys(WAYS, 0.0)
    with tempfile.TemporaryDirectory(prefix="csp-bench-", dir="/tmp") as directory:
        store = SinkStore(directory, Retention(10**9, 86400.0))
        commits = commit.GroupCommit(store)
        written = 0
        for round_ in range(rounds):
            for way in sorted(WAYS, reverse=bool(round_ % 2)):  # alternating which goes first
                commit.INLINE_ROWS = WAYS[way]
                started = time.process_time()
                for _ in range(per):
                    written += 1
                    commits.stage(
                        "sys", "audit", f"audit/{written}.json", RECORD, f"w-{written}", {}
                    )
                await commits.wait_committed()
                spent[way] += time.process_time() - started
        store.close()
    return {way: seconds / (rounds * per) for way, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--per", type=int, default=9, help="writes per batch")
    args = parser.parse_args()
    per_write = trio.run(measure, args.rounds, args.per)
    load = Path("/proc/loadavg").read_text().split(" ", 1)[0]
    loop_us, thread_us = per_write["loop"] * 1e6, per_write["thread"] * 1e6
    print(f"sink commit CPU per write, batches of {args.per}, load {load}:")
    print(f"    on the loop {loop_us:.0f} us, in a thread {thread_us:.0f} us,", end=" ")
    print(f"ratio {loop_us / thread_us:.2f}")
    print(f"reproduce: python bench/sink_commit.py --rounds {args.rounds} --per {args.per}")


if __name__ == "__main__":
    main()

"""The event loop's CPU per worker task (issue 26, goal 3: the loop only moves a task's input
and answer): ``build_page`` of every other dev corpus page through a pool of one warm worker,
the daemon's side of the exchange timed with ``time.thread_time``, pipes of the kernel's default
64 KiB (the anchor) against ``workers.PIPE_BYTES``, in the same run; and the daemon's rebuild of
those pages' answers (``answers.decode`` as a ``Page``) against parsing their JSON alone.

    python bench/pool_exchange.py [--rounds N]
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import sys
import time
from pathlib import Path

import httpx
import trio

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/pool_exchange.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.origin import CORPUS  # noqa: E402
from csp_web.infra import answers, workers  # noqa: E402
from csp_web.net import FetchResult  # noqa: E402
from specialists.web.pages.loading import Page, build_page  # noqa: E402

DEFAULT_PIPE_BYTES = 1 << 16  # Linux's pipe(7) capacity
WAIT_S = 60.0
DECODE_ROUNDS = 20


def results() -> list[FetchResult]:
    """Every other dev corpus page, as the guarded client hands it to extraction."""
    paths = sorted(CORPUS.glob("*.html.gz"))[::2]
    return [
        FetchResult(
            url="https://origin.test/page",
            status_code=200,
            headers=httpx.Headers(),
            body=gzip.decompress(path.read_bytes()),
            content_type="text/html",
            charset="utf-8",
            redirect_chain=("https://origin.test/page",),
            elapsed_s=0.0,
        )
        for path in paths
    ]


async def loop_ms_per_task(pages: list[FetchResult], pipe_bytes: int) -> float:
    workers.PIPE_BYTES = pipe_bytes
    async with workers.open_worker_pool(1, warm="specialists.web.pages.loading") as pool:
        with trio.fail_after(WAIT_S):
            await pool.wait_warm()
        tasks = [functools.partial(build_page, page) for page in pages]
        await pool.run(tasks[0], deadline=trio.current_time() + WAIT_S, shape=Page)
        started = time.thread_time()
        for task in tasks:
            await pool.run(task, deadline=trio.current_time() + WAIT_S, shape=Page)
        return (time.thread_time() - started) / len(tasks) * 1000


def decode_figure(pages: list[FetchResult]) -> None:
    """The CPU of ``answers.decode`` per page answer, against ``json.loads`` of the same."""
    encoded = [answers.encode_value(build_page(page)) for page in pages]
    started = time.process_time()
    for data in encoded * DECODE_ROUNDS:
        answers.decode(data, Page)
    decode_s = time.process_time() - started
    started = time.process_time()
    for data in encoded * DECODE_ROUNDS:
        json.loads(data.decode("utf-8", "surrogatepass"))
    parse_s = time.process_time() - started
    each = 1e6 / (len(encoded) * DECODE_ROUNDS)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"decode of a Page answer\t{decode_s * each:.0f} us\t{parse_s * each:.0f} us json.loads\t"
        f"{decode_s / parse_s:.2f}x\tload {load}"
    )


async def measure(rounds: int) -> None:
    pages = results()
    decode_figure(pages)
    wide = workers.PIPE_BYTES
    for _ in range(rounds):
        anchor = await loop_ms_per_task(pages, DEFAULT_PIPE_BYTES)
        value = await loop_ms_per_task(pages, wide)
        load = Path("/proc/loadavg").read_text().split()[0]
        print(
            f"loop CPU per build_page task, {wide >> 10} KiB pipes\t{value:.3f} ms\t"
            f"{anchor:.3f} ms with 64 KiB pipes\t{value / anchor:.2f}x\tload {load}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    trio.run(measure, parser.parse_args().rounds)
    print("reproduce: python bench/pool_exchange.py")


if __name__ == "__main__":
    main()

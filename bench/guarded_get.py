"""The guarded client's CPU per GET against a bare httpx client's, on the same pages (issue 26,
goal 2: the daemon's own overhead on an uncached fetch).

Both clients keep their connections alive to the benches' HTTPS origin (bench/origin.py, its own
process) and fetch every dev corpus page in turn, alternating; the figure is the event loop's
thread CPU (``time.thread_time``) per page, the bare client's the anchor.

    python bench/guarded_get.py [--rounds N]
"""

from __future__ import annotations

import argparse
import ssl
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/guarded_get.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.origin import ADDRESS, BODY_CAP_BYTES, corpus_pages, page_path, start_origin  # noqa: E402
from csp_web.net import GuardConfig, open_guarded_client  # noqa: E402

WARM_PAGES = 5  # connections opened and code paths warmed before the clock starts


async def measure(port: int, trust: ssl.SSLContext, rounds: int) -> None:
    urls = [f"https://{ADDRESS}:{port}{page_path(page_id)}" for page_id in corpus_pages()]
    config = GuardConfig(
        allowed_ports=(port,),
        allow_private=(ADDRESS,),
        max_body_bytes=BODY_CAP_BYTES,
        max_decoded_bytes=BODY_CAP_BYTES,
    )
    guarded_s = bare_s = 0.0
    guarded = open_guarded_client(config, ssl_context=trust)
    async with guarded as client, httpx.AsyncClient(verify=trust) as bare:
        for url in urls[:WARM_PAGES]:
            await client.fetch(url)
            await bare.get(url)
        for _ in range(rounds):
            for url in urls:
                started = time.thread_time()
                await client.fetch(url)
                guarded_s += time.thread_time() - started
                started = time.thread_time()
                await bare.get(url)
                bare_s += time.thread_time() - started
    fetches = rounds * len(urls)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(
        f"guarded GET CPU per page\t{guarded_s / fetches * 1000:.3f} ms\t"
        f"{bare_s / fetches * 1000:.3f} ms bare httpx GET\t{guarded_s / bare_s:.2f}x\t"
        f"load {load}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    ca = trustme.CA()
    trust = ssl.create_default_context()
    ca.configure_trust(trust)
    with tempfile.TemporaryDirectory() as workdir:
        origin, port = start_origin(ca, workdir)
        try:
            trio.run(measure, port, trust, args.rounds)
        finally:
            origin.kill()
            origin.wait()
    print("reproduce: python bench/guarded_get.py")


if __name__ == "__main__":
    main()

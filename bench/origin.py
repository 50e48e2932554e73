"""The benches' HTTPS origin: every page of the extraction dev corpus at /corpus/<id>, served
by its own process (as a remote site would be, so its serving work is not counted as the
daemon's), with a trustme certificate for origin.test (the tests' DNS name) and 127.0.0.1 (what
a daemon process reaches without the tests' resolver). Also the in-process daemon config that
reaches it.

    python bench/origin.py PEM_PATH     (prints its port, serves until killed)
"""

from __future__ import annotations

import functools
import gzip
import os
import ssl
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Literal

import trio
import trustme

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so `python bench/origin.py` finds the packages
    sys.path.insert(0, str(REPO_ROOT))

from bench.processes import start_serving  # noqa: E402
from csp_web.config import Config, DaemonConfig, OutboxConfig, with_section  # noqa: E402
from csp_web.net import GuardConfig  # noqa: E402
from specialists.web.config import RateConfig, WebConfig  # noqa: E402
from tests.net._origin import Origin  # noqa: E402
from tests.net._origin import Reply as OriginReply  # noqa: E402

CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "extraction-dev" / "html"
HOST = "origin.test"
ADDRESS = "127.0.0.1"
BODY_CAP_BYTES = 2_000_000  # the guard's default is 1 MB (seed 001); one corpus page is over
Sync = Literal["full", "normal"]


def corpus_pages() -> dict[str, bytes]:
    """Every corpus page's HTML by its id, in id order."""
    return {
        path.name.removesuffix(".html.gz"): gzip.decompress(path.read_bytes())
        for path in sorted(CORPUS.glob("*.html.gz"))
    }


def page_path(page_id: str) -> str:
    return f"/corpus/{page_id}"


async def serve_origin(pem_path: str) -> None:
    """The origin process: serve every corpus page, print the port, run until killed."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pem_path)
    origin = Origin("https")
    headers = [("content-type", "text/html; charset=utf-8")]
    for page_id, body in corpus_pages().items():
        origin.routes[page_path(page_id)] = functools.partial(
            lambda data, _seen: OriginReply(200, headers, data), body
        )
    async with trio.open_nursery() as nursery:
        await nursery.start(functools.partial(origin.serve, ssl_context=context))
        print(origin.port, flush=True)


def start_origin(ca: trustme.CA, workdir: str) -> tuple[subprocess.Popen[str], int]:
    """The origin process, its certificate issued by ``ca``, and its port; the caller kills it."""
    pem_path = os.path.join(workdir, "origin.pem")
    ca.issue_cert(HOST, ADDRESS).private_key_and_cert_chain_pem.write_to_path(pem_path)
    return start_serving(str(Path(__file__).resolve()), pem_path)


def bench_config(workdir: str, port: int, synchronous: Sync) -> Config:
    """An in-process daemon's config reaching the origin: its port and 127.0.0.1 opened, the
    body caps at 2 MB, the fetch rate limit out of the way."""
    web = WebConfig()
    return with_section(
        Config(
            daemon=DaemonConfig(state_dir=os.path.join(workdir, synchronous), log_level="warning"),
            outbox=OutboxConfig(synchronous=synchronous),
        ),
        "web",
        replace(
            web,
            guard=GuardConfig(
                allowed_ports=(port,),
                allow_private=(ADDRESS,),
                max_body_bytes=BODY_CAP_BYTES,
                max_decoded_bytes=BODY_CAP_BYTES,
            ),
            # Raised so that the benchmark measures the fetch, not the bucket (seed: 20/min).
            fetch=replace(web.fetch, rate=RateConfig(per_minute=1e9, burst=1_000_000)),
        ),
    )


if __name__ == "__main__":
    trio.run(serve_origin, sys.argv[1])

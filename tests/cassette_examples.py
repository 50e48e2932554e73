"""The upstreams behind the recorded transcripts in tests/transcripts/ (``web_*.csp`` with a
``.cassette.json`` beside each): a local HTTPS origin standing in for Brave, a news site and
the GitHub API, under their real names, and the credentials the recording ran with.

tests/test_cassettes.py records each example into a temporary folder with
``csp-web replay --record``'s code path and checks the committed cassette is what recording
writes today. After changing an example or the recorder, re-record them in place with:

    python -m tests.cassette_examples
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import trio
import trustme

from csp_web.app.compose import open_app_daemon
from csp_web.cli.cassette_run import Upstream
from csp_web.cli.record_mode import RecordMode
from csp_web.cli.replay import replay_files
from csp_web.config import Config, DaemonConfig, GuardConfig, with_section
from specialists.web.config import WebConfig
from tests.net._dns import FixedResolver
from tests.net._origin import Origin, Reply, start_https_origin
from tests.web.fixtures import load
from tests.web.pages_support import ARTICLE

FOLDER = Path(__file__).parent / "transcripts"
EXAMPLES = ("web_search_brave", "web_fetch_article", "web_api_github")
HOSTS = ("api.search.brave.com", "news.example.org", "api.github.com")
# The credentials the examples were recorded with; the test greps the cassettes for them.
SECRETS = {
    "BRAVE_API_KEY": "brv-recording-key-5d41402abc4b2a76",
    "GITHUB_TOKEN": "ghp_recordingtoken0123456789abcdefABCD",
}


def _json(name: str) -> Reply:
    return Reply(headers=[("content-type", "application/json")], body=load(name))


def _routes() -> dict[str, object]:
    html = [("content-type", "text/html; charset=utf-8")]
    return {
        "/res/v1/web/search": lambda seen: _json("brave_web_search.json"),
        "/tides": lambda seen: Reply(301, [("location", "/2024/tides")]),
        "/2024/tides": lambda seen: Reply(
            headers=[*html, ("set-cookie", "session=abc123; Path=/")], body=ARTICLE.encode()
        ),
        "/repos/python-trio/trio": lambda seen: _json("github_repo.json"),
    }


def recording_config(state_dir: str) -> Config:
    """The embedded defaults, with the examples' hosts let through to the local origin."""
    guard = GuardConfig(allow_private=HOSTS)
    return with_section(
        Config(daemon=DaemonConfig(state_dir=state_dir)), "web", replace(WebConfig(), guard=guard)
    )


@contextmanager
def recording_credentials() -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in SECRETS}
    os.environ.update(SECRETS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def start_upstream(nursery: trio.Nursery, ca: trustme.CA) -> Origin:
    """The stand-in for the examples' live upstreams, serving ``_routes``."""
    origin = await start_https_origin(nursery, ca, HOSTS)
    for path, route in _routes().items():
        origin.routes[path] = route  # type: ignore[assignment]
    return origin


def upstream_of(origin: Origin, trust_ca: trustme.CA) -> Upstream:
    import ssl

    trust = ssl.create_default_context()
    trust_ca.configure_trust(trust)
    resolver = FixedResolver({host: ["127.0.0.1"] for host in HOSTS})
    return Upstream(resolver=resolver, ssl_context=trust, divert={"https": origin.port})


async def record_examples(folder: Path) -> int:
    """Record each example transcript found in ``folder`` (its cassette written beside it);
    the number whose replies differ from the transcript."""
    ca = trustme.CA()
    files = [str(folder / f"{name}.csp") for name in EXAMPLES]
    with tempfile.TemporaryDirectory() as state, recording_credentials():
        async with trio.open_nursery() as nursery:
            origin = await start_upstream(nursery, ca)
            config = recording_config(state)
            failures = await replay_files(
                files,
                config,
                None,
                open_daemon=open_app_daemon,
                mode=RecordMode.ALL,
                upstream=upstream_of(origin, ca),
            )
            nursery.cancel_scope.cancel()
    return failures


if __name__ == "__main__":  # pragma: no cover - the maintainer's re-recording entry point
    sys.exit(1 if trio.run(record_examples, FOLDER) else 0)

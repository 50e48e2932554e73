"""Recorded upstreams (issue 15): ``csp-web replay --record`` writes a transcript's cassette
through the real guard and client, secrets redacted; plain replay serves it from a local
origin, offline, and a request the cassette cannot answer fails the transcript by name."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import trustme

from csp_web.app.compose import open_app_daemon
from csp_web.cli.cassette import (
    REDACTED,
    Cassette,
    CassetteError,
    Exchange,
    Redactor,
    cassette_path,
    dump_cassette,
    load_cassette,
)
from csp_web.cli.cassette_run import (
    STAND_IN_CREDENTIAL,
    credentials_as_recorded,
    replay_config,
    replay_with_cassette,
)
from csp_web.cli.record_mode import RecordMode
from csp_web.cli.replay import own_memory_sink, replay_files, replay_in_memory
from csp_web.cli.transcript import parse_transcript
from csp_web.config import Config, with_section
from specialists.web.config import web_section
from tests.cassette_examples import (
    EXAMPLES,
    FOLDER,
    SECRETS,
    recording_config,
    recording_credentials,
    start_upstream,
    upstream_of,
)
from tests.net._origin import Origin

WAIT_S = 60.0  # a whole daemon opens per cassette; far past an honest run on a loaded machine
FETCH_CASSETTE = cassette_path(str(FOLDER / "web_fetch_article.csp"))


def _exchange(url: str, body: bytes, *, status: int = 200, method: str = "GET") -> Exchange:
    headers = (("content-type", "text/plain; charset=utf-8"),)
    return Exchange(method, url, (), b"", status, headers if body else (), body)


def _fetched(url: str, host: str, data: str) -> str:
    """The whole OK reply of REQ:fetch for a text/plain page holding ``data``."""
    return (
        f"< STATUS OK\n< SCOPE [{host}]\n< DATA {data}\n< WORD_COUNT {len(data.split())}\n"
        f"< CACHED false\n< URL {url}\n< FILE_KEY {{{{re:fk_[a-z0-9]+}}}}\n"
        f"< CONTENT_LENGTH {len(data)}\n< TOKENS {math.ceil(len(data) / 4)}\n"
        f'< TRUNCATED false\n< CITE {url} ""\n<\n'
    )


async def _replay(text: str, cassette: Cassette, config: Config, tmp_path: Path) -> list[str]:
    """Replay transcript ``text`` with ``cassette`` in process, with its own memory sink."""
    path = tmp_path / "t.cassette.json"
    path.write_text(dump_cassette(cassette), "utf-8")
    with trio.fail_after(WAIT_S):
        async with own_memory_sink(config) as with_sink:
            return await replay_with_cassette(
                parse_transcript(text),
                str(path),
                with_sink,
                replay_in_memory,
                open_daemon=open_app_daemon,
            )


async def _record(
    tmp_path: Path, ca: trustme.CA, text: str, config: Config | None = None
) -> tuple[str, Origin]:
    """Record transcript ``text`` against the examples' local origin (``config``: the
    recording one); the cassette's text and the origin, which saw the real requests."""
    path = tmp_path / "recorded.csp"
    path.write_text(text, "utf-8")
    config = config or recording_config(str(tmp_path / "state"))
    with recording_credentials(), trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            origin = await start_upstream(nursery, ca)
            upstream = upstream_of(origin, ca)
            failures = await replay_files(
                [str(path)],
                config,
                None,
                open_daemon=open_app_daemon,
                mode=RecordMode.ALL,
                upstream=upstream,
            )
            nursery.cancel_scope.cancel()
    assert failures == 0
    return (tmp_path / "recorded.cassette.json").read_text("utf-8"), origin


async def _record_examples(folder: Path, ca: trustme.CA) -> int:
    """Record the example transcripts copied into ``folder`` against the test's origin."""
    for name in EXAMPLES:
        shutil.copy(FOLDER / f"{name}.csp", folder / f"{name}.csp")
    files = [str(folder / f"{name}.csp") for name in EXAMPLES]
    with recording_credentials(), trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            origin = await start_upstream(nursery, ca)
            config = recording_config(str(folder / "state"))
            upstream = upstream_of(origin, ca)
            failures = await replay_files(
                files,
                config,
                None,
                open_daemon=open_app_daemon,
                mode=RecordMode.ALL,
                upstream=upstream,
            )
            nursery.cancel_scope.cancel()
    return failures


async def test_recording_the_examples_writes_the_committed_cassettes(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cassettes in tests/transcripts/ are what ``--record`` writes against the test's
    local origin (tests/cassette_examples.py), and the replies match the transcripts."""
    assert await _record_examples(tmp_path, ca) == 0, capsys.readouterr().out
    for name in EXAMPLES:
        written = (tmp_path / f"{name}.cassette.json").read_text("utf-8")
        assert written == (FOLDER / f"{name}.cassette.json").read_text("utf-8"), name
        # The replies received match the expected ones: recording rewrote none of them.
        replies = (tmp_path / f"{name}.csp").read_text("utf-8")
        assert replies == (FOLDER / f"{name}.csp").read_text("utf-8"), name
    assert "note: wrote" not in capsys.readouterr().out


async def test_no_secret_reaches_a_recorded_cassette(tmp_path: Path, ca: trustme.CA) -> None:
    """Brave's X-Subscription-Token, GitHub's Authorization and a Set-Cookie are sent and
    received while recording; the written files hold none of their values."""
    assert await _record_examples(tmp_path, ca) == 0
    text = "".join((tmp_path / f"{name}.cassette.json").read_text("utf-8") for name in EXAMPLES)
    for secret in (*SECRETS.values(), "abc123"):
        assert secret not in text
    for header in ("x-subscription-token", "authorization", "set-cookie"):
        assert f'"{header}: {REDACTED}"' in text


async def test_a_secret_echoed_in_a_response_body_is_redacted(
    tmp_path: Path, ca: trustme.CA, config: Config
) -> None:
    """An upstream that echoes the request (headers and all) writes the token into the body;
    the recorder blanks every occurrence of a configured credential, not only headers."""
    text, origin = await _record(
        tmp_path,
        ca,
        "> TASK REQ:api github:echo IN:WEB OUT:API_RESPONSE\n>\n"
        "< STATUS OK\n< SCOPE [api.github.com]\n< DATA {{any}}\n< STATUS_CODE 200\n< CACHED false\n"
        '< CITE https://api.github.com/echo "github:echo"\n<\n',
    )
    echoed = origin.requests[-1].headers["authorization"]
    assert echoed == f"Bearer {SECRETS['GITHUB_TOKEN']}"  # the token was really sent
    (exchange,) = load_cassette(text).exchanges
    assert SECRETS["GITHUB_TOKEN"] not in text
    assert json.loads(exchange.body)["headers"]["authorization"] == f"Bearer {REDACTED}"


async def test_a_recorded_post_replays_and_one_with_another_body_is_a_miss(
    tmp_path: Path, ca: trustme.CA, config: Config
) -> None:
    """Record, then replay, a POST: its body is part of the key, so the same call replays
    from the cassette and a call with another payload is a miss."""
    call = "> TASK REQ:api github:echo IN:WEB OUT:API_RESPONSE\n> METHOD POST\n"
    reply = (
        "< STATUS OK\n< SCOPE [api.github.com]\n< DATA {{any}}\n< STATUS_CODE 200\n"
        '< CACHED false\n< CITE https://api.github.com/echo "github:echo"\n<\n'
    )
    text = f'{call}> PAYLOAD {{"n":1}}\n>\n{reply}'
    cassette = load_cassette((await _record(tmp_path, ca, text))[0])
    (exchange,) = cassette.exchanges
    assert (exchange.method, exchange.url) == ("POST", "https://api.github.com/echo")
    recorded = replace(config, daemon=replace(config.daemon, state_dir=str(tmp_path / "r")))
    assert await _replay(text, cassette, recorded, tmp_path) == []
    other = text.replace('{"n":1}', '{"n":2}')
    missed = await _replay(other, cassette, config, tmp_path)
    assert [line for line in missed if line.startswith("cassette ")] == [
        "cassette miss: POST https://api.github.com/echo"
        " (not recorded, or its recorded exchanges all used)",
        "cassette unused: POST https://api.github.com/echo",
    ]


def _too_large(url: str) -> str:
    return (
        f"> TASK REQ:fetch {url} IN:WEB OUT:CONTENT\n>\n< STATUS FAIL\n< SCOPE []\n"
        f"< DATA none\n< ERROR too_large:max_body_bytes\n< URL {url}\n<\n"
    )


def _capped(config: Config, max_body_bytes: int) -> Config:
    guard = replace(web_section(config).guard, max_body_bytes=max_body_bytes)
    return with_section(config, "web", replace(web_section(config), guard=guard))


@pytest.mark.parametrize(
    ("path", "read"),
    # An untyped body is read up to its head (4 KiB) before its cap is known (a document's
    # is web.fetch.max_document_bytes: net.body.LargerBody): a declared length past the HTML
    # cap no longer stops the read before its first bytes.
    [("/bytes/2000", range(0, 2001)), ("/chunked-bytes/3000", range(1001, 3001))],
    ids=["declared_length", "chunked"],
)
async def test_a_body_cut_short_by_a_cap_replays_the_same_too_large(
    tmp_path: Path, ca: trustme.CA, config: Config, path: str, read: range
) -> None:
    """The client stopped at max_body_bytes (after the head it sniffs, from Content-Length;
    or after a chunk passed it): the exchange keeps what was read and its head, and the
    replay's origin sends that much, so the replay fails the same way."""
    url = f"https://news.example.org{path}"
    recording = _capped(recording_config(str(tmp_path / "state")), 1000)
    cassette = load_cassette((await _record(tmp_path, ca, _too_large(url), recording))[0])
    cut = cassette.exchanges[-1]
    # Nothing of a body declared too long; of a chunked one, the chunks up to past the cap.
    assert (cut.url, len(cut.body) in read) == (url, True)
    assert await _replay(_too_large(url), cassette, _capped(config, 1000), tmp_path) == []


async def test_an_encoded_body_cut_short_is_not_kept(tmp_path: Path, ca: trustme.CA) -> None:
    """Compressed bytes cannot be searched for secrets, and what was read of them cannot be
    decoded whole: the exchange keeps its head only."""
    url = "https://news.example.org/bomb"
    text = (
        f"> TASK REQ:fetch {url} IN:WEB OUT:CONTENT\n>\n< STATUS FAIL\n< SCOPE []\n"
        f"< DATA none\n< ERROR too_large:max_decoded_bytes\n< URL {url}\n<\n"
    )
    cassette = load_cassette((await _record(tmp_path, ca, text))[0])
    cut = cassette.exchanges[-1]
    assert (cut.truncated, cut.body, ("content-encoding", "gzip") in cut.headers) == (
        True,
        b"",
        True,
    )


async def test_a_gzip_body_is_recorded_decoded_and_replays_the_same(
    tmp_path: Path, ca: trustme.CA, config: Config
) -> None:
    url = "https://news.example.org/gzip/40"
    text = f"> TASK REQ:fetch {url} IN:WEB OUT:CONTENT\n>\n" + _fetched(
        url, "news.example.org", "a" * 40
    )
    cassette = load_cassette((await _record(tmp_path, ca, text))[0])
    page = cassette.exchanges[-1]
    assert (page.body, page.headers, page.truncated) == (b"a" * 40, (), False)
    assert await _replay(text, cassette, config, tmp_path) == []


def test_redactor_blanks_a_secret_in_a_url_as_written_and_percent_encoded() -> None:
    redactor = Redactor(("k/ey+1 2",))
    assert redactor.url("https://a.example/s?key=k%2Fey%2B1%202&q=x") == (
        f"https://a.example/s?key={REDACTED}&q=x"
    )
    assert redactor.url("https://a.example/s?key=k%2Fey%2B1+2") == (
        f"https://a.example/s?key={REDACTED}"
    )
    assert redactor.headers([("X-Key", "k/ey+1 2"), ("Cookie", "a=b")]) == (
        ("X-Key", REDACTED),
        ("Cookie", REDACTED),
    )
    assert redactor.body(b'{"k": "k/ey+1 2"}') == b'{"k": "[REDACTED]"}'


async def test_a_request_not_in_the_cassette_fails_naming_method_and_url(
    config: Config, tmp_path: Path
) -> None:
    """A path the cassette lacks is answered as a miss by the origin; a host it lacks is
    never passed on. Both replies are FAIL fetch_failed:cassette_miss and each request is
    named in the differences, so the transcript fails whatever it expected."""
    cassette = load_cassette(Path(FETCH_CASSETTE).read_text("utf-8"))
    text = (
        "> TASK REQ:fetch https://news.example.org/other IN:WEB OUT:CONTENT\n>\n"
        "< STATUS FAIL\n< SCOPE []\n< DATA none\n< ERROR fetch_failed:cassette_miss\n"
        "< URL https://news.example.org/other\n<\n"
        "> TASK REQ:fetch https://example.com/ IN:WEB OUT:CONTENT\n>\n"
        "< STATUS FAIL\n< SCOPE []\n< DATA none\n< ERROR fetch_failed:cassette_miss\n"
        "< URL https://example.com/\n<\n"
    )
    assert await _replay(text, cassette, config, tmp_path) == [
        "cassette miss: GET https://news.example.org/other"
        " (not recorded, or its recorded exchanges all used)",
        "cassette miss: GET https://example.com/robots.txt (host not in the cassette)",
        "cassette unused: GET https://news.example.org/tides",
        "cassette unused: GET https://news.example.org/2024/tides",
    ]


async def test_identical_requests_take_their_exchanges_in_order_and_one_more_is_a_miss(
    config: Config, tmp_path: Path
) -> None:
    """Two recorded answers for one URL serve the first two fetches (N); the third (N+1)
    is a miss."""
    page = "https://news.example.org/live"
    cassette = Cassette(
        [
            _exchange("https://news.example.org/robots.txt", b"", status=404),
            _exchange(page, b"first answer"),
            _exchange(page, b"second answer"),
        ]
    )
    ask = f"> TASK REQ:fetch {page} IN:WEB OUT:CONTENT\n> NO_CACHE true\n>\n"
    text = (
        f"{ask}{_fetched(page, 'news.example.org', 'first answer')}"
        f"{ask}{_fetched(page, 'news.example.org', 'second answer')}"
        f"{ask}< STATUS FAIL\n< SCOPE []\n< DATA none\n< ERROR fetch_failed:cassette_miss\n"
        f"< URL {page}\n<\n"
    )
    diffs = await _replay(text, cassette, config, tmp_path)
    assert diffs == [
        f"cassette miss: GET {page} (not recorded, or its recorded exchanges all used)"
    ]


async def test_a_recorded_exchange_no_request_takes_fails_the_replay_as_stale(
    config: Config, tmp_path: Path
) -> None:
    page = "https://news.example.org/p"
    cassette = Cassette(
        [
            _exchange("https://news.example.org/robots.txt", b"", status=404),
            _exchange(page, b"taken"),
            _exchange(page, b"left over"),
        ]
    )
    ask = f"> TASK REQ:fetch {page} IN:WEB OUT:CONTENT\n>\n"
    text = ask + _fetched(page, "news.example.org", "taken")
    assert await _replay(text, cassette, config, tmp_path) == [f"cassette unused: GET {page}"]


async def test_plain_http_with_an_explicit_port_replays_from_the_plain_listener(
    config: Config, tmp_path: Path
) -> None:
    """An http:// URL on port 8080 is served by the origin's plain port: the replay opens
    that scheme and port in the gate for the cassette's hosts only."""
    base = "http://plain.example:8080"
    cache = replace(web_section(config).cache, directory=str(tmp_path / "operator-cache"))
    config = with_section(
        replace(config, redis=replace(config.redis, url="redis://127.0.0.1:1/0")),
        "web",
        replace(web_section(config), cache=cache),
    )
    cassette = Cassette(
        [_exchange(f"{base}/robots.txt", b"", status=404), _exchange(f"{base}/p", b"plain")]
    )
    text = (
        f"> TASK REQ:fetch {base}/p IN:WEB OUT:CONTENT\n>\n"
        f"{_fetched(f'{base}/p', 'plain.example', 'plain')}"
    )
    assert await _replay(text, cassette, config, tmp_path) == []
    opened = replay_config(config, cassette)
    assert (web_section(opened).cache.directory, opened.redis.url) == (None, None)
    guard = web_section(opened).guard
    assert (guard.allow_http, guard.allowed_ports, guard.allow_private) == (
        True,
        (443, 8080),
        ("plain.example",),
    )


async def test_a_redirect_is_two_exchanges_and_each_hop_is_served_from_the_cassette(
    config: Config, tmp_path: Path
) -> None:
    moved = Exchange(
        "GET", "https://a.example/old", (), b"", 301, (("location", "https://b.example/new"),), b""
    )
    cassette = Cassette(
        [
            _exchange("https://a.example/robots.txt", b"", status=404),
            moved,
            _exchange("https://b.example/robots.txt", b"", status=404),
            _exchange("https://b.example/new", b"moved here"),
        ]
    )
    text = (
        "> TASK REQ:fetch https://a.example/old IN:WEB OUT:CONTENT\n>\n"
        f"{_fetched('https://b.example/new', 'b.example', 'moved here')}"
    )
    assert await _replay(text, cassette, config, tmp_path) == []


async def test_an_international_host_replays_under_its_idna_name(
    config: Config, tmp_path: Path
) -> None:
    """The recorder writes URLs as sent (IDNA); the request for the Unicode spelling reaches
    the same recorded host through the resolver and certificate under its wire name."""
    base = "https://xn--bcher-kva.example"
    cassette = Cassette(
        [_exchange(f"{base}/robots.txt", b"", status=404), _exchange(f"{base}/b", b"books")]
    )
    text = "> TASK REQ:fetch https://bücher.example/b IN:WEB OUT:CONTENT\n>\n"
    assert (
        await _replay(
            text + _fetched(f"{base}/b", "xn--bcher-kva.example", "books"),
            cassette,
            config,
            tmp_path,
        )
        == []
    )


async def test_framing_written_into_a_cassette_by_hand_is_replaced_by_the_origins(
    config: Config, tmp_path: Path
) -> None:
    page = "https://news.example.org/hand"
    framed = (("Content-Length", "999"), ("Transfer-Encoding", "chunked"))
    served = replace(_exchange(page, b"by hand"), headers=framed)
    cassette = Cassette([_exchange("https://news.example.org/robots.txt", b"", status=404), served])
    text = f"> TASK REQ:fetch {page} IN:WEB OUT:CONTENT\n>\n"
    assert (
        await _replay(
            text + _fetched(page, "news.example.org", "by hand"), cassette, config, tmp_path
        )
        == []
    )


async def test_a_binary_body_round_trips_as_base64(config: Config, tmp_path: Path) -> None:
    body = bytes(range(256))
    cassette = Cassette([_exchange("https://bin.example/b", body)])
    text = dump_cassette(cassette)
    assert load_cassette(text).exchanges[0].body == body
    assert "body_base64" in text


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"version": 2, "exchanges": []}, "c.json: version must be 1"),
        (
            {
                "version": 1,
                "exchanges": [
                    {"request": {"method": "GET", "url": "u"}, "response": {"status": 199}}
                ],
            },
            "c.json: exchange 0: status must be an integer from 200 to 599",
        ),
        (
            {
                "version": 1,
                "exchanges": [
                    {
                        "request": {"method": "GET", "url": "u", "headers": ["no colon"]},
                        "response": {"status": 200},
                    }
                ],
            },
            'c.json: exchange 0: headers are "name: value" strings',
        ),
        (
            {
                "version": 1,
                "exchanges": [
                    {
                        "request": {"method": "GET", "url": "u"},
                        "response": {"status": 200, "body_base64": "*"},
                    }
                ],
            },
            "c.json: exchange 0: body_base64 is not base64",
        ),
        ({"version": 1}, "c.json: not a cassette: KeyError('exchanges')"),
    ],
)
def test_a_malformed_cassette_is_refused_naming_file_and_exchange(
    document: object, message: str
) -> None:
    with pytest.raises(CassetteError) as caught:
        load_cassette(json.dumps(document), "c.json")
    assert str(caught.value) == message


async def test_a_transcript_with_a_malformed_cassette_fails(
    config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = tmp_path / "t.csp"
    transcript.write_text("> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS OK\n< {{any}}\n<\n")
    (tmp_path / "t.cassette.json").write_text("{}")
    config = replace(config, daemon=replace(config.daemon, state_dir=str(tmp_path / "s")))
    with trio.fail_after(WAIT_S):
        assert await replay_files([str(transcript)], config, None, open_daemon=open_app_daemon) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"FAIL   {transcript}",
        f"{tmp_path}/t.cassette.json: version must be 1",
    ]


async def test_a_cassette_is_not_replayed_against_a_running_daemon(
    config: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its client cannot be pointed at the cassette's origin, so the transcript fails rather
    than letting the daemon go to the live upstreams."""
    transcript = tmp_path / "t.csp"
    transcript.write_text("> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS OK\n< {{any}}\n<\n")
    (tmp_path / "t.cassette.json").write_text(dump_cassette(Cassette()))
    with trio.fail_after(WAIT_S):
        assert (
            await replay_files(
                [str(transcript)], config, str(tmp_path / "none.sock"), open_daemon=open_app_daemon
            )
            == 1
        )
    assert capsys.readouterr().out.splitlines()[1] == (
        f"{tmp_path}/t.cassette.json: a cassette replays in-process only (without --socket)"
    )


def test_record_with_socket_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "csp_web", "replay", "--record", "--socket", "x.sock", "t.csp"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path)},
    )
    assert done.returncode == 2
    assert "--record" in done.stderr


def test_replay_stands_in_for_the_recorded_credentials_and_hides_the_others(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """So a machine with BRAVE_API_KEY set replays a DuckDuckGo recording through
    DuckDuckGo, and one without it replays a Brave recording through Brave."""
    monkeypatch.setenv("GITHUB_TOKEN", "real-token")
    monkeypatch.delenv("BRAVE_API_KEY", raising=False)
    with credentials_as_recorded(("BRAVE_API_KEY",), config):
        assert os.environ.get("BRAVE_API_KEY") == STAND_IN_CREDENTIAL
        assert "GITHUB_TOKEN" not in os.environ
    assert os.environ.get("GITHUB_TOKEN") == "real-token"
    assert "BRAVE_API_KEY" not in os.environ


# --- search's PREFETCH: the background loads are recorded and replayed (issue 27) ---------

_PAGES = ("https://news.example.org/prefetch/a", "https://news.example.org/prefetch/b")
_PREFETCH_TRANSCRIPT = (
    "> TASK REQ:search IN:WEB OUT:URL_REFS\n> QUERY tides\n> MAX_RESULTS 2\n> PREFETCH 2\n>\n"
    "< STATUS OK\n< SCOPE [news.example.org]\n"
    f"< DATA url:{_PAGES[0]},url:{_PAGES[1]}\n"
    '< SNIPPET news.example.org:"a"\n< SNIPPET news.example.org:"b"\n'
    '< TITLE "A"\n< TITLE "B"\n'
    f'< CITE {_PAGES[0]} "A"\n< CITE {_PAGES[1]} "B"\n'
    '< BACKEND brave\n< CACHED false\n< QUERY "tides"\n'
    f"< SCORE {_PAGES[0]} 1.0\n< SCORE {_PAGES[1]} 0.5\n< PREFETCHED 2\n<\n"
)


async def _record_prefetch(tmp_path: Path, ca: trustme.CA) -> Cassette:
    """Record ``_PREFETCH_TRANSCRIPT`` against the examples' origin, Brave answering with
    two pages of news.example.org."""
    from tests.net._origin import Reply as OriginReply

    results = [
        {"url": url, "title": title, "description": title.lower()}
        for url, title in zip(_PAGES, "AB", strict=True)
    ]
    brave = json.dumps({"type": "search", "web": {"type": "search", "results": results}})
    path = tmp_path / "prefetch.csp"
    path.write_text(_PREFETCH_TRANSCRIPT, "utf-8")
    html = [("content-type", "text/html; charset=utf-8")]
    with recording_credentials(), trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            origin = await start_upstream(nursery, ca)
            origin.routes["/res/v1/web/search"] = lambda seen: OriginReply(
                200, [("content-type", "application/json")], brave.encode()
            )
            for page in ("/prefetch/a", "/prefetch/b"):
                origin.routes[page] = lambda seen: OriginReply(200, html, b"<p>high tide</p>")
            config = recording_config(str(tmp_path / "state"))
            failures = await replay_files(
                [str(path)],
                config,
                None,
                open_daemon=open_app_daemon,
                mode=RecordMode.ALL,
                upstream=upstream_of(origin, ca),
            )
            nursery.cancel_scope.cancel()
    assert failures == 0
    return load_cassette((tmp_path / "prefetch.cassette.json").read_text("utf-8"))


async def test_prefetch_runs_in_record_and_replay_and_its_loads_come_from_the_cassette(
    tmp_path: Path, ca: trustme.CA, config: Config
) -> None:
    """The daemon's background task runs under ``csp-web replay`` as under ``serve``: the
    recording waits for the prefetched pages and writes them down, and the replay serves
    them (an exchange no request took would be reported unused)."""
    cassette = await _record_prefetch(tmp_path, ca)
    loaded = [exchange.url for exchange in cassette.exchanges[1:]]
    assert sorted(url for url in loaded if not url.endswith("/robots.txt")) == list(_PAGES)
    assert "/res/v1/web/search" in cassette.exchanges[0].url
    with recording_credentials():
        assert await _replay(_PREFETCH_TRANSCRIPT, cassette, config, tmp_path) == []

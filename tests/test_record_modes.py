"""Record modes (issue 28), as vcrpy and pytest-recording name them: ``none`` replays only,
``once`` records a missing cassette, ``new_episodes`` appends what the cassette lacks, ``all``
records everything again; a recording writes the replies it received into the transcript.
Each runs against a real local HTTPS origin standing in for the recorded upstream, which
counts the requests that really left."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trustme

from csp_web.app.compose import open_app_daemon
from csp_web.cli.cassette import cassette_path, load_cassette
from csp_web.cli.record_mode import RecordMode
from csp_web.cli.replay import replay_files
from tests.cassette_examples import (
    FOLDER,
    recording_config,
    recording_credentials,
    start_upstream,
    upstream_of,
)
from tests.inprocess import run_main
from tests.net._origin import Origin
from tests.test_cassettes import _capped, _too_large

WAIT_S = 60.0  # a whole daemon opens per cassette; far past an honest run on a loaded machine
ARTICLE = "https://news.example.org/tides"
PAGE = "https://news.example.org/page"
# Expected replies a user starts from: the recording writes the whole reply in.
ASK_ARTICLE = f"> TASK REQ:fetch {ARTICLE} IN:WEB OUT:CONTENT\n>\n< STATUS OK\n<\n"
ASK_PAGE = f"> TASK REQ:fetch {PAGE} IN:WEB OUT:CONTENT\n>\n< STATUS OK\n<\n"
MISS = "(not recorded, or its recorded exchanges all used)"


async def _run(
    tmp_path: Path,
    ca: trustme.CA,
    text: str | None,
    mode: RecordMode | None,
    *,
    max_body_bytes: int | None = None,
) -> tuple[int, Origin]:
    """``t.csp`` in ``tmp_path`` (written first when ``text`` is given) replayed under
    ``mode`` with the local origin as the live upstream (the guard's body cap lowered to
    ``max_body_bytes`` when given); the failures and the origin."""
    path = tmp_path / "t.csp"
    if text is not None:
        path.write_text(text, "utf-8")
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    config = recording_config(str(state))
    if max_body_bytes is not None:
        config = _capped(config, max_body_bytes)
    with recording_credentials(), trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            origin = await start_upstream(nursery, ca)
            failures = await replay_files(
                [str(path)],
                config,
                None,
                open_daemon=open_app_daemon,
                mode=mode,
                upstream=upstream_of(origin, ca),
            )
            nursery.cancel_scope.cancel()
    return failures, origin


def _cassette(tmp_path: Path) -> Path:
    return Path(cassette_path(str(tmp_path / "t.csp")))


def _urls(tmp_path: Path) -> list[str]:
    return [exchange.url for exchange in load_cassette(_cassette(tmp_path).read_text()).exchanges]


def _printed(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> list[str]:
    return [line.replace(str(tmp_path), "TMP") for line in capsys.readouterr().out.splitlines()]


async def test_once_records_a_missing_cassette_and_writes_the_replies_into_the_transcript(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    failures, origin = await _run(tmp_path, ca, ASK_ARTICLE, RecordMode.ONCE)
    assert (failures, origin.paths()) == (0, ["/robots.txt", "/tides", "/2024/tides"])
    assert _urls(tmp_path) == [
        "https://news.example.org/robots.txt",
        ARTICLE,
        "https://news.example.org/2024/tides",
    ]
    # The whole reply, as the committed example (recorded from the same origin) expects it.
    committed = (FOLDER / "web_fetch_article.csp").read_text("utf-8")
    written = (tmp_path / "t.csp").read_text("utf-8")
    assert written == committed[committed.index("> TASK") :]
    assert _printed(capsys, tmp_path) == [
        "ok   TMP/t.csp",
        "note: recorded TMP/t.cassette.json",
        "note: wrote 1 expected reply",
    ]


@pytest.mark.slow  # two or three recorded runs, a daemon each
async def test_once_with_a_cassette_replays_only_and_a_new_request_fails_naming_it(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await _run(tmp_path, ca, ASK_ARTICLE, RecordMode.ONCE))[0] == 0
    recorded = _cassette(tmp_path).read_bytes()
    capsys.readouterr()
    failures, origin = await _run(tmp_path, ca, None, RecordMode.ONCE)
    assert (failures, origin.requests) == (0, [])  # replayed offline
    assert _printed(capsys, tmp_path) == ["ok   TMP/t.csp"]
    text = (tmp_path / "t.csp").read_text("utf-8") + ASK_PAGE
    failures, origin = await _run(tmp_path, ca, text, RecordMode.ONCE)
    assert (failures, origin.requests, _cassette(tmp_path).read_bytes()) == (1, [], recorded)
    assert f"cassette miss: GET {PAGE} {MISS}" in _printed(capsys, tmp_path)


async def test_none_never_records_and_without_a_cassette_every_request_is_a_miss(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    failures, origin = await _run(tmp_path, ca, ASK_ARTICLE, RecordMode.NONE)
    assert (failures, origin.requests, _cassette(tmp_path).exists()) == (1, [], False)
    printed = _printed(capsys, tmp_path)
    assert printed[0] == "FAIL   TMP/t.csp"
    assert printed[-1] == (
        "cassette miss: GET https://news.example.org/robots.txt (host not in the cassette)"
    )
    assert (tmp_path / "t.csp").read_text("utf-8") == ASK_ARTICLE  # nothing written


@pytest.mark.slow  # two or three recorded runs, a daemon each
async def test_the_default_replays_an_existing_cassette_as_none(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await _run(tmp_path, ca, ASK_ARTICLE, RecordMode.ONCE))[0] == 0
    text = (tmp_path / "t.csp").read_text("utf-8") + ASK_PAGE
    failures, origin = await _run(tmp_path, ca, text, None)
    assert (failures, origin.requests) == (1, [])
    assert f"cassette miss: GET {PAGE} {MISS}" in _printed(capsys, tmp_path)


@pytest.mark.slow  # two or three recorded runs, a daemon each
async def test_new_episodes_replays_what_it_holds_and_appends_the_new_requests(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await _run(tmp_path, ca, ASK_ARTICLE, RecordMode.ONCE))[0] == 0
    before = _urls(tmp_path)
    text = (tmp_path / "t.csp").read_text("utf-8") + ASK_PAGE
    failures, origin = await _run(tmp_path, ca, text, RecordMode.NEW_EPISODES)
    # Only the new page left the machine: the article and robots.txt came from the cassette.
    assert (failures, origin.paths()) == (0, ["/page"])
    assert _urls(tmp_path) == [*before, PAGE]
    written = (tmp_path / "t.csp").read_text("utf-8")
    assert written.startswith(text[: -len(ASK_PAGE)])  # the first step's reply as it was
    assert '< TITLE "Hello"\n' in written[len(text) - len(ASK_PAGE) :]
    capsys.readouterr()
    # What it wrote replays offline, nothing missed and nothing unused.
    failures, origin = await _run(tmp_path, ca, None, RecordMode.NONE)
    assert (failures, origin.requests) == (0, [])
    assert _printed(capsys, tmp_path) == ["ok   TMP/t.csp"]


@pytest.mark.slow  # two or three recorded runs, a daemon each
async def test_all_records_every_request_again_and_drops_what_was_stale(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (await _run(tmp_path, ca, ASK_ARTICLE + ASK_PAGE, RecordMode.ONCE))[0] == 0
    (tmp_path / "t.csp").write_text(ASK_PAGE, "utf-8")  # the article is asked no more
    failures, origin = await _run(tmp_path, ca, None, RecordMode.ALL)
    assert (failures, origin.paths()) == (0, ["/robots.txt", "/page"])
    assert _urls(tmp_path) == ["https://news.example.org/robots.txt", PAGE]


async def test_a_reply_that_already_matches_is_kept_as_written_placeholders_and_all(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        (FOLDER / "web_fetch_article.csp")
        .read_text("utf-8")
        .replace("< WORD_COUNT 73", "< WORD_COUNT {{int}}")
    )
    assert (await _run(tmp_path, ca, text, RecordMode.ALL))[0] == 0
    assert (tmp_path / "t.csp").read_text("utf-8") == text
    assert "note: wrote" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b'{"version": 1, "exchanges": [{"request": {"met', "not JSON (Unterminated string"),
        (b"", "not JSON (Expecting value at line 1 column 1"),
        (b"\xff\xfe{}", "cannot be read as a cassette: 'utf-8' codec can't decode"),
    ],
    ids=["truncated", "empty", "not_utf8"],
)
@pytest.mark.parametrize("mode", [RecordMode.NONE, RecordMode.ONCE, RecordMode.NEW_EPISODES])
async def test_a_corrupt_cassette_fails_its_transcript_by_name_and_is_left_as_it_was(
    tmp_path: Path,
    ca: trustme.CA,
    capsys: pytest.CaptureFixture[str],
    content: bytes,
    why: str,
    mode: RecordMode,
) -> None:
    _cassette(tmp_path).write_bytes(content)
    failures, origin = await _run(tmp_path, ca, ASK_ARTICLE, mode)
    assert (failures, origin.requests, _cassette(tmp_path).read_bytes()) == (1, [], content)
    printed = _printed(capsys, tmp_path)
    assert printed[0] == "FAIL   TMP/t.csp"
    assert printed[1].startswith(f"TMP/t.cassette.json: {why}"), printed
    assert len(printed) == 2
    assert (tmp_path / "t.csp").read_text("utf-8") == ASK_ARTICLE


async def test_all_records_over_a_corrupt_cassette(tmp_path: Path, ca: trustme.CA) -> None:
    """As vcrpy's ``all``, which never reads the cassette it replaces."""
    _cassette(tmp_path).write_bytes(b'{"version": 1, "exch')
    assert (await _run(tmp_path, ca, ASK_ARTICLE, RecordMode.ALL))[0] == 0
    assert _urls(tmp_path)[1] == ARTICLE


def test_the_command_line_takes_a_record_mode_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In process (``main``): ``--record-mode none`` with a cut-short cassette fails the
    transcript by name (exit 1); a mode that is not one of the four is a usage error, and so
    is any mode with ``--socket``."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("CSP_WEB_CONFIG", raising=False)
    transcript = tmp_path / "t.csp"
    transcript.write_text(ASK_ARTICLE, "utf-8")
    _cassette(tmp_path).write_text('{"version": 1', "utf-8")
    assert run_main(["replay", "--record-mode", "none", str(transcript)]) == 1
    out = _printed(capsys, tmp_path)
    assert out[0] == "FAIL   TMP/t.csp"
    assert out[1].startswith("TMP/t.cassette.json: not JSON (")
    with pytest.raises(SystemExit) as usage:
        run_main(["replay", "--record-mode", "rewrite", str(transcript)])
    assert usage.value.code == 2
    assert "invalid choice: 'rewrite'" in capsys.readouterr().err
    assert run_main(["replay", "--record-mode", "once", "--socket", "x.sock", str(transcript)]) == 2
    assert "drop --socket" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:
        run_main(["replay", "--record", "--record-mode", "none", str(transcript)])
    assert both.value.code == 2


async def test_recording_a_transcript_without_upstream_requests_makes_no_cassette(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    """As vcrpy saves no cassette that recorded nothing: replaying such a transcript stays
    the plain in-process replay (and over a socket). Its replies are still written in."""
    text = "> TASK REQ:ping IN:SYS OUT:PONG\n> ID p\n>\n< STATUS OK\n<\n"
    failures, origin = await _run(tmp_path, ca, text, RecordMode.ALL)
    assert (failures, origin.requests, _cassette(tmp_path).exists()) == (0, [], False)
    assert (tmp_path / "t.csp").read_text("utf-8") == (
        "> TASK REQ:ping IN:SYS OUT:PONG\n> ID p\n>\n< STATUS OK\n< ID p\n< SCOPE [sys]\n"
        "< DATA pong\n<\n"
    )
    assert _printed(capsys, tmp_path) == ["ok   TMP/t.csp", "note: wrote 1 expected reply"]


@pytest.mark.slow  # two recorded runs, a daemon each
async def test_new_episodes_replays_a_body_cut_short_as_it_was_cut(
    tmp_path: Path, ca: trustme.CA, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kept exchange the client stopped reading at its cap (``truncated``) is answered from
    the cassette with its head and the bytes read, then a broken body: the op fails
    too_large as it did, and only the new request leaves the machine."""
    big = "https://news.example.org/chunked-bytes/300000"
    failures, _ = await _run(tmp_path, ca, _too_large(big), RecordMode.ONCE, max_body_bytes=1000)
    assert failures == 0
    assert load_cassette(_cassette(tmp_path).read_text()).exchanges[-1].truncated
    text = _too_large(big) + ASK_PAGE
    failures, origin = await _run(tmp_path, ca, text, RecordMode.NEW_EPISODES, max_body_bytes=1000)
    assert (failures, origin.paths()) == (0, ["/page"])
    assert (tmp_path / "t.csp").read_text("utf-8").startswith(_too_large(big))

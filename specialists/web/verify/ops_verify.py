"""``REQ:verify``: are these quotes in that snapshot, and where (issue 29)?

    TASK REQ:verify IN:WEB OUT:VERIFY
    FILE_KEY fk_k2n3r5t7v2x4z6b3
    QUOTE @14-77 The North Sea has two high tides every day
    QUOTE "neap tides fall between them"
    QUOTE the moon is made of cheese

    STATUS OK
    SCOPE [origin.test]
    DATA quotes:3
    FILE_KEY fk_k2n3r5t7v2x4z6b3
    QUOTE 1 found @14-57 sha256:5d1c…
    QUOTE 2 moved @190-218 sha256:9a0e… fk_k2n3r5t7v2x4z6b3
    QUOTE 3 not_found
    FOUND 1
    MOVED 1
    NOT_FOUND 1
    CITE https://origin.test/tides "Tides of the North Sea"

A QUOTE is ``[@<start>-<end> ]<words>``: the words, and where a citation said they stand
(``quotes.py`` says how words match and what offsets mean; offsets that are negative,
reversed or past the text are invalid_field). Each answers ``found`` (starting at the
offset given, or anywhere when none was), ``moved`` (elsewhere in the snapshot, or, when
URL is given beside FILE_KEY, only in the page URL has now, with that page's fileKey) or
``not_found``. The snapshot is the fileKey's held one (``cache.fetch_ttl_s``), else its File
Cabinet entry (``cabinet.ttl_s``, 30 days: the cabinet keeps the whole content the key
hashes, so every span of it stays checkable); neither holding it is
``unknown_file_key:<fileKey>``. With URL alone the page is fetched as fetch does (guard,
robots.txt, cache) and its snapshot held, so the FILE_KEY answered can be checked again.
fileKeys are not per uid: a key names content by its hash, and whoever holds one may read it
(as fetch FILE_KEY and cabinet do).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import trio

from csp_web.core.api.audit import redact_url
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import READS_WEB, Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field

from ..docs import cabinet
from ..pages.filekeys import content_of, file_key, held, hold
from ..pages.loading import Page, load_for_op
from ..pages.quotes import (
    SHOWN_SPAN_CHARS,
    Folded,
    Span,
    fold,
    holds_words,
    is_markdown,
    locate,
    located_at,
)
from ..services import WebServices, web_audit

MAX_QUOTES = 50  # five research answers' worth (research.max_bullets is 10)
QUOTE_MAX_CHARS = SHOWN_SPAN_CHARS  # the longest quote a bullet may carry
# ``@<start>-<end>`` before the words: any ``@``, digits and dash there are offsets, checked
# (a negative, reversed or too large one is invalid_field), never taken as words.
_CLAIM = re.compile(r"@(-?\d+)-(-?\d+)(?:\s+(.*))?", re.DOTALL)


@dataclass(frozen=True)
class Claim:
    """A quote to check, and where its citation says it stands (if it says)."""

    words: str
    start: int | None = None
    end: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """A stored text quotes are checked in, folded once."""

    file_key: str
    page: Page
    folded: Folded


async def verify(params: Params, ctx: OpContext, services: WebServices) -> Result:
    """Each QUOTE's place in the FILE_KEY's snapshot (held, else in the cabinet) or in the
    page at URL; see the module docstring."""
    claims = [_claim(n, value) for n, value in enumerate(params.texts("QUOTE"), 1)]
    key, url = params.opt_text("FILE_KEY"), params.opt_text("URL")
    if not claims:
        raise FieldError(ErrorCode.MISSING_FIELD, "QUOTE")
    if len(claims) > MAX_QUOTES:
        raise FieldError(ErrorCode.INVALID_FIELD, f"over {MAX_QUOTES} QUOTE fields")
    if key is None and url is None:
        raise FieldError(ErrorCode.MISSING_FIELD, "FILE_KEY or URL")
    with web_audit(redact_url(key or url or "")) as notes:
        stored = await _stored(ctx, services, key) if key is not None else None
        current = await _current(services, url) if url is not None else None
        snapshot = stored or current
        assert snapshot is not None
        _check_offsets(claims, snapshot)
        newer = current if stored is not None else None
        check = functools.partial(_answers, claims, snapshot, newer)
        answers = await trio.to_thread.run_sync(check, abandon_on_cancel=True)
        fields: list[Field] = [("FILE_KEY", snapshot.file_key)]
        fields += [("QUOTE", f"{n} {kind}{where}") for n, (kind, where) in enumerate(answers, 1)]
        fields += [(kind.upper(), str(sum(k == kind for k, _ in answers))) for kind in _KINDS]
        fields.append(cite(snapshot.page.url, snapshot.page.title))
        notes.cache_hit = snapshot.page.cached
        return notes.attach(Result(f"quotes:{len(claims)}", (snapshot.page.host,), tuple(fields)))


_KINDS = ("found", "moved", "not_found")


def _claim(number: int, value: str) -> Claim:
    match = _CLAIM.fullmatch(value)
    if match is None:
        claim = Claim(value)
    else:
        start, end = int(match[1]), int(match[2])
        claim = Claim(match[3] or "", start, end)
        if start < 0:
            raise FieldError(ErrorCode.INVALID_FIELD, f"QUOTE {number}: @start-end is negative")
        if start >= end:
            raise FieldError(ErrorCode.INVALID_FIELD, f"QUOTE {number}: @start-end is empty")
    if not holds_words(claim.words):
        raise FieldError(ErrorCode.INVALID_FIELD, f"QUOTE {number} holds no words")
    return claim


def _check_offsets(claims: list[Claim], snapshot: Snapshot) -> None:
    """Raises FieldError(INVALID_FIELD) for a claim ending past the snapshot's text."""
    length = len(snapshot.folded.original)
    for number, claim in enumerate(claims, 1):
        if claim.end is not None and claim.end > length:
            detail = f"QUOTE {number}: @start-end past the text ({length} chars)"
            raise FieldError(ErrorCode.INVALID_FIELD, detail)


async def _stored(ctx: OpContext, services: WebServices, key: str) -> Snapshot:
    """``key``'s held snapshot, else its cabinet entry; raises OpError(UNKNOWN_FILE_KEY)
    when neither holds it."""
    try:
        page = await held(services, key)
    except OpError as exc:
        if exc.code is not ErrorCode.UNKNOWN_FILE_KEY:
            raise
        saved = await cabinet.load(ctx.services.outbox, services.config.docs.cabinet, key)
        page = saved.page()
    return await _snapshot(key, page)


async def _current(services: WebServices, url: str) -> Snapshot:
    """The page at ``url`` as fetch loads it, its snapshot held under its fileKey."""
    page = await load_for_op(services, url)
    if page.kind not in ("html", "text", "document"):
        fields = (("URL", url),)
        raise OpError(ErrorCode.UNSUPPORTED_CONTENT, page.content_type or "unknown", fields=fields)
    key = file_key(page)
    await hold(services, key, page)
    return await _snapshot(key, page)


async def _snapshot(key: str, page: Page) -> Snapshot:
    make = functools.partial(fold, content_of(page), markdown=is_markdown(page.kind))
    return Snapshot(key, page, await trio.to_thread.run_sync(make, abandon_on_cancel=True))


def _answers(
    claims: list[Claim], snapshot: Snapshot, newer: Snapshot | None
) -> list[tuple[str, str]]:
    """(found|moved|not_found, where) for each claim (CPU-bound: run in a thread)."""
    return [_answer(claim, snapshot, newer) for claim in claims]


def _answer(claim: Claim, snapshot: Snapshot, newer: Snapshot | None) -> tuple[str, str]:
    if claim.start is not None:  # first where it was said to be, however often it occurs
        there = located_at(snapshot.folded, claim.words, claim.start)
        if there is not None:
            return "found", _place(there)
    span = locate(snapshot.folded, claim.words, near=claim.start)
    if span is not None:
        if claim.start is None:
            return "found", _place(span)
        return "moved", f"{_place(span)} {snapshot.file_key}"
    moved = None if newer is None else locate(newer.folded, claim.words, near=claim.start)
    if newer is None or moved is None:
        return "not_found", ""
    return "moved", f"{_place(moved)} {newer.file_key}"


def _place(span: Span) -> str:
    return f" @{span.start}-{span.end} sha256:{span.sha256}"


VERIFY_REPLIES = (
    ReplyField("FILE_KEY", "OK", "the snapshot checked (with URL alone, the page fetched)"),
    ReplyField(
        "QUOTE",
        "OK: one per QUOTE, in order",
        "<n> found @<start>-<end> sha256:<hex>, <n> moved @<start>-<end> sha256:<hex> "
        "<fileKey>, or <n> not_found",
        repeat=True,
    ),
    ReplyField("FOUND", "OK", "quotes found where they were said to be", kind="int"),
    ReplyField("MOVED", "OK", "quotes found elsewhere or only in the newer page", kind="int"),
    ReplyField("NOT_FOUND", "OK", "quotes found nowhere", kind="int"),
    ReplyField("CITE", "OK", "the page (R-4)"),
    ReplyField("URL", "FAIL: a URL's failure", "the URL asked"),
    ReplyField("RETRY_AFTER", "FAIL: rate_limited", "seconds to wait", kind="int"),
)
VERIFY_EXAMPLE = Example(
    (
        "TASK REQ:verify IN:WEB OUT:VERIFY\n"
        "ID 1\n"
        "URL https://origin.test/tides\n"
        "QUOTE @26-68 The North Sea has two high tides every day\n"
        "QUOTE twelve  hours and twenty–five minutes\n"
        "QUOTE @0-45 Spring tides follow the new and the full moon\n"
        "QUOTE The North Sea has three high tides\n"
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA quotes:4\n"
        "FILE_KEY fk_xxxxxxxxxxxxxxxx\n"
        "QUOTE 1 found @26-68 sha256:cb2e6db38e6ff5f2f8fcab250aa0fd9111a8d91acf7effbe369c76732fe3"
        "57b3\n"
        "QUOTE 2 found @76-112 sha256:f8782464080a8a7c692f3da2a960b332c48aa9ccf8ef330a3309ebbd52c7"
        "e22a\n"
        "QUOTE 3 moved @120-165 sha256:84e71800021959cfb018656daf2b1defd2ca679413fa0d947ed2e0070a"
        "344b5e fk_xxxxxxxxxxxxxxxx\n"
        "FOUND 2\n"
        "MOVED 1\n"
        "NOT_FOUND 1\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
        "… 1 more QUOTE\n"
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "verify",
        "WEB",
        "VERIFY",
        "web",
        verify,
        (
            FieldSpec("FILE_KEY", doc="the snapshot a citation names (fk_...); or URL"),
            FieldSpec(
                "URL",
                doc="a page to fetch and check; beside FILE_KEY, where moved quotes are sought",
            ),
            FieldSpec(
                "QUOTE",
                repeat=True,
                max_chars=QUOTE_MAX_CHARS,
                doc=f"[@<start>-<end> ]<words>: at most {MAX_QUOTES}",
            ),
        ),
        replies=VERIFY_REPLIES,
        example=VERIFY_EXAMPLE,
        doc="check quotes against a stored snapshot: found, moved or not_found, with offsets",
        effects=READS_WEB,
    ),
]

"""The ``summarize`` op: bullets from TEXT, or from the page at URL (loaded like fetch:
``loaders.fetch_page``, an app shell rendered as fetch renders it).

TASK REQ:summarize IN:WEB OUT:SUMMARY
URL https://example.com/article
MAX_BULLETS 3

STATUS OK
SCOPE [example.com]
DATA bullets:3
BULLET "The first point."
BULLET "The second point."
BULLET "The third point."
QUOTE 1 fk_k2n3r5t7v2x4z6b3 @21-37 sha256:9f2c… "The first point."
QUOTE 2 fk_k2n3r5t7v2x4z6b3 @39-56 sha256:04ab… "The second point."
UNVERIFIED 3
VERIFIED 2
UNVERIFIED_COUNT 1
METHOD extractive
CITE https://example.com/article "Article Title"

Each bullet's support is located in the stored text before the reply (``quotes.py``): for a
URL or FILE_KEY the fileKey's snapshot (a URL's is held, so it can be checked later), for
TEXT the text itself, named ``text``. A bullet whose quote is not found is ``UNVERIFIED``;
``VERIFY strict`` leaves it out (and fails ``no_verified_bullets`` when none is left).
A page with no text to summarise fails with the code and detail fetch answers for it
(``no_text_layer:encrypted``, ``empty_content:script_only,render_unavailable``), never
``summarize_failed:no_sentences``, which is for text with no sentence in it.
"""

from __future__ import annotations

import functools

import trio

from csp_web.core.api.audit import redact_url
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import READS_WEB, Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field

from ..services import WebServices, web_audit
from .fetch_fields import empty_error
from .filekeys import content_of, file_key, held, hold
from .loaders import fetch_page
from .loading import Page, op_deadline
from .quotes import is_markdown, locate_all, support_fields
from .services import PagesServices
from .summarize import Summary
from .summarize import summarize as make_summary


async def summarize(params: Params, ctx: OpContext, services: PagesServices) -> Result:
    """``MAX_BULLETS`` bullets (default summarize.default_bullets, at most max_bullets) of
    TEXT, of the page at URL or of the snapshot FILE_KEY names, exactly one of them; METHOD
    says how they were made. Each bullet's quote is located in the text before the reply
    (QUOTE, else UNVERIFIED; VERIFY strict leaves unverified bullets out)."""
    config = services.config.summarize
    text, url = params.opt_text("TEXT"), params.opt_text("URL")
    key = params.opt_text("FILE_KEY")
    count = params.opt_integer("MAX_BULLETS") or config.default_bullets
    _check(text, url if key is None else key, count, services)
    if key is not None and url is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "give URL or FILE_KEY, not both")
    target = url or key or f"text:{len(text or '')}"  # never the text itself
    with web_audit(redact_url(target)) as notes:
        bucket = services.limits.bucket("summarize")  # seed 001: web_summarize 20/min
        if bucket is not None:
            await bucket.acquire(deadline=op_deadline(services))
        fields: list[Field] = []
        scope: tuple[str, ...] = ()
        source = "text"  # what the quotes name: the TEXT given, or the page's fileKey
        markdown = False  # a TEXT given is matched as it stands
        if url is not None or key is not None:
            page = await held(services, key) if key else await fetch_page(services, url or "")
            notes.cache_hit = page.cached
            text = _page_text(page.kind, content_of(page), page.content_type, target)
            empty = empty_error(page, text)
            if empty is not None:  # fetch's code and detail for the same page, not no_sentences
                asked = (("URL", url),) if url is not None else ()
                raise OpError(*empty, scope=(page.host,), fields=asked)
            source = key or await _held_key(services, page)
            markdown = is_markdown(page.kind)
            scope, fields = (page.host,), [cite(page.url, page.title)]
        assert text is not None
        text = text[: config.max_text_chars]  # what was summarised is what is searched
        deadline_s = max(0.0, op_deadline(services) - trio.current_time())
        summary = await make_summary(
            services.client, config, text, count, deadline_s=deadline_s, pool=services.pool
        )
        notes.method = summary.method
        if not summary.bullets:
            raise OpError(ErrorCode.SUMMARIZE_FAILED, "no_sentences", scope=scope)
        strict = params.text("VERIFY") == "strict"
        checked = await _checked(summary, text, source, markdown=markdown, strict=strict)
        bullets = sum(name == "BULLET" for name, _ in checked)
        if not bullets:  # VERIFY strict left none: never an empty OK
            raise OpError(ErrorCode.SUMMARIZE_FAILED, "no_verified_bullets", scope=scope)
        fields = [*checked, ("METHOD", summary.method), *fields]
        return notes.attach(Result(f"bullets:{bullets}", scope, tuple(fields)))


async def _held_key(services: PagesServices, page: Page) -> str:
    """The fileKey of a page loaded by URL, its snapshot held so its quotes can be checked."""
    key = file_key(page)
    await hold(services, key, page)
    return key


async def _checked(
    summary: Summary, text: str, source: str, *, markdown: bool, strict: bool
) -> list[Field]:
    """BULLET lines and their support (``quotes.support_fields``); under ``strict`` only
    the bullets whose quote was found."""
    claims = tuple(zip(summary.bullets, summary.quotes, strict=True))
    locate = functools.partial(locate_all, text, claims, markdown=markdown)
    spans = await trio.to_thread.run_sync(locate, abandon_on_cancel=True)
    kept = [
        (bullet, None if span is None else (source, span))
        for bullet, span in zip(summary.bullets, spans, strict=True)
        if span is not None or not strict
    ]
    bullets: list[Field] = [("BULLET", bullet) for bullet, _ in kept]
    return [*bullets, *support_fields([s for _, s in kept], len(spans) - len(kept))]


def _check(text: str | None, url: str | None, count: int, services: PagesServices) -> None:
    config = services.config.summarize
    if text is None and url is None:
        raise FieldError(ErrorCode.MISSING_FIELD, "TEXT or URL")
    if text is not None and url is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "give TEXT or URL, not both")
    if text is not None and not text.strip():
        raise FieldError(ErrorCode.INVALID_FIELD, "TEXT is empty")
    if text is not None and len(text) > config.max_text_chars:
        raise FieldError(ErrorCode.INVALID_FIELD, f"TEXT over {config.max_text_chars} chars")
    if count > config.max_bullets:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_BULLETS above {config.max_bullets}")


def _page_text(kind: str, text: str, content_type: str, url: str) -> str:
    if kind not in ("html", "text", "document"):
        raise OpError(
            ErrorCode.UNSUPPORTED_CONTENT, content_type or "unknown", fields=(("URL", url),)
        )
    return text


SUMMARIZE_REPLIES = (
    ReplyField("BULLET", "one per bullet", "a sentence of the summary", repeat=True),
    ReplyField(
        "QUOTE",
        "one per verified bullet",
        '<n> <fileKey or text> @<start>-<end> sha256:<hex> "<span>": bullet n\'s words in the '
        "stored text (code points, end exclusive; the hash is of that span)",
        repeat=True,
    ),
    ReplyField("UNVERIFIED", "one per bullet whose quote was not found", "its number", "int", True),
    ReplyField("VERIFIED", "OK", "how many bullets carry a QUOTE", kind="int"),
    ReplyField(
        "UNVERIFIED_COUNT", "OK", "bullets whose quote was not found (or left out)", kind="int"
    ),
    ReplyField("METHOD", "OK", "how it was made (model or extractive)"),
    ReplyField("CITE", "URL or FILE_KEY given", "the page (R-4)"),
    ReplyField("URL", "FAIL, URL given", "the URL asked"),
    ReplyField("RETRY_AFTER", "FAIL: rate_limited", "seconds to wait", kind="int"),
)
SUMMARIZE_EXAMPLE = Example(
    ("TASK REQ:summarize IN:WEB OUT:SUMMARY\nID 1\nURL https://origin.test/tides\nMAX_BULLETS 2\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA bullets:2\n"
        'BULLET "The North Sea has two high tides every day, about twelve hours '
        'and twenty-five minutes apart."\n'
        'BULLET "Spring tides follow the new and the full moon; neap tides fall '
        'between them."\n'
        "QUOTE 1 fk_xxxxxxxxxxxxxxxx @26-119 sha256:bc3c2d522b6bb6b528ff517e563cdf5cf01c4e07a9"
        '89dd1caed45434cab0245c "The North Sea has two high tides every day, about t…\n'
        "QUOTE 2 fk_xxxxxxxxxxxxxxxx @120-196 sha256:103d31b80e547229b25200a1c2254face35676ea7e"
        '866fb2556f679c00370b62 "Spring tides follow the new and the full moon; nea…\n'
        "VERIFIED 2\n"
        "UNVERIFIED_COUNT 0\n"
        "METHOD extractive\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "summarize",
        "WEB",
        "SUMMARY",
        "web",
        summarize,
        (
            FieldSpec("TEXT", doc="the text to summarise (inline text fills it); or URL"),
            FieldSpec("URL", doc="a page to load and summarise; or TEXT"),
            FieldSpec("FILE_KEY", doc="a fetched snapshot (fk_...) to summarise; or TEXT, URL"),
            FieldSpec(
                "MAX_BULLETS",
                "int",
                minimum=1,
                doc="default summarize.default_bullets (5), at most summarize.max_bullets",
            ),
            FieldSpec(
                "VERIFY",
                "choice",
                default="mark",
                choices=("mark", "strict"),
                doc="mark: a bullet whose quote is not in the text is UNVERIFIED; strict: left out",
            ),
        ),
        inline="TEXT",
        replies=SUMMARIZE_REPLIES,
        example=SUMMARIZE_EXAMPLE,
        doc="bullet points of TEXT or of the page at URL",
        effects=READS_WEB,
    ),
]

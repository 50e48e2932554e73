"""The ``summarize`` op: bullets from TEXT, or from the page at URL (loaded like fetch).

TASK REQ:summarize IN:WEB OUT:SUMMARY
URL https://example.com/article
MAX_BULLETS 3

STATUS OK
SCOPE [example.com]
DATA bullets:3
BULLET "The first point."
BULLET "The second point."
BULLET "The third point."
METHOD extractive
CITE https://example.com/article "Article Title"
"""

from __future__ import annotations

import trio

from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import READS_WEB, Op
from csp_web.core.api.replies import Result, cite
from protocol import ErrorCode, Field

from ..services import WebServices, web_audit
from .filekeys import held
from .loading import load_for_op, op_deadline
from .services import PagesServices
from .summarize import summarize as make_summary


async def summarize(params: Params, ctx: OpContext, services: PagesServices) -> Result:
    """``MAX_BULLETS`` bullets (default summarize.default_bullets, at most max_bullets) of
    TEXT, of the page at URL or of the snapshot FILE_KEY names, exactly one of them; METHOD
    says how they were made."""
    config = services.config.summarize
    text, url = params.opt_text("TEXT"), params.opt_text("URL")
    key = params.opt_text("FILE_KEY")
    count = params.opt_integer("MAX_BULLETS") or config.default_bullets
    _check(text, url if key is None else key, count, services)
    if key is not None and url is not None:
        raise FieldError(ErrorCode.INVALID_FIELD, "give URL or FILE_KEY, not both")
    target = url or key or f"text:{len(text or '')}"  # never the text itself
    with web_audit(target) as notes:
        bucket = services.limits.bucket("summarize")  # seed 001: web_summarize 20/min
        if bucket is not None:
            await bucket.acquire(deadline=op_deadline(services))
        fields: list[Field] = []
        scope: tuple[str, ...] = ()
        if url is not None or key is not None:
            page = await held(services, key) if key else await load_for_op(services, url or "")
            notes.cache_hit = page.cached
            text = _page_text(page.kind, page.markdown or page.text, page.content_type, target)
            scope, fields = (page.host,), [cite(page.url, page.title)]
        assert text is not None
        text = text[: config.max_text_chars]
        deadline_s = max(0.0, op_deadline(services) - trio.current_time())
        summary = await make_summary(
            services.client, config, text, count, deadline_s=deadline_s, pool=services.pool
        )
        notes.method = summary.method
        if not summary.bullets:
            raise OpError(ErrorCode.SUMMARIZE_FAILED, "no_sentences", scope=scope)
        bullets = [("BULLET", bullet) for bullet in summary.bullets]
        fields = [*bullets, ("METHOD", summary.method), *fields]
        return notes.attach(Result(f"bullets:{len(summary.bullets)}", scope, tuple(fields)))


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
    ReplyField("METHOD", "OK", "how it was made (model or extractive)"),
    ReplyField("CITE", "URL or FILE_KEY given", "the page (R-4)"),
    ReplyField("URL", "FAIL: unsupported_content", "the URL asked"),
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
        ),
        inline="TEXT",
        replies=SUMMARIZE_REPLIES,
        example=SUMMARIZE_EXAMPLE,
        doc="bullet points of TEXT or of the page at URL",
        effects=READS_WEB,
    ),
]

"""``REQ:research`` and ``REQ:result`` under IN:WEB: research as a job (seed 001's agent
run/result; ``run.py`` does the work).

    TASK REQ:research IN:WEB OUT:RESEARCH
    QUESTION "How do storm surges form?"

    STATUS OK
    SCOPE []
    DATA status:running
    JOB_ID rj_3f9a0c1d2e4b5a6c

    TASK REQ:result IN:WEB OUT:RESEARCH
    JOB_ID rj_3f9a0c1d2e4b5a6c
    WAIT_MS 20000
    INCLUDE_STEPS true

    STATUS OK
    SCOPE [coast.example,sea.example]
    DATA status:done,bullets:2,sources:2
    JOB_ID rj_3f9a0c1d2e4b5a6c
    QUESTION "How do storm surges form?"
    METHOD heuristic
    BULLET "Storm surges add wind-driven water to a spring tide. [1]"
    BULLET "Low coasts flood when the surge meets high tide. [2]"
    QUOTE 1 fk_k2n3r5t7v2x4z6b3 @41-96 sha256:6e1f… "Storm surges add wind-driven water to a…"
    UNVERIFIED 2
    VERIFIED 1
    UNVERIFIED_COUNT 1
    CITE https://coast.example/surges "Storm surges"
    CITE https://sea.example/tides "Tides"
    STEP search "How do storm surges form?" ok ms:41
    STEP fetch https://coast.example/surges ok ms:120

A bullet's ``[n]`` names the n-th CITE line. ``QUOTE <n>`` is bullet n's support: the
fileKey of the source it was found in (the snapshot is held, ``cache.fetch_ttl_s``; ``save``
keeps it 30 days) and the span of that stored text; a bullet whose quote is in no source it
cites is ``UNVERIFIED <n>``, or left out when the job was started with ``VERIFY strict``.
``WAIT_MS`` waits for the job to end within the task's deadline; a job still running answers
``DATA status:running``, with INCLUDE_STEPS the steps finished so far (its progress). Each
source is read within a fetch's time (``guard.timeout_s``); a job whose limit
(``research.job_timeout_s``) cut sources answers PARTIAL ``research_failed:timeout`` from
those it read, naming each one not read (``SOURCE_ERROR``), and fails with that error when
it read none. A failed job answers FAIL with its error; one cancelled at shutdown
``shutting_down`` with JOB_STATUS cancelled, also after the daemon restarted (for
``research.job_ttl_s``: kept.py); a job of another peer, one expired or never made is
``unknown_research_job``.
"""

from __future__ import annotations

import json

import trio

from csp_web.core.api.context import OpContext
from csp_web.core.api.deadlines import work_deadline
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField
from csp_web.core.api.ops import READS_LOCAL, Effects, Op
from csp_web.core.api.replies import Result, cite, with_budget
from protocol import ErrorCode, Field, Status

from ..docs.board import owner
from ..pages.quotes import support_fields
from ..search import domain
from ..services import WebServices
from .jobs import Job
from .kept import kept_job
from .run import TIMEOUT, start_job
from .services import ResearchServices

QUESTION_MAX_CHARS = 400  # a search query's cap (Brave's q)


async def research(params: Params, ctx: OpContext, services: ResearchServices) -> Result:
    """Start a research job for QUESTION; the reply names it (JOB_ID)."""
    config = services.config.docs.research
    sources = params.opt_integer("MAX_SOURCES") or config.default_sources
    bullets = params.opt_integer("MAX_BULLETS") or config.default_bullets
    if sources > config.max_sources:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_SOURCES above {config.max_sources}")
    if bullets > config.max_bullets:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_BULLETS above {config.max_bullets}")
    services.board.turn(ctx.peer, services.config.docs.board)
    question = " ".join(params.text("QUESTION").split())
    job = start_job(
        services,
        ctx.services.outbox,
        owner(ctx.peer),
        question,
        sources=sources,
        bullets=bullets,
        strict=params.text("VERIFY") == "strict",
    )
    return Result("status:running", (), (("JOB_ID", job.job_id),))


async def result(params: Params, ctx: OpContext, services: ResearchServices) -> Result:
    """The job's status, or its answer once done; FAIL with its error once failed."""
    services.board.turn(ctx.peer, services.config.docs.board)
    job = await _job(services, params.text("JOB_ID"), owner(ctx.peer))
    wait_ms = params.integer("WAIT_MS")
    if wait_ms:
        with trio.move_on_at(min(trio.current_time() + wait_ms / 1000, work_deadline())):
            await job.done.wait()
    steps = _steps(job) if params.flag("INCLUDE_STEPS") else []
    if job.status == "running":
        return with_budget(
            Result("status:running", (), (("JOB_ID", job.job_id), *steps)), job.budget
        )
    if job.budget is not None and job.budget.exhausted and not job.answer:  # what it did: steps
        fields = (("JOB_ID", job.job_id), ("JOB_STATUS", job.status), *steps)
        return with_budget(Result(f"status:{job.status}", (), fields), job.budget)
    if job.error is not None:
        error = job.error
        own = error.code is ErrorCode.RESEARCH_FAILED
        detail = error.detail if own else f"{error.code}:{error.detail}"
        raise OpError(
            ErrorCode.RESEARCH_FAILED,
            detail,
            fields=(("JOB_ID", job.job_id), ("JOB_STATUS", job.status), *steps),
        )
    return with_budget(_answer(job, steps), job.budget)


async def _job(services: ResearchServices, job_id: str, peer: str) -> Job:
    """The job held, or one a daemon before this one cancelled at shutdown (kept.py)."""
    try:
        return services.jobs.get(job_id, peer, services.config.docs.research)
    except OpError as unknown:
        kept = await kept_job(services, job_id, peer)
        if kept is None:
            raise unknown from None
        return kept


def _answer(job: Job, steps: list[Field]) -> Result:
    fields: list[Field] = [("JOB_ID", job.job_id), ("QUESTION", job.question)]
    fields.append(("METHOD", job.method))
    if job.model_error is not None:
        fields.append(("MODEL_ERROR", job.model_error))
    for finding in job.answer:
        numbers = "".join(f"[{n}]" for n in finding.sources)
        fields.append(("BULLET", f"{finding.text} {numbers}"))
    fields += support_fields(job.supports, job.dropped)
    fields += [cite(url, title) for url, title in job.citations]
    scope = tuple(dict.fromkeys(domain(url) for url, _ in job.citations))
    data = f"status:done,bullets:{len(job.answer)},sources:{len(job.citations)}"
    if job.timed_out:  # its limit cut sources: the answer rests on those it read
        unread = [("SOURCE_ERROR", f"{url} {why}") for url, why in job.source_errors]
        error = (ErrorCode.RESEARCH_FAILED, TIMEOUT)
        return Result(data, scope, (*fields, *unread, *steps), Status.PARTIAL, error)
    if not job.answer:  # sources read, yet no sentence to answer with: never an empty OK
        why = "no_verified_bullets" if job.dropped else "no_sentences"
        error = (ErrorCode.EMPTY_CONTENT, why)
        return Result(data, scope, (*fields, *steps), Status.PARTIAL, error)
    return Result(data, scope, (*fields, *steps))


def _steps(job: Job) -> list[Field]:
    """``STEP <kind> <target> <outcome> ms:<n>``; a search's target is its quoted query."""
    lines: list[Field] = []
    for step in job.steps:
        target = (
            json.dumps(step.target, ensure_ascii=False) if step.kind != "fetch" else step.target
        )
        lines.append(("STEP", f"{step.kind} {target} {step.outcome} ms:{step.elapsed_ms}"))
    return lines


RESEARCH_REPLIES = (ReplyField("JOB_ID", "OK", "the job, for result"),)
RESEARCH_EXAMPLE = Example(
    ('TASK REQ:research IN:WEB OUT:RESEARCH\nID 1\nQUESTION "north sea tides"\nMAX_SOURCES 1\n'),
    ("STATUS OK\nID 1\nSCOPE []\nDATA status:running\nJOB_ID rj_xxxxxxxxxxxxxxxx\n"),
)

RESULT_REPLIES = (
    ReplyField("JOB_ID", "always", "the job"),
    ReplyField("JOB_STATUS", "FAIL", "the job's status"),
    ReplyField("QUESTION", "done", "the question asked"),
    ReplyField("METHOD", "done", "how the bullets were made (model or extractive)"),
    ReplyField("MODEL_ERROR", "done, when the model failed", "why; the bullets are extractive"),
    ReplyField(
        "BULLET", "done: one per bullet", "a finding and its source numbers [n]", repeat=True
    ),
    ReplyField(
        "QUOTE",
        "done: one per verified bullet",
        '<n> <fileKey> @<start>-<end> sha256:<hex> "<span>": bullet n\'s words in that '
        "source's stored text (code points, end exclusive; the hash is of that span)",
        repeat=True,
    ),
    ReplyField(
        "UNVERIFIED", "done: one per bullet whose quote was not found", "its number", "int", True
    ),
    ReplyField("VERIFIED", "done", "how many bullets carry a QUOTE", kind="int"),
    ReplyField(
        "UNVERIFIED_COUNT", "done", "bullets whose quote was not found (or left out)", kind="int"
    ),
    ReplyField("CITE", "done: one per source", "the source (R-4), numbered in order", repeat=True),
    ReplyField(
        "SOURCE_ERROR",
        "PARTIAL research_failed:timeout: one per source tried and not read",
        "<url> <code>:<detail> (fetch_failed:timeout for one the job's limit cut)",
        repeat=True,
    ),
    ReplyField(
        "STEP",
        "INCLUDE_STEPS: one per finished search, fetch or model call (while running too)",
        "<kind> <target> <outcome> ms:<n>",
        repeat=True,
    ),
)
RESULT_EXAMPLE = Example(
    (
        "TASK REQ:result rj_xxxxxxxxxxxxxxxx IN:WEB OUT:RESEARCH\n"
        "ID 1\n"
        "WAIT_MS 20000\n"
        "INCLUDE_STEPS true\n"
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA status:done,bullets:4,sources:1\n"
        "JOB_ID rj_xxxxxxxxxxxxxxxx\n"
        'QUESTION "north sea tides"\n'
        "METHOD heuristic\n"
        'BULLET "The North Sea has two high tides every day, about twelve hours '
        'and twenty-five minutes apart. [1]"\n'
        'BULLET "Spring tides follow the new and the full moon; neap tides fall '
        'between them. [1]"\n'
        'BULLET "Tide tables give the times of high and low water for each port, '
        'and harbour masters publish them a year ahead. [1]"\n'
        "QUOTE 1 fk_xxxxxxxxxxxxxxxx @26-119 sha256:bc3c2d522b6bb6b528ff517e563cdf5cf01c4e07a9"
        '89dd1caed45434cab0245c "The North Sea has two high tides every day, about t…\n'
        "QUOTE 2 fk_xxxxxxxxxxxxxxxx @120-196 sha256:103d31b80e547229b25200a1c2254face35676ea7e"
        '866fb2556f679c00370b62 "Spring tides follow the new and the full moon; nea…\n'
        "QUOTE 3 fk_xxxxxxxxxxxxxxxx @198-308 sha256:0a8457f5b983d41b8932afb5c00dc38f4d8c6cb09a"
        '5e39cfe4ef34437d8c0c1d "Tide tables give the times of high and low water f…\n'
        "VERIFIED 4\n"
        "UNVERIFIED_COUNT 0\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
        'STEP search "north sea tides" ok ms:0\n'
        "STEP fetch https://origin.test/tides ok ms:0\n"
        "… 1 more BULLET\n"
        "… 1 more QUOTE\n"
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "research",
        "WEB",
        "RESEARCH",
        "web",
        research,
        (
            FieldSpec(
                "QUESTION", required=True, max_chars=QUESTION_MAX_CHARS, doc="what to find out"
            ),
            FieldSpec(
                "MAX_SOURCES",
                "int",
                minimum=1,
                doc="pages to read: default research.default_sources (3), at most max_sources (5)",
            ),
            FieldSpec(
                "MAX_BULLETS",
                "int",
                minimum=1,
                doc="default research.default_bullets (5), at most research.max_bullets (10)",
            ),
            FieldSpec(
                "VERIFY",
                "choice",
                default="mark",
                choices=("mark", "strict"),
                doc="mark: a bullet whose quote is in no source it cites is UNVERIFIED; strict: "
                "left out",
            ),
        ),
        inline="QUESTION",
        replies=RESEARCH_REPLIES,
        example=RESEARCH_EXAMPLE,
        doc="start a research job: search, read the best sources, answer in cited bullets",
        # Each call starts a new job; it only reads the web.
        effects=Effects(destructive=False),
    ),
    Op(
        "result",
        "WEB",
        "RESEARCH",
        "web",
        result,
        (
            FieldSpec("JOB_ID", required=True, doc="from research"),
            FieldSpec(
                "INCLUDE_STEPS",
                "bool",
                default=False,
                doc="add each finished search, fetch and model call, also while the job runs",
            ),
            FieldSpec(
                "WAIT_MS",
                "int",
                default=0,
                minimum=0,
                doc="wait this long for the job to end (within TIMEOUT_MS)",
            ),
        ),
        inline="JOB_ID",
        replies=RESULT_REPLIES,
        example=RESULT_EXAMPLE,
        doc="a research job's status, or its bullets and citations",
        effects=READS_LOCAL,
    ),
]

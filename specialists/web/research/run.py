"""Research jobs (seed 001's agent run/result): search, read the best sources concurrently,
answer in bullets that cite them.

    job = jobs.start(services, owner, question, sources=3, bullets=5)   # runs in the background
    await jobs.wait(job, until)                                          # or read job.status

A job searches (the search cache and backend chain, as ``REQ:search``), loads the top sources
at once through ``pages.load_page`` (the guard, robots.txt, the fetch cache and bucket), then
writes bullets: with ``research.llm_base_url`` set, an OpenAI-compatible chat model writes them
from the sources' text (``max_tokens`` and ``llm_timeout_s`` bound it); without one, or when
the model fails, they are the sources' most relevant sentences (``heuristic``, as seed 001's
web_summarize names it). Every bullet ends with the numbers of the sources it rests on, ``[1]``;
the numbers are the positions in the citation list. Each bullet's quote (the model's claim,
or the heuristic's own sentence) is then looked for in the held snapshots of the sources it
cites, first found first: a bullet found carries that source's fileKey and span, one not
found is unverified, or left out under VERIFY strict. Each search and fetch is a step with
its outcome and time.

Jobs live in the daemon's memory: each for ``research.job_ttl_s`` after it ends, at most
``research.max_jobs`` at once, each bounded by ``research.job_timeout_s``; at shutdown the
running ones are cancelled, and each ends with status ``cancelled`` (logged, its research_job
record written, and its end kept for ``result`` after a restart: kept.py).
"""

from __future__ import annotations

import functools
import logging
import re
import time

import trio

from csp_web.core.api.audit import redact_userinfo
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import Outbound
from csp_web.core.api.records import json_record, make_write
from protocol import ErrorCode

from ..pages.fetch_fields import empty_error
from ..pages.filekeys import content_of, file_key, hold
from ..pages.loaders import load as load_through_loaders
from ..pages.quotes import Folded, Span, fold, is_markdown, support_span
from ..pages.summarize import clip, own_words, summarize_extractive
from ..search import SearchQuery
from .jobs import Finding, Job, Step
from .kept import keep_cancelled
from .llm import LlmFailure, Source, write_with_model
from .services import ResearchServices

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+")


def start_job(
    services: ResearchServices,
    outbox: Outbound,
    owner: str,
    question: str,
    *,
    sources: int,
    bullets: int,
    strict: bool = False,
) -> Job:
    """Start researching ``question`` for ``owner``; see ``ResearchJobs.start`` for errors."""
    config = services.config.docs.research
    run = functools.partial(_run, services, outbox)
    return services.jobs.start(
        config, owner, question, run, sources=sources, bullets=bullets, strict=strict
    )


# The answer is written from what was read, so the search, the sources and the model stop
# this much before the job's limit: a quarter of it, at most 2 s (the heuristic and the quote
# check take milliseconds on max_sources * max_source_chars). Never less than the reserve
# ``work_deadline`` keeps (deadlines.py, at most 0.25 s), so the job's deadline comes first.
ANSWER_RESERVE_FRACTION = 0.25
MAX_ANSWER_RESERVE_S = 2.0
TIMEOUT = "timeout"  # research_failed's detail for a job its limit cut


async def _run(services: ResearchServices, outbox: Outbound, job: Job) -> None:
    limit_s = services.config.docs.research.job_timeout_s
    wall = time.monotonic()
    try:
        with trio.fail_after(limit_s):
            reserve_s = min(MAX_ANSWER_RESERVE_S, limit_s * ANSWER_RESERVE_FRACTION)
            await _research(services, job, trio.current_time() + limit_s - reserve_s)
        job.status = "done"
    except trio.TooSlowError:
        job.status, job.error = "failed", OpError(ErrorCode.RESEARCH_FAILED, TIMEOUT)
    except OpError as exc:
        job.status, job.error = "failed", exc
    except Exception:  # a bug: the job ends failed, the daemon goes on
        log.exception("research job %s failed", job.job_id)
        job.status, job.error = "failed", OpError(ErrorCode.INTERNAL_ERROR, job.job_id)
    except BaseException as exc:  # cancelled at shutdown: bare, or grouped out of a nursery
        _end_cancelled(job, exc)
        raise
    finally:
        job.ended = trio.current_time()
        if job.status == "cancelled":  # result answers so after a restart too, once ended
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await keep_cancelled(services, job, services.config.docs.research.job_ttl_s)
        job.done.set()
        with trio.CancelScope(shield=True), trio.move_on_after(1.0):
            await _record(outbox, job, time.monotonic() - wall)


def _end_cancelled(job: Job, exc: BaseException) -> None:
    """``job`` ended by ``exc``, which is no Exception: a cancellation (trio's strict
    exception groups wrap one raised in a nursery, ``_read_sources``'s) ends it
    ``cancelled``; anything else (KeyboardInterrupt) ``failed``."""
    grouped = isinstance(exc, BaseExceptionGroup) and exc.subgroup(trio.Cancelled) is not None
    if isinstance(exc, trio.Cancelled) or grouped:
        job.status = "cancelled"
        job.error = OpError(ErrorCode.SHUTTING_DOWN, "research job cancelled")
        log.info("research job %s cancelled at shutdown", job.job_id)
    else:
        job.status, job.error = "failed", OpError(ErrorCode.INTERNAL_ERROR, job.job_id)


async def _record(outbox: Outbound, job: Job, elapsed_s: float) -> None:
    """The job's ``research_job`` record, written when the job ends (after the op that
    started it has replied and been audited): question, final status, method, the sources
    read and those tried and not read (``<url> <code>:<detail>``)."""
    if job.error is not None:
        outcome = f"FAIL {job.error.code}"
    elif job.timed_out:
        outcome = f"PARTIAL {ErrorCode.RESEARCH_FAILED}"
    else:
        outcome = "OK"
    record = json_record(
        op="research",
        target=redact_userinfo(job.question),  # a URL's password in it stays out of memory
        outcome=outcome,
        status=job.status,
        job_id=job.job_id,
        method=job.method,
        sources=len(job.citations),
        source_errors=[f"{url} {why}" for url, why in job.source_errors],
        duration_ms=round(elapsed_s * 1000, 3),
    )
    try:
        await outbox.put(make_write("web", "research_job", "research-jobs", record, suffix=".json"))
    except OpError as exc:
        log.warning("research job %s: its record was not kept (%s)", job.job_id, exc.code)


async def _research(services: ResearchServices, job: Job, deadline: float) -> None:
    """Search, read, answer, all by ``deadline`` (the job's limit less the answer's reserve).
    Sources its deadline cut leave the job ``timed_out``: it answers from those it read, and
    fails research_failed:timeout when it read none."""
    from ..search.ops_search import Asked, ask  # the op module owns the search cache's shape

    asked = Asked(SearchQuery(job.question, min(job.sources * 2, 10)))
    began = time.monotonic()
    try:
        await ask(services, asked, False, deadline)
    except OpError as exc:  # refused before it ran (a budget with no search left): a step too
        job.steps.append(Step("search", job.question, f"{exc.code}:{exc.detail}", _ms(began)))
        raise
    outcome = "ok" if asked.error is None else f"{asked.error.code}:{asked.error.detail}"
    job.steps.append(Step("search", job.question, outcome, _ms(began)))
    if asked.error is not None:
        cut = trio.current_time() >= deadline  # by the job's limit, not the search's own
        raise OpError(
            ErrorCode.RESEARCH_FAILED, TIMEOUT if cut else f"search: {asked.error.detail}"
        )
    assert asked.answer is not None
    urls = [hit.url for hit in asked.answer.hits]
    sources = await _read_sources(services, job, urls, deadline)
    if not sources:
        detail = TIMEOUT if job.timed_out else "no source could be read"
        raise OpError(ErrorCode.RESEARCH_FAILED, detail)
    await _answer(services, job, sources, deadline)


async def _read_sources(
    services: ResearchServices, job: Job, urls: list[str], deadline: float
) -> list[Source]:
    """The first ``job.sources`` URLs that load with text, loaded concurrently, each within
    a fetch's time (``guard.timeout_s``) and ``deadline``; further URLs stand in for ones that
    fail, until ``deadline``. ``job.citations`` names those read, also when cancelled; a
    source that failed at ``deadline`` leaves the job ``timed_out``."""
    limit = services.config.docs.research.max_source_chars
    read: dict[str, Source] = {}
    try:
        for start in range(0, len(urls), job.sources):
            wanted = job.sources - len(read)
            batch = urls[start : start + wanted]
            if wanted <= 0 or not batch or trio.current_time() >= deadline:
                break
            began = time.monotonic()
            with trio.move_on_at(deadline):  # a stage past its own deadline is cut here
                async with trio.open_nursery() as nursery:
                    for url in batch:
                        nursery.start_soon(_read_one, services, job, url, deadline, read, limit)
            ended = {step.target for step in job.steps if step.kind == "fetch"}
            for url in batch:
                if url not in ended:
                    why = f"{ErrorCode.FETCH_FAILED}:{TIMEOUT}"
                    _failed(job, url, why, _ms(began), deadline)
    finally:
        job.citations = tuple((read[url].url, read[url].title) for url in urls if url in read)
    return [read[url] for url in urls if url in read][: job.sources]


async def _read_one(
    services: ResearchServices,
    job: Job,
    url: str,
    deadline: float,
    read: dict[str, Source],
    limit: int,
) -> None:
    began = time.monotonic()
    own = min(trio.current_time() + services.config.guard.timeout_s, deadline)  # as REQ:fetch
    try:
        page = await load_through_loaders(services, url, no_cache=False, deadline=own)
    except OpError as exc:
        _failed(job, url, f"{exc.code}:{exc.detail}", _ms(began), deadline)
        return
    if page.kind not in ("html", "text", "document"):
        why = f"unsupported_content:{page.content_type or 'unknown'}"
        _failed(job, url, why, _ms(began), deadline)
        return
    text = content_of(page)
    empty = empty_error(page, text)
    if empty is not None:  # empty_content, or no_text_layer for a scan or an encrypted PDF
        _failed(job, url, f"{empty[0]}:{empty[1]}", _ms(began), deadline)
        return
    key = file_key(page)
    await hold(services, key, page)  # so the quotes it supports can be checked after the job
    job.steps.append(Step("fetch", url, "ok", _ms(began)))
    read[url] = Source(page.url, page.title, text[:limit], key, is_markdown(page.kind))


def _failed(job: Job, url: str, why: str, elapsed_ms: int, deadline: float) -> None:
    """A source not read, and why; one that failed once ``deadline`` had come was cut by
    the job's limit."""
    job.steps.append(Step("fetch", url, why, elapsed_ms))
    job.source_errors.append((url, why))
    job.timed_out = job.timed_out or trio.current_time() >= deadline


async def _answer(
    services: ResearchServices, job: Job, sources: list[Source], deadline: float
) -> None:
    config = services.config.docs.research
    if config.llm_base_url is not None:
        began = time.monotonic()
        try:
            job.answer = await write_with_model(
                services.client, config, job.question, sources, job.bullets, deadline=deadline
            )
            job.method = "llm"
            job.steps.append(Step("model", config.llm_model, "ok", _ms(began)))
        except LlmFailure as failure:
            job.model_error = failure.reason
            job.steps.append(Step("model", config.llm_model, failure.reason, _ms(began)))
    if job.method != "llm":
        make = functools.partial(heuristic_answer, job.question, sources, job.bullets)
        job.answer = await trio.to_thread.run_sync(make, abandon_on_cancel=True)
    check = functools.partial(verified, job.answer, sources, strict=job.strict)
    job.answer, job.supports, job.dropped = await trio.to_thread.run_sync(
        check, abandon_on_cancel=True
    )


def verified(
    answer: tuple[Finding, ...], sources: list[Source], *, strict: bool
) -> tuple[tuple[Finding, ...], tuple[tuple[str, Span] | None, ...], int]:
    """The answer's bullets, each with its quote's (fileKey, span) in the first source it
    cites that holds it, else None; under ``strict`` only the found ones, and how many were
    left out. Each source is folded once."""
    folded = [fold(source.text, markdown=source.markdown) for source in sources]
    kept: list[tuple[Finding, tuple[str, Span] | None]] = []
    for finding in answer:
        support = _support(finding, sources, folded)
        if support is not None or not strict:
            kept.append((finding, support))
    return tuple(f for f, _ in kept), tuple(s for _, s in kept), len(answer) - len(kept)


def _support(
    finding: Finding, sources: list[Source], folded: list[Folded]
) -> tuple[str, Span] | None:
    for number in finding.sources:
        span = support_span(folded[number - 1], finding.text, finding.quote)
        if span is not None:
            return sources[number - 1].file_key, span
    return None


def heuristic_answer(question: str, sources: list[Source], bullets: int) -> tuple[Finding, ...]:
    """Each source's best sentences (the extractive summariser's), the ones sharing most
    words with the question first, taken in turn from the sources; deterministic."""
    terms = {word.lower() for word in _WORD.findall(question) if len(word) > 2}
    per_source: list[list[str]] = []
    for source in sources:
        picked = summarize_extractive(source.text, bullets)
        ranked = sorted(picked, key=lambda s: -len(terms & {w.lower() for w in _WORD.findall(s)}))
        per_source.append(ranked)
    answer: list[Finding] = []
    seen: set[str] = set()
    for depth in range(bullets):
        for number, ranked in enumerate(per_source, 1):
            if depth < len(ranked) and len(answer) < bullets and ranked[depth] not in seen:
                seen.add(ranked[depth])
                bullet = clip(ranked[depth])
                answer.append(Finding(bullet, (number,), own_words(bullet)))
    return tuple(answer)


def _ms(began: float) -> int:
    return round((time.monotonic() - began) * 1000)

"""The fallback chain: each configured backend in ``search.order`` until enough hits.

Per backend, in this order: its key must be set (else skipped), its circuit breaker must let
the call through, its rate bucket ``search:<name>`` must give a token, its monthly quota (if
any) must have room; then the request goes out through the guarded client. A 429 pauses the
bucket as long as Retry-After or X-RateLimit-Reset asks and counts as a failure.

The chain goes on to the next backend while it has fewer unique hits than asked, so a later
backend fills in what an earlier one lacked. Only the last backend that could still answer
waits for a rate token within the task's deadline; the ones before it are skipped at once,
since the next backend can answer sooner (seed 000's target: a search in under 2 s).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx
import trio

from csp_web.core.api import budget
from csp_web.core.api.errors import OpError
from csp_web.infra.ratelimit import MonthlyQuota, resume_at
from csp_web.infra.redis_ratelimit import SharedRateLimits
from csp_web.net import FetchResult, GuardConfig, check_url
from protocol import ErrorCode
from specialists.web.config import SearchConfig, SearchProvider
from specialists.web.search.breaker import Breaker

from . import brave, duckduckgo, filters, perplexity, rank, searxng
from .base import Backend, BackendFailure, Hit, SearchQuery
from .services import SearchServices, quota_path

log = logging.getLogger(__name__)

KINDS: dict[str, Backend] = {
    backend.kind: backend
    for backend in (brave.BACKEND, duckduckgo.BACKEND, searxng.BACKEND, perplexity.BACKEND)
}
# Skips that are configuration, not failures: they never decide the FAIL reason.
_NOT_TRIED = frozenset({"no_api_key", "not_configured"})
# A 429 naming no time: wait a minute, the span of seed 000's "10 req/min".
DEFAULT_PAUSE_S = 60.0


def breaker(services: SearchServices, name: str) -> Breaker:
    """Backend ``name``'s breaker, kept in ``services.breakers`` for the daemon's lifetime."""
    breakers = services.breakers
    if name not in breakers:
        config = services.config.search
        breakers[name] = Breaker(config.breaker_failures, config.breaker_reset_s)
    return breakers[name]


@dataclass
class Outcome:
    """What the chain got: hits in rank order, who answered, who failed and why."""

    hits: list[Hit] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    failures: list[tuple[str, BackendFailure]] = field(default_factory=list)
    total: int | None = None  # the first total a backend reported

    @property
    def tried_failures(self) -> list[tuple[str, BackendFailure]]:
        """Failures of backends that could have answered (not unconfigured or keyless)."""
        return [
            (name, failure) for name, failure in self.failures if failure.reason not in _NOT_TRIED
        ]

    def retry_after_s(self) -> float | None:
        """The soonest a rate-limited backend may answer again, if any said."""
        waits = [f.retry_after_s for _, f in self.failures if f.retry_after_s is not None]
        return min(waits) if waits else None

    def reason(self) -> str:
        """The FAIL detail: the one reason every tried backend failed with, else
        ``rate_limit_exceeded`` when all were rate limits, else ``all_backends_failed``."""
        failures = [failure for _, failure in self.tried_failures]
        if not failures:
            return "no_backend_available"
        reasons = {failure.reason for failure in failures}
        if len(reasons) == 1:
            return reasons.pop()
        if all(failure.rate for failure in failures):
            return "rate_limit_exceeded"
        return "all_backends_failed"


@dataclass(frozen=True)
class _Candidate:
    name: str
    provider: SearchProvider
    backend: Backend
    base_url: str
    key: str | None


async def run_chain(
    services: SearchServices, query: SearchQuery, *, deadline: float, mode: str = "fallback"
) -> Outcome:
    """Ask the backends in order until ``query.count`` unique hits or none is left
    (``fallback``), or all of them at once, fused (``fuse``, ``run_fused``). Hits the
    query's filters refuse are dropped before they count.

    ``deadline`` is trio time. Never raises for a backend's failure (the outcome lists them);
    cancellation propagates.
    """
    if mode == "fuse":
        return await run_fused(services, query, deadline=deadline)
    outcome = Outcome()
    candidates = _candidates(services.config.search, outcome)
    for index, candidate in enumerate(candidates):
        if len(rank.unique(outcome.hits)) >= query.count:
            break
        wait = index == len(candidates) - 1 and not outcome.hits
        answer = await _ask(services, candidate, query, outcome, deadline=deadline, wait=wait)
        if answer is not None:
            outcome.hits.extend(answer)
    return outcome


async def run_fused(services: SearchServices, query: SearchQuery, *, deadline: float) -> Outcome:
    """Ask every backend of ``search.order`` at once, each through its own breaker, rate
    bucket and quota (none waits for a token: a backend out of them drops out and is listed
    as failed), and fuse the lists that came back (``rank.fuse``), in ``order``'s order."""
    outcome = Outcome()
    candidates = _candidates(services.config.search, outcome)
    lists: dict[str, list[Hit]] = {}

    async def one(candidate: _Candidate) -> None:
        hits = await _ask(services, candidate, query, outcome, deadline=deadline, wait=False)
        if hits is not None:
            lists[candidate.name] = hits

    async with trio.open_nursery() as nursery:
        for candidate in candidates:
            nursery.start_soon(one, candidate)
    ordered = [(c.name, lists[c.name]) for c in candidates if c.name in lists]
    outcome.answered = [name for name, _ in ordered]  # order's order, not arrival's
    outcome.hits = rank.fuse(ordered)
    return outcome


async def _ask(
    services: SearchServices,
    candidate: _Candidate,
    query: SearchQuery,
    outcome: Outcome,
    *,
    deadline: float,
    wait: bool,
) -> list[Hit] | None:
    """One backend's hits that pass the filters, recorded as answered in ``outcome``; None
    (and the failure recorded) when it gave none."""
    try:
        if query.vertical not in candidate.backend.verticals:
            hint = f"{candidate.name} has no {query.vertical}"
            raise BackendFailure("not_available", hint, counts=False)
        hits, total = await _attempt(services, candidate, query, deadline=deadline, wait=wait)
    except BackendFailure as failure:
        if candidate.key:
            failure.redact(candidate.key)  # a backend may echo the key it was sent
        log.info("search backend %s failed: %s %s", candidate.name, failure.reason, failure.hint)
        outcome.failures.append((candidate.name, failure))
        return None
    outcome.answered.append(candidate.name)
    if outcome.total is None:
        outcome.total = total
    # De-duplicated first: a copy of a page without its date must not outlive the dated one.
    return filters.admitted(query, rank.unique(hits))


def _candidates(config: SearchConfig, outcome: Outcome) -> list[_Candidate]:
    """The backends of ``config.order`` that can be asked; the rest go to ``outcome``."""
    ready: list[_Candidate] = []
    for name in config.order:
        provider = config.providers.get(name)
        backend = KINDS.get(provider.kind) if provider is not None else None
        url = None
        if provider is not None and backend is not None:
            url = provider.base_url or backend.default_base_url
        if provider is None or backend is None or url is None:
            outcome.failures.append((name, BackendFailure("not_configured", counts=False)))
            continue
        key = os.environ.get(provider.api_key_env) if provider.api_key_env else None
        if (backend.needs_key or provider.api_key_env) and not key:
            hint = f"{provider.api_key_env or 'api_key_env'} is not set"
            outcome.failures.append((name, BackendFailure("no_api_key", hint, counts=False)))
            continue
        ready.append(_Candidate(name, provider, backend, url, key))
    return ready


async def _attempt(
    services: SearchServices,
    candidate: _Candidate,
    query: SearchQuery,
    *,
    deadline: float,
    wait: bool,
) -> tuple[list[Hit], int | None]:
    circuit = breaker(services, candidate.name)
    probe = circuit.admit()
    if probe is None:
        raise BackendFailure("circuit_open", f"{circuit.failures} failures in a row", counts=False)
    ok: bool | None = None
    try:
        hits = await _call(services, candidate, query, deadline=deadline, wait=wait)
        ok = True
        return hits
    except BackendFailure as failure:
        ok = False if failure.counts else None
        raise
    finally:
        circuit.settle(probe, ok)


async def _call(
    services: SearchServices,
    candidate: _Candidate,
    query: SearchQuery,
    *,
    deadline: float,
    wait: bool,
) -> tuple[list[Hit], int | None]:
    _check_base_url(candidate.base_url, services.config.guard)
    # Each backend request is charged, research's too (SPEC D-3), before the rate token and
    # the provider's monthly quota: a task out of searches spends none of either; a request
    # that then gets neither is not sent and gives its search back.
    await budget.take("searches")
    try:
        await _take_token(services, candidate.name, deadline if wait else trio.current_time())
        if candidate.provider.monthly_quota is not None:
            await _take_quota(services, candidate.name, candidate.provider.monthly_quota)
    except BackendFailure:
        await budget.settle("searches", 1, 0)
        raise
    request = candidate.backend.build(query, candidate.base_url, candidate.key)
    budget_s = min(deadline - trio.current_time(), services.config.guard.timeout_s)
    try:
        result = await services.client.fetch(
            request.url,
            method=request.method,
            headers=request.headers,
            content=request.content,
            credentials_headers=request.secret_headers,
            follow_with_credentials=False,
            deadline_s=max(0.0, budget_s),
        )
    except OpError as exc:
        reason = "timeout" if exc.detail == "timeout" else str(exc.code)
        raise BackendFailure(reason, f"{exc.code}:{exc.detail}") from None
    if result.status_code == 429:
        raise await _too_many_requests(services, candidate.name, result.headers)
    hits = await _parsed(services, candidate.backend, result, deadline)
    total = candidate.backend.total(result) if candidate.backend.total is not None else None
    return hits, total


async def _parsed(
    services: SearchServices, backend: Backend, result: FetchResult, deadline: float
) -> list[Hit]:
    """``backend.parse`` of ``result`` in the worker pool: parsing a result page (JSON, or
    HTML, and guessing an undeclared charset) is CPU work. The headers stay in the daemon;
    a worker that died or ran past ``deadline`` is this backend's failure ``worker_failed``,
    not counted against its circuit (the backend answered). Any other exception the parse
    raised is an answer it could not read: ``bad_response``, its traceback logged, and the
    chain goes on to the next backend (one backend's odd answer must not end the search)."""
    bare = dataclasses.replace(result, headers=httpx.Headers())
    parse = functools.partial(backend.parse, bare)
    try:
        return await services.pool.run(
            parse, deadline=deadline, shape=list[Hit], raises=(BackendFailure,)
        )
    except OpError as exc:
        if exc.code is not ErrorCode.WORKER_FAILED:
            raise
        raise BackendFailure(exc.code.value, exc.detail, counts=False) from None
    except BackendFailure:
        raise
    except Exception:
        log.exception("search backend %s: its parse failed on an answer", backend.kind)
        raise BackendFailure("bad_response", "an answer its parser could not read") from None


def _check_base_url(base_url: str, guard: GuardConfig) -> None:
    """The configured URL through the gate before a backend's ``build`` parses it; a refusal
    is our own configuration's fault, so it does not count against the backend's circuit."""
    try:
        check_url(base_url, guard)
    except OpError as exc:
        raise BackendFailure(str(exc.code), f"{exc.code}:{exc.detail}", counts=False) from None


async def _take_token(services: SearchServices, name: str, until: float) -> None:
    bucket = services.limits.bucket(f"search:{name}")
    if bucket is None:
        return
    try:
        await bucket.acquire(deadline=until)
    except OpError as exc:
        retry = dict(exc.fields).get("RETRY_AFTER")
        raise BackendFailure(
            "rate_limit_exceeded",
            f"local rate limit search:{name}",
            counts=False,
            rate=True,
            retry_after_s=float(retry) if retry else None,
        ) from None


async def _take_quota(services: SearchServices, name: str, limit: int) -> None:
    # MonthlyQuota reads and rewrites one file; concurrent searches take turns.
    month = datetime.datetime.now(datetime.UTC).strftime("%Y-%m")
    if isinstance(services.limits, SharedRateLimits):  # the fleet's count, on Redis
        try:
            await services.limits.quota(f"search:{name}", limit).take(month)
        except OpError as exc:
            raise BackendFailure(
                "rate_limit_exceeded", exc.detail, counts=False, rate=True
            ) from None
        return
    lock = services.quota_lock
    quota = MonthlyQuota(quota_path(services), f"search:{name}", limit)
    async with lock:
        try:
            await trio.to_thread.run_sync(quota.take, month)
        except OpError:  # MonthlyQuota's only error: the month is spent
            hint = f"monthly quota of {limit} spent"
            raise BackendFailure("rate_limit_exceeded", hint, counts=False, rate=True) from None


async def _too_many_requests(
    services: SearchServices, name: str, headers: Mapping[str, str]
) -> BackendFailure:
    now = trio.current_time()
    resume = resume_at(headers, now=now, wall=time.time())
    if resume is None:
        resume = now + DEFAULT_PAUSE_S
    bucket = services.limits.bucket(f"search:{name}")
    if bucket is not None:
        await bucket.pause(resume)  # every daemon's, when Redis holds the bucket
    return BackendFailure("rate_limit_exceeded", "HTTP 429", rate=True, retry_after_s=resume - now)

"""What outlives the daemon of a research job cut at shutdown: its status, error and steps,
kept in the response cache (on disk, or Redis) for ``research.job_ttl_s``, so that ``result``
after a restart answers what its research_job record says (``cancelled``) rather than
``unknown_research_job``. A finished job's answer is not kept: jobs live in the daemon's
memory (jobs.py)."""

from __future__ import annotations

import logging
from typing import Any, Literal

from csp_web.core.api.audit import redact_userinfo
from csp_web.core.api.errors import OpError
from protocol import ErrorCode

from ..pages.services import PagesServices
from .jobs import Job, Step

log = logging.getLogger(__name__)

NAMESPACE = "research_job"
_CODES = {str(code): code for code in ErrorCode}
_KINDS: dict[str, Literal["search", "fetch", "model"]] = {
    "search": "search",
    "fetch": "fetch",
    "model": "model",
}


async def keep_cancelled(services: PagesServices, job: Job, ttl_s: float) -> None:
    """Keep ``job`` (ended ``cancelled``) for ``ttl_s`` seconds; a cache that fails is logged,
    as the job's record still says how it ended. Its question and its steps' targets (the
    search query, the URLs read) are kept as its record has them, each URL's userinfo
    written ``***@`` (``redact_userinfo``): no password outlives the daemon on disk."""
    assert job.error is not None
    value = {
        "owner": job.owner,
        "question": redact_userinfo(job.question),
        "sources": job.sources,
        "bullets": job.bullets,
        "status": job.status,
        "code": str(job.error.code),
        "detail": job.error.detail,
        "steps": [[s.kind, redact_userinfo(s.target), s.outcome, s.elapsed_ms] for s in job.steps],
    }
    try:
        await services.cache.set(NAMESPACE, job.job_id, value, ttl_s=ttl_s)
    except Exception:  # the cache is an optimisation; the record is the job's trace
        log.warning("research job %s: its cancellation was not kept", job.job_id, exc_info=True)


async def kept_job(services: PagesServices, job_id: str, owner: str) -> Job | None:
    """``owner``'s job ``job_id`` as a daemon before this one ended it, or None."""
    value = await services.cache.get(NAMESPACE, job_id)
    if not isinstance(value, dict) or value.get("owner") != owner:
        return None
    try:
        return _job(job_id, value)
    except (KeyError, TypeError, ValueError):  # another shape: not this version's
        return None


def _job(job_id: str, value: dict[str, Any]) -> Job:
    job = Job(job_id, value["owner"], value["question"], value["sources"], value["bullets"])
    if value["status"] != "cancelled":
        raise ValueError(value["status"])
    job.status, job.budget = "cancelled", None
    job.error = OpError(_CODES[value["code"]], str(value["detail"]))
    for kind, target, outcome, elapsed_ms in value["steps"]:
        job.steps.append(Step(_KINDS[kind], str(target), outcome, int(elapsed_ms)))
    job.done.set()
    return job

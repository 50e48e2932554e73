"""The research jobs table (``run.py`` runs the jobs): each job's state, where it runs,
how long it is kept. Jobs live in the daemon's memory only."""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import trio

from csp_web.core.api.budget import TaskBudget, running
from csp_web.core.api.errors import OpError
from protocol import ErrorCode
from specialists.web.docs.config import ResearchConfig

from ..pages.quotes import Span

Status = Literal["running", "done", "failed", "cancelled"]


@dataclass(frozen=True)
class Step:
    """One search or fetch the job made: its target, outcome (``ok`` or an error) and time."""

    kind: Literal["search", "fetch", "model"]
    target: str
    outcome: str
    elapsed_ms: int


@dataclass(frozen=True)
class Finding:
    """One bullet of an answer: its text, the numbers of the sources it rests on (positions
    in the citation list) and the words of a source it claims to quote."""

    text: str
    sources: tuple[int, ...]
    quote: str


@dataclass
class Job:
    """One research job; ``done`` is set when it leaves ``running``."""

    job_id: str
    owner: str
    question: str
    sources: int
    bullets: int
    status: Status = "running"
    method: str = "heuristic"
    strict: bool = False  # VERIFY strict: bullets whose quote is not found are left out
    answer: tuple[Finding, ...] = ()
    supports: tuple[tuple[str, Span] | None, ...] = ()  # per bullet: (fileKey, span) found
    dropped: int = 0  # bullets left out unverified (strict)
    citations: tuple[tuple[str, str | None], ...] = ()  # (url, title)
    steps: list[Step] = field(default_factory=list)
    source_errors: list[tuple[str, str]] = field(default_factory=list)  # (url, code:detail)
    timed_out: bool = False  # its limit cut sources: done answers PARTIAL from those read
    error: OpError | None = None
    model_error: str | None = None
    started: float = 0.0  # trio time
    ended: float | None = None
    done: trio.Event = field(default_factory=trio.Event)
    budget: TaskBudget | None = field(default_factory=running)  # the research frame's (D-3)


class ResearchJobs:
    """The jobs table and the nursery jobs run in (``serve``, started by the daemon)."""

    def __init__(self) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._nursery: trio.Nursery | None = None

    async def serve(
        self, port: object, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run jobs until cancelled (WEB's background task); cancelling
        cancels every running job."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def start(
        self,
        config: ResearchConfig,
        owner: str,
        question: str,
        run: Callable[[Job], Awaitable[None]],
        *,
        sources: int,
        bullets: int,
        strict: bool = False,
    ) -> Job:
        """A new running job, ``run(job)`` in the jobs' nursery; raises OpError(NOT_AVAILABLE)
        without a running nursery and OpError(BUSY) when ``max_jobs`` are held and none has
        ended."""
        if self._nursery is None:
            raise OpError(ErrorCode.NOT_AVAILABLE, "research jobs are not running")
        self._make_room(config)
        job = Job(f"rj_{secrets.token_hex(8)}", owner, question, sources, bullets, strict=strict)
        job.started = trio.current_time()
        self._jobs[job.job_id] = job
        self._nursery.start_soon(run, job)
        return job

    def get(self, job_id: str, owner: str, config: ResearchConfig) -> Job:
        """``owner``'s job ``job_id``; raises OpError(UNKNOWN_RESEARCH_JOB) for one that is
        not held (never made, expired, or another peer's)."""
        self._expire(config)
        job = self._jobs.get(job_id)
        if job is None or job.owner != owner:
            raise OpError(ErrorCode.UNKNOWN_RESEARCH_JOB, job_id, fields=(("JOB_ID", job_id),))
        return job

    def _make_room(self, config: ResearchConfig) -> None:
        self._expire(config)
        if len(self._jobs) < config.max_jobs:
            return
        ended = [job_id for job_id, job in self._jobs.items() if job.status != "running"]
        if not ended:
            raise OpError(ErrorCode.BUSY, f"{config.max_jobs} research jobs running")
        del self._jobs[ended[0]]

    def _expire(self, config: ResearchConfig) -> None:
        now = trio.current_time()
        for job_id in [
            j.job_id
            for j in self._jobs.values()
            if j.ended is not None and now - j.ended >= config.job_ttl_s
        ]:
            del self._jobs[job_id]

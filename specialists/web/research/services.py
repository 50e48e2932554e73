"""What the research product uses of the web specialist's services: search's (a job searches,
then reads the sources as pages) and its own jobs table."""

from __future__ import annotations

from typing import Protocol

from ..search.services import SearchServices
from .jobs import ResearchJobs


class ResearchServices(SearchServices, Protocol):
    """The research and result ops and the jobs they start read only these."""

    jobs: ResearchJobs  # the jobs, each in the table's own nursery

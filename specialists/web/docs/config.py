"""Settings of the document and research ops (issue 14): many-at-once limits, the announcement
board, the File Cabinet, research jobs and the Firecrawl fetch backend.

Frozen dataclasses with units in the names, as ``csp_web.config``; they hang under
``web.docs`` and ``config.yaml`` lists every one with its default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class BoardConfig:
    """The announcement board: recent fetches per peer, without their content."""

    ttl_turns: int = 5  # seed 004: "Announcement Board ... TTL: 5 turns"
    max_entries: int = 50  # per peer; the oldest entry goes first


@dataclass(frozen=True)
class CabinetConfig:
    """The File Cabinet: fileKey contents kept in the Memory Specialist, and written to files."""

    ttl_s: float = 30 * 86400.0  # seed 004: "File Cabinet ... TTL: 30 days"
    max_content_chars: int = 200_000  # one saved document; the memory write stays one frame
    memory_timeout_s: float = 5.0  # one write or read at the Memory Specialist
    max_file_bytes: int = 1024 * 1024  # write_file: seed 001's 1 MB download cap


@dataclass(frozen=True)
class ResearchConfig:
    """``REQ:research``: how many sources, how long jobs live, the optional model."""

    default_sources: int = 3  # seed 004: "Background: Firecrawl top 3"
    max_sources: int = 5
    max_source_chars: int = 8000  # per source given to the summariser (seed 000: 2000 tokens)
    default_bullets: int = 5  # as summarize
    max_bullets: int = 10
    max_jobs: int = 32  # jobs held at once, running or finished
    job_ttl_s: float = 3600.0  # a finished job's result is kept this long
    job_timeout_s: float = 120.0  # one job's search, fetches and answer
    llm_base_url: str | None = None  # an OpenAI-compatible endpoint; null = heuristic answers
    llm_model: str = "gpt-4o-mini"
    llm_api_key_env: str | None = None
    llm_max_tokens: int = 600  # the answer's token budget (max_tokens)
    llm_timeout_s: float = 30.0


@dataclass(frozen=True)
class FirecrawlConfig:
    """Firecrawl's scrape API as a fetch backend (seed 004); off while ``base_url`` is null."""

    base_url: str | None = None  # e.g. https://api.firecrawl.dev
    api_key_env: str = "FIRECRAWL_API_KEY"
    # "fallback": only when the direct load fails; "always": every fetch goes through it.
    mode: Literal["fallback", "always"] = "fallback"
    timeout_ms: int = 30_000  # Firecrawl's own scrape timeout, sent in the request


@dataclass(frozen=True)
class DocsConfig:
    max_queries: int = 5  # QUERY values per search
    max_urls: int = 5  # URL values per fetch
    board: BoardConfig = field(default_factory=BoardConfig)
    cabinet: CabinetConfig = field(default_factory=CabinetConfig)
    research: ResearchConfig = field(default_factory=ResearchConfig)
    firecrawl: FirecrawlConfig = field(default_factory=FirecrawlConfig)

    def __post_init__(self) -> None:
        if self.research.default_sources > self.research.max_sources:
            raise ValueError("research.default_sources: above research.max_sources")

"""The web specialist's own section (``web``): guard, cache, search, fetch, APIs, summaries,
documents. The guard, the cache and the TLS trust are shared infrastructure's settings
(csp_web/config: ``GuardConfig``, ``CacheConfig``, ``TlsConfig``) that this section holds
where config.yaml has always had them; the core finds them by their class
(``shared_section``), and this section's credentials through ``NamesSecrets``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from csp_web.config import (
    CacheConfig,
    Config,
    ConfigError,
    GuardConfig,
    TlsConfig,
    proxy_address,
    section_of,
)
from csp_web.infra.workers import MAX_WORKERS, cores
from specialists.web.docs.config import DocsConfig

SECTION = "web"


@dataclass(frozen=True)
class RateConfig:
    """A token bucket: ``per_minute`` tokens refill continuously up to ``burst``."""

    per_minute: float
    burst: int


@dataclass(frozen=True)
class SearchProvider:
    """One search backend. Secrets are read from the environment variable ``api_key_env``."""

    kind: Literal["brave", "duckduckgo", "searxng", "perplexity"]
    base_url: str | None = None  # default per kind; required for searxng
    api_key_env: str | None = None
    monthly_quota: int | None = None
    rate: RateConfig = field(default_factory=lambda: RateConfig(10, 10))  # seed 000: 10/min


def _default_providers() -> dict[str, SearchProvider]:
    return {
        # seed 000: Brave's free tier, 1,000 requests a month at 10 a minute.
        "brave": SearchProvider("brave", api_key_env="BRAVE_API_KEY", monthly_quota=1000),
        "duckduckgo": SearchProvider("duckduckgo"),  # seed 001: no key needed
    }


@dataclass(frozen=True)
class SearchConfig:
    # Tried in order; a provider whose key is unset is skipped.
    order: tuple[str, ...] = ("brave", "duckduckgo")
    providers: dict[str, SearchProvider] = field(default_factory=_default_providers)
    default_results: int = 5  # seed 000: "Max 5 results per query (configurable)"
    max_results: int = 10  # seed 003: count max 10
    breaker_failures: int = 3  # consecutive failures that open a provider's circuit
    breaker_reset_s: float = 60.0
    # seed 004 prefetches the top 3 results into the fetch cache; off by default here.
    prefetch_top: int = field(default=0, metadata={"zero_ok": True})
    # Seed 000's "auto-deduplicate domains": results a domain may fill before other domains
    # have had theirs (more of it fill in when fewer results exist); MAX_PER_DOMAIN per task.
    max_per_domain: int = 1
    # Issue 27: fallback asks ``order`` in turn until enough hits (seed 000's chain); fuse
    # asks all at once and merges by reciprocal rank fusion (each within its rate and quota).
    mode: Literal["fallback", "fuse"] = "fallback"


@dataclass(frozen=True)
class FetchConfig:
    default_max_chars: int = 8000  # seed 000: "Max 2000 tokens per fetch (~8000 chars)"
    max_chars_cap: int = 50_000  # seed 001: "Maximum text extraction: 50,000 characters"
    rate: RateConfig = field(default_factory=lambda: RateConfig(20, 20))  # seed 001: 20/min
    # Issue 24: a page built by script (an app shell) is rendered in the browser's Chromium.
    # auto: when the HTML looks like one (and Chromium is there; without it, as never);
    # never: the HTML as served; always: every HTML page rendered (FAIL without Chromium).
    render: Literal["auto", "never", "always"] = "auto"
    # Issue 24: a PDF's pages read when MAX_PAGES is not given, and the most it may ask; a
    # 100-page report is about 300,000 chars, six times max_chars_cap: enough to page through.
    max_pages: int = 100
    max_pages_cap: int = 1000
    # A document reader's worker process (specialists/web/pages/documents.py): its address
    # space (a flate bomb in a PDF meets it, not the daemon; 256 MiB reads every fixture) and
    # its CPU time (bench/formats.py reads about 200 pages/s, so 1000 pages fit with room).
    reader_memory_bytes: int = 1 << 30
    reader_cpu_s: int = 30
    # What one document may become (specialists.formats.Limits, whose defaults these are): the
    # rows of a sheet or CSV (the header included: 1,000 rows of a few cells are about 100,000
    # chars, twice max_chars_cap), the entries of a feed (200: more than the 100 or so items a
    # busy feed keeps), and the Markdown's characters (5,000,000: the worker's answer, at most
    # 4 bytes a character, stays under its 24 MB output cap, past which it is too_large).
    max_rows: int = 1_000
    max_entries: int = 200
    max_document_chars: int = 5_000_000
    # The body cap for a response the reader table serves (PDF, office files, sheets, feeds),
    # on the wire and decoded; HTML and every other body keep guard.max_body_bytes. 32 MiB is
    # the largest PDF Anthropic's and OpenAI's model APIs take as one file, so a document an
    # agent could hand a model reads here; a 50 MB scan or book stays too_large. The daemon
    # holds such a body (and the copy it pipes to the reader's worker) per document in flight.
    max_document_bytes: int = 32 << 20


@dataclass(frozen=True)
class ApiConfig:
    """A configured API for ``REQ:api``; its credential comes from ``auth_env``."""

    base_url: str
    auth_env: str | None = None
    auth_header: str = "Authorization"
    auth_scheme: str = "Bearer"
    headers: dict[str, str] = field(default_factory=dict)  # fixed, non-secret headers
    rate: RateConfig = field(default_factory=lambda: RateConfig(60, 10))
    # seed 000: "Default TTL: 5 minutes"; 0 caches nothing (an API whose answers must be fresh)
    cache_ttl_s: float = field(default=300.0, metadata={"zero_ok": True})


def _default_apis() -> dict[str, ApiConfig]:
    return {
        "github": ApiConfig(
            "https://api.github.com/",
            auth_env="GITHUB_TOKEN",
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"},
        ),
        "openai": ApiConfig("https://api.openai.com/v1/", auth_env="OPENAI_API_KEY"),
    }


@dataclass(frozen=True)
class SummarizeConfig:
    default_bullets: int = 5
    max_bullets: int = 20
    max_text_chars: int = 200_000
    # An OpenAI-compatible chat endpoint; unset means extractive, deterministic summaries.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key_env: str | None = None
    rate: RateConfig = field(default_factory=lambda: RateConfig(20, 20))  # seed 001: 20/min


@dataclass(frozen=True)
class WebConfig:
    guard: GuardConfig = field(default_factory=GuardConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    fetch: FetchConfig = field(default_factory=FetchConfig)
    apis: dict[str, ApiConfig] = field(default_factory=_default_apis)
    summarize: SummarizeConfig = field(default_factory=SummarizeConfig)
    docs: DocsConfig = field(default_factory=DocsConfig)  # specialists/web/docs/config.py
    tls: TlsConfig = field(default_factory=TlsConfig)
    # An HTTP forward proxy (http://host:port) every web request tunnels through with CONNECT
    # to the address the guard resolved and approved; companies require one for egress.
    proxy: str | None = None
    # Worker processes for extraction, document-free parsing and extractive summaries
    # (csp_web/infra/workers.py): None is the cores this process may use, 0 runs that work in
    # the daemon's threads (one core for the whole daemon, as before issue 26).
    workers: int | None = field(default=None, metadata={"zero_ok": True})

    def __post_init__(self) -> None:
        if self.proxy is not None:
            proxy_address(self.proxy)
        if self.workers is not None and not 0 <= self.workers <= MAX_WORKERS:
            raise ConfigError(f"workers: must be 0 to {MAX_WORKERS}")

    def worker_count(self) -> int:
        """The pool's size: ``workers``, or the cores this process may use when unset."""
        return cores() if self.workers is None else self.workers

    def egress_proxy(self) -> str | None:
        """``web.proxy`` (``csp_web.config.RoutesEgress``): the browser's egress too."""
        return self.proxy

    def secret_variables(self) -> tuple[str, ...]:
        """The environment variables its credentials are read from: search providers, APIs,
        the summariser's and research's models, Firecrawl (``csp_web.config.NamesSecrets``)."""
        names = [provider.api_key_env for provider in self.search.providers.values()]
        names += [api.auth_env for api in self.apis.values()]
        names += [self.summarize.llm_api_key_env, self.docs.research.llm_api_key_env]
        names += [self.docs.firecrawl.api_key_env]
        return tuple(name for name in names if name)


def web_section(config: Config) -> WebConfig:
    """The web's own section of ``config`` (its defaults if the file has none)."""
    return section_of(config, SECTION, WebConfig)

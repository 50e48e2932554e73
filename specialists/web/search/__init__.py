"""Web search behind one fallback chain: Brave's API, DuckDuckGo's HTML page, SearXNG's JSON,
Perplexity's search or chat API.

    outcome = await run_chain(services, SearchQuery("trio nursery", 5, "pw"), deadline=d)
    results = pick(outcome.hits, 5)

``base`` holds the shared types, one module per backend builds its request and parses its
answer (no I/O), ``chain`` sends them with rate limits, quotas and circuit breakers, and
``rank`` de-duplicates and chooses.
"""

from .base import BackendFailure, Hit, SearchQuery
from .breaker import Breaker
from .chain import Outcome, breaker, run_chain
from .rank import clean_url, domain, pick

__all__ = [
    "BackendFailure",
    "Breaker",
    "Hit",
    "Outcome",
    "SearchQuery",
    "breaker",
    "clean_url",
    "domain",
    "pick",
    "run_chain",
]

"""Web search behind one fallback chain (or all backends at once, fused): Brave's API,
DuckDuckGo's HTML page, SearXNG's JSON, Perplexity's search or chat API.

    outcome = await run_chain(services, SearchQuery("trio nursery", 5, "pw"), deadline=d)
    results = pick(outcome.hits, 5)

``base`` holds the shared types, one module per backend builds its request and parses its
answer (no I/O; ``dates`` reads their published dates), ``chain`` sends them with rate
limits, quotas and circuit breakers, ``filters`` holds the hits to the task's filters, and
``rank`` de-duplicates, fuses and chooses. The op (``ops_search``) reads its fields with
``task_query``, declares them in ``declared`` and caches answers with ``answer_cache``.
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

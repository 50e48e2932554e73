"""What ``REQ:search`` declares: its fields (checked before the op runs), the fields its
replies carry and the example docs/ops.md shows (tests/test_op_examples.py runs it)."""

from __future__ import annotations

from csp_web.core.api.fields import Example, FieldSpec, ReplyField

from .base import VERTICALS
from .task_query import MAX_SITES

FRESHNESS = ("pd", "pw", "pm", "py")  # past day, week, month, year (seed 000, Brave's spelling)
QUERY_MAX_CHARS = 400  # Brave's documented cap on ``q``

FIELDS = (
    FieldSpec(
        "QUERY",
        required=True,
        repeat=True,
        max_chars=QUERY_MAX_CHARS,
        doc="what to search for; repeat for several, at most docs.max_queries (5), concurrently",
    ),
    FieldSpec(
        "MAX_RESULTS",
        "int",
        minimum=1,
        doc="results wanted: default search.default_results (5), at most search.max_results (10)",
    ),
    FieldSpec("FRESHNESS", "choice", choices=FRESHNESS, doc="past day, week, month or year"),
    FieldSpec("NO_CACHE", "bool", default=False, doc="skip the cached answer"),
    FieldSpec(
        "SITE",
        repeat=True,
        max_chars=253,
        doc=f"only hits on this host or under it; repeat for several (at most {MAX_SITES})",
    ),
    FieldSpec(
        "EXCLUDE_SITE",
        repeat=True,
        max_chars=253,
        doc=f"no hits on this host or under it; repeatable (at most {MAX_SITES})",
    ),
    FieldSpec("AFTER", max_chars=10, doc="published on or after this date (YYYY-MM-DD, UTC)"),
    FieldSpec("BEFORE", max_chars=10, doc="published on or before this date (YYYY-MM-DD, UTC)"),
    FieldSpec(
        "UNDATED",
        "choice",
        choices=("keep", "drop"),
        default="keep",
        doc="with AFTER/BEFORE: keep or drop hits whose backend gave no date",
    ),
    FieldSpec("COUNTRY", max_chars=2, doc="results for this country (ISO 3166-1 alpha-2)"),
    FieldSpec("LANG", max_chars=12, doc="results in this language (en, de, pt-br)"),
    FieldSpec(
        "VERTICAL",
        "choice",
        choices=VERTICALS,
        default="web",
        doc="web, news, images or videos (Brave, SearXNG); other backends are skipped",
    ),
    FieldSpec(
        "MAX_PER_DOMAIN",
        "int",
        minimum=1,
        doc="results a domain may fill before others: default search.max_per_domain (1)",
    ),
    FieldSpec(
        "PREFETCH",
        "int",
        minimum=0,
        doc="load the top N result pages into the fetch cache in the background; "
        "default search.prefetch_top (0)",
    ),
    FieldSpec(
        "MODE",
        "choice",
        choices=("fallback", "fuse"),
        doc="fallback: backends in turn; fuse: all at once, fused; default search.mode",
    ),
)


SEARCH_REPLIES = (
    ReplyField(
        "SNIPPET",
        "one query: one per hit; several: '<n> ...'",
        "<domain>:<snippet as a JSON string>",
        repeat=True,
    ),
    ReplyField("TITLE", "one query: one per hit", "the hit's title", repeat=True),
    ReplyField("CITE", "one per hit", "the hit (R-4)", repeat=True),
    ReplyField("BACKEND", "one query", "the backends that answered"),
    ReplyField("CACHED", "one query", "whether the answer came from the cache", kind="bool"),
    ReplyField("QUERY", "one query", "the query asked"),
    ReplyField("TOTAL", "one query, when the backend gave one", "its estimated total", kind="int"),
    ReplyField("SCORE", "one query: one per hit", "<url> <relevance>", repeat=True),
    ReplyField(
        "THUMBNAIL", "a hit has one", "<url> <thumbnail url> (several: '<n> ...')", repeat=True
    ),
    ReplyField(
        "PUBLISHED",
        "one query: a hit's backend dated it",
        "<url> <UTC ISO-8601 date, or datetime ending Z>",
        repeat=True,
    ),
    ReplyField(
        "EXTRA_SNIPPET",
        "one query: per further excerpt (Brave), at most 5 a hit",
        "<url> <excerpt as a JSON string>",
        repeat=True,
    ),
    ReplyField("FAVICON", "one query: a hit has one", "<url> <icon url>", repeat=True),
    ReplyField(
        "LANG", "one query: the backend named a hit's language", "<url> <code>", repeat=True
    ),
    ReplyField(
        "SOURCES", "MODE fuse, one query: one per hit", "<url> <backends, by order>", repeat=True
    ),
    ReplyField("MISSING_RESULTS", "PARTIAL, one query", "results fewer than asked", kind="int"),
    ReplyField(
        "PREFETCHED",
        "PREFETCH (or search.prefetch_top) above 0",
        "result pages queued for loading into the fetch cache (0: no background task)",
        kind="int",
    ),
    ReplyField(
        "BACKEND_ERROR",
        "PARTIAL or FAIL: a backend failed; MODE fuse: it dropped out",
        "<backend>:<reason> <hint>",
        repeat=True,
    ),
    ReplyField(
        "SEARCH",
        "several queries: one per query answered",
        '<n> results total backend cached "<query>"',
        repeat=True,
    ),
    ReplyField(
        "HIT",
        "several queries: one per hit",
        "<n> <url> score:<s> [published:<json>] [extra_snippets:<json list>] "
        '[favicon:<json>] [lang:<json>] [sources:<json>] "<title>"',
        repeat=True,
    ),
    ReplyField(
        "SEARCH_ERROR",
        "several queries: one per query failed",
        '<n> <code>:<detail> "<query>"',
        repeat=True,
    ),
    ReplyField("RETRY_AFTER", "FAIL: rate limited everywhere", "seconds to wait", kind="int"),
)
SEARCH_EXAMPLE = Example(
    (
        'TASK REQ:search "north sea tides" IN:WEB OUT:URL_REFS\nID 1\nMAX_RESULTS 2\n'
        "SITE origin.test\nAFTER 2026-01-01\n"
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [origin.test]\n"
        "DATA url:https://origin.test/tides,url:https://origin.test/moved\n"
        'SNIPPET origin.test:"The North Sea has two high tides every day."\n'
        'SNIPPET origin.test:"Times of high and low water for each port."\n'
        'TITLE "Tides"\n'
        'TITLE "Tide tables"\n'
        'CITE https://origin.test/tides "Tides"\n'
        'CITE https://origin.test/moved "Tide tables"\n'
        "BACKEND searxng\n"
        "CACHED false\n"
        'QUERY "north sea tides"\n'
        "TOTAL 2\n"
        "SCORE https://origin.test/tides 2.0\n"
        "SCORE https://origin.test/moved 1.0\n"
        "PUBLISHED https://origin.test/tides 2026-03-05\n"
        "LANG https://origin.test/tides en\n"
    ),
)

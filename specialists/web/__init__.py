"""The web specialist under IN:WEB: search, fetch, meta, resolve, api, summarize, the
document ops (board, save, cabinet, write_file) and research jobs (research, result)."""

from __future__ import annotations

from csp_web.registry import Op


def web_ops() -> list[Op]:
    """The web specialist's ops."""
    from . import ops_api, ops_docs, ops_fetch, ops_research, ops_search, ops_summarize

    return [
        *ops_fetch.OPS,
        *ops_summarize.OPS,
        *ops_search.OPS,
        *ops_api.OPS,
        *ops_docs.OPS,
        *ops_research.OPS,
    ]

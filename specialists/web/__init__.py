"""The web specialist: search, fetch, meta, resolve, api and summarize under IN:WEB."""

from __future__ import annotations

from csp_web.core.ops import Op


def web_ops() -> list[Op]:
    """The web specialist's ops."""
    from . import ops_api, ops_fetch, ops_search, ops_summarize

    return [*ops_fetch.OPS, *ops_summarize.OPS, *ops_search.OPS, *ops_api.OPS]

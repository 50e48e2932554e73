"""fetch by FILE_KEY of a kept file (the browser's downloads, ``filestore.py``): the file read
as fetch reads a response of its type, so a downloaded PDF or office file answers its text.

A fileKey names a page snapshot (``filekeys.py``) or a kept file; snapshots are tried first
(the namespaces are apart, so a key is one or the other). The file's page is built on each
read, by the same readers and bounds as a fetched response (``loading.document_page``).
"""

from __future__ import annotations

import httpx

from csp_web.core.api.errors import OpError
from csp_web.net import FetchResult
from csp_web.net.result import parse_content_type
from protocol import ErrorCode

from .documents import reader_for
from .filekeys import held
from .filestore import CacheFileStore
from .loading import Page, document_page, extracted, op_deadline
from .services import PagesServices


async def held_or_file(services: PagesServices, key: str) -> Page:
    """The page snapshot ``key`` names, else the page of the file it names. Raises as
    ``filekeys.held`` does (unknown_file_key when neither holds it), and a document's
    reader's codes."""
    try:
        return await held(services, key)
    except OpError as exc:
        if exc.code is not ErrorCode.UNKNOWN_FILE_KEY:
            raise
    return await file_page(services, key)


async def file_page(services: PagesServices, key: str) -> Page:
    """The page of the kept file ``key``: a document's reader's Markdown, else the views of
    its type (HTML, JSON, text)."""
    stored = await CacheFileStore(services).get(key)
    media_type, charset = parse_content_type(stored.content_type)
    result = FetchResult(
        url=stored.url,
        status_code=200,
        headers=httpx.Headers({"content-type": stored.content_type}),
        body=stored.body,
        content_type=media_type,
        charset=charset,
        redirect_chain=(stored.url,),
        elapsed_s=0.0,
    )
    reader = reader_for(media_type, stored.body, stored.name)
    if reader is not None:
        max_pages = services.config.fetch.max_pages
        return await document_page(services, result, reader, max_pages, op_deadline(services))
    return await extracted(services, result)

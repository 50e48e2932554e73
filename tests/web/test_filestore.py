"""Web's FileStore (the port the browser's downloads will use): files kept under fileKeys in
the response cache, read back as they were put, and nothing else read as one."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from csp_web.config import Config
from csp_web.config.cache import CacheConfig
from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import Port, Seams
from csp_web.infra.cache import open_cache
from protocol import ErrorCode
from specialists.browser.config import BrowserConfig
from specialists.web import make_web
from specialists.web.config import web_section
from specialists.web.pages.filekeys import hold
from specialists.web.pages.filestore import NAMESPACE, CacheFileStore, max_file_bytes
from specialists.web.pages.loading import Page
from specialists.web.services import WebServices
from tests.storage.conftest import Tmpfs, tmpfs  # noqa: F401 - the fixture, for a full disk

URL = "https://files.example/report.pdf"


@pytest.fixture
async def web(config: Config) -> AsyncIterator[WebServices]:
    specialist = make_web(seams=Seams())
    async with specialist.open_services(web_section(config), config) as services:
        yield services


async def test_a_file_put_is_read_back_whole_under_its_key(web: WebServices) -> None:
    store = CacheFileStore(web)
    key = await store.put(b"\x00%PDF\xff" * 10, url=URL, name="report.pdf", content_type="a/b")
    again = await store.put(b"\x00%PDF\xff" * 10, url=URL, name="report.pdf", content_type="a/b")
    other = await store.put(b"changed", url=URL, name="report.pdf", content_type="a/b")
    stored = await store.get(key)
    assert key == again != other
    assert (stored.key, stored.url, stored.name, stored.content_type) == (
        key,
        URL,
        "report.pdf",
        "a/b",
    )
    assert stored.body == b"\x00%PDF\xff" * 10


async def test_a_malformed_key_is_invalid_and_an_unknown_one_is_unknown(web: WebServices) -> None:
    store = CacheFileStore(web)
    with pytest.raises(OpError) as malformed:
        await store.get("fk_NOT-A-KEY")
    with pytest.raises(OpError) as unknown:
        await store.get("fk_" + "a" * 16)
    assert malformed.value.code is ErrorCode.INVALID_FIELD
    assert unknown.value.code is ErrorCode.UNKNOWN_FILE_KEY
    assert unknown.value.fields == (("FILE_KEY", "fk_" + "a" * 16),)


async def test_a_pages_key_or_a_rewritten_snapshot_never_reads_as_a_file(web: WebServices) -> None:
    store = CacheFileStore(web)
    page = Page(url=URL, status=200, content_type="text/plain", kind="text", text="hello")
    await hold(web, "fk_" + "b" * 16, page)  # a page snapshot under a key of the file shape
    key = await store.put(b"original", url=URL, name="a", content_type="t")
    snapshot = await web.cache.get(NAMESPACE, key)
    assert isinstance(snapshot, dict)
    await web.cache.set(NAMESPACE, key, {**snapshot, "body": "b3RoZXI="}, ttl_s=60.0)
    for held in ("fk_" + "b" * 16, key):
        with pytest.raises(OpError) as refused:
            await store.get(held)
        assert refused.value.code is ErrorCode.UNKNOWN_FILE_KEY


async def test_web_offers_its_file_store_only_while_its_services_are_open(config: Config) -> None:
    seams = Seams()
    async with make_web(seams=seams).open_services(web_section(config), config) as services:
        assert isinstance(seams.files.get(), CacheFileStore)
        assert services.renderer is seams.renderer  # what fetch will render through
    assert seams.files.get() is None


def test_a_port_has_one_provider_at_a_time() -> None:
    port: Port[str] = Port("probe")
    with port.provided("first"):
        assert port.get() == "first"
        with pytest.raises(RuntimeError), port.provided("second"):
            pass
        assert port.get() == "first"
    assert port.get() is None


async def test_a_file_past_a_third_of_the_cache_is_refused_at_n_plus_one(
    web: WebServices,
) -> None:
    web.config = replace(web.config, cache=replace(web.config.cache, size_limit_bytes=64 * 1024))
    store = CacheFileStore(web)
    n = max_file_bytes(64 * 1024)
    assert n == (64 * 1024 // 3 - 1024) // 4 * 3
    key = await store.put(b"n" * n, url=URL, name="n.bin", content_type="x/y")  # N
    assert (await store.get(key)).body == b"n" * n
    with pytest.raises(OpError) as over:
        await store.put(b"n" * (n + 1), url=URL, name="n1.bin", content_type="x/y")  # N + 1
    assert (over.value.code, over.value.detail) == (ErrorCode.TOO_LARGE, f"over:{n}")


def test_the_default_cache_keeps_a_download_of_the_browsers_default_cap() -> None:
    """config.yaml's defaults (a test keeps them equal to the dataclasses')."""
    assert max_file_bytes(CacheConfig().size_limit_bytes) >= BrowserConfig().max_download_bytes


async def test_a_file_the_full_disk_did_not_keep_is_storage_full_not_a_key(
    web: WebServices,
    tmpfs: Tmpfs,  # noqa: F811 - the fixture imported above
) -> None:
    async with open_cache(os.path.join(tmpfs.path, "cache"), size_limit_bytes=1 << 30) as cache:
        web.cache = cache
        store = CacheFileStore(web)
        tmpfs.fill()
        big = b"z" * 300_000  # past diskcache's inline size: a file of its own
        with pytest.raises(OpError) as full:
            await store.put(big, url=URL, name="big.bin", content_type="x/y")
        assert (full.value.code, full.value.detail) == (ErrorCode.STORAGE_FULL, "cache")
        tmpfs.free()
        key = await store.put(big, url=URL, name="big.bin", content_type="x/y")
        assert (await store.get(key)).body == big

"""The File Cabinet (seed 004's saveToFC / fetchFromFC): fileKey contents kept in the Memory
Specialist.

    await save(outbox, config, page, note)  -> Saved   # one CSP/1 write, stored before it returns
    await load(outbox, config, key)          -> Saved   # one CSP/1 read

Layout: ``TYPE document``, ``PATH cabinet/<fileKey>.json``, ``FROM web``; DATA is one JSON
line ``{"file_key", "url", "title", "note", "saved_at", "expires_at", "content", "no_text"}``
(times in Unix seconds; ``no_text`` why a document held no text layer, ``scanned`` or
``encrypted``, else null, so its read says ``no_text_layer`` as its fetch did). Saving the
same key again appends a line; a read takes the newest line whose content still hashes to its
key (so a line that is not what it claims is never served) and refuses it once ``expires_at``
has passed (``cabinet.ttl_s``, 30 days). The write goes straight to the Memory Specialist and
is acknowledged before the op answers, so a read right after a save finds it (SPEC M-8); the
outbox queue is for records that may arrive later.

An entry keeps the snapshot's whole content, not only the spans a citation quotes: the key
hashes that content, so every ``QUOTE <n> <fileKey> @<start>-<end> sha256:<hex>`` a summary
or research answer gave stays checkable (``REQ:verify`` reads the cabinet once the held
snapshot is gone) for ``cabinet.ttl_s``, with the same offsets and hash.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from csp_web.core.api.errors import OpError
from csp_web.core.api.ports import Outbound
from csp_web.core.api.records import json_record, new_write_id
from protocol import ErrorCode, Reply, Status, Task
from specialists.web.docs.config import CabinetConfig

from ..pages.emptiness import EMPTY_BODY, is_empty
from ..pages.filekeys import check, content_of, file_key
from ..pages.loading import Page

TYPE = "document"
FOLDER = "cabinet"
# A reason a reply may carry: the key's hash does not cover it, so a line in memory that claims
# another is believed only when it is a short token (scanned, encrypted, max_pages).
_NO_TEXT = re.compile(r"[a-z_]{1,32}")


@dataclass(frozen=True)
class Saved:
    """One cabinet entry."""

    file_key: str
    url: str
    title: str | None
    note: str | None
    saved_at: float
    expires_at: float
    content: str
    no_text: str | None = None  # entries saved before it was kept have none

    def page(self) -> Page:
        """The entry as a text snapshot whose fileKey is its own; one with no text says why
        (its document's ``no_text``, else ``empty_body``), as fetch did."""
        words = len(self.content.split())
        empty = is_empty(self.content)
        return Page(
            self.url,
            200,
            "text/markdown",
            "text",
            self.title,
            text=self.content,
            word_count=words,
            fetched_at=self.saved_at,
            empty=EMPTY_BODY if empty else None,
            no_text=self.no_text if empty and _token(self.no_text) else None,
        )


def _token(no_text: object) -> bool:
    return isinstance(no_text, str) and _NO_TEXT.fullmatch(no_text) is not None


def path_of(key: str) -> str:
    """The memory PATH of ``key``'s entries."""
    return f"{FOLDER}/{key}.json"


async def save(outbox: Outbound, config: CabinetConfig, page: Page, note: str | None) -> Saved:
    """Store ``page``'s content under its fileKey; raises OpError(TOO_LARGE) past
    ``max_content_chars``, memory_unavailable or memory_error (SPEC M-8)."""
    content = content_of(page)
    if len(content) > config.max_content_chars:
        detail = f"{len(content)} chars; cabinet.max_content_chars is {config.max_content_chars}"
        raise OpError(ErrorCode.TOO_LARGE, detail)
    now = time.time()
    saved = Saved(
        file_key(page), page.url, page.title, note, now, now + config.ttl_s, content, page.no_text
    )
    data = json_record(**saved.__dict__)
    task = Task(
        "write",
        "MEMORY",
        "ACK",
        None,
        (
            ("ID", new_write_id()),
            ("FROM", "web"),
            ("TYPE", TYPE),
            ("PATH", path_of(saved.file_key)),
            ("DATA", data),
        ),
    )
    _checked(await outbox.call_memory(task, timeout_s=config.memory_timeout_s))
    return saved


async def load(outbox: Outbound, config: CabinetConfig, key: str) -> Saved:
    """The newest live entry of ``key``; raises OpError(UNKNOWN_FILE_KEY) when there is
    none (never saved, expired, or not matching its key), memory_unavailable or memory_error."""
    check(key)
    task = Task("read", "MEMORY", "CONTENT", None, (("PATH", path_of(key)),))
    reply = await outbox.call_memory(task, timeout_s=config.memory_timeout_s)
    if reply.status is Status.FAIL and (reply.get("ERROR") or "").startswith("not_found:"):
        raise _unknown(key, "not in the cabinet")
    lines = _checked(reply).splitlines()
    # Newest first: a key saved many times is decided by its last good line.
    newest = next((e for line in reversed(lines) if (e := _entry(line, key)) is not None), None)
    if newest is None:
        raise _unknown(key, "not in the cabinet")
    if newest.expires_at <= time.time():
        raise _unknown(key, "expired")
    return newest


def _entry(line: str, key: str) -> Saved | None:
    try:
        data = json.loads(line)
        saved = Saved(**data)
    except (ValueError, TypeError):
        return None
    if saved.file_key != key or file_key(saved.page()) != key:
        return None
    return saved


def _checked(reply: Reply) -> str:
    """The DATA of an OK reply; a FAIL becomes OpError(MEMORY_ERROR) carrying its error."""
    if reply.status is Status.FAIL:
        raise OpError(ErrorCode.MEMORY_ERROR, reply.get("ERROR") or "no ERROR line")
    return reply.get("DATA") or ""


def _unknown(key: str, why: str) -> OpError:
    return OpError(ErrorCode.UNKNOWN_FILE_KEY, f"{key} {why}", fields=(("FILE_KEY", key),))

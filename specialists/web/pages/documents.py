"""Documents fetch reads (PDF, and the office formats beside it): which reader a response
needs, and the worker process that runs it.

    name = reader_for(content_type, body, url)         # "pdf", or None: not a document
    document = await read_document(name, body, limits, deadline, bounds=bounds)

``FORMATS`` is the one table: a reader's name, where its pure function lives
(``specialists.formats``), the content types it serves, the magic bytes that name it, and the
URL suffixes that name it when a server says only ``application/octet-stream`` (or nothing).
Adding a format is one line here and its reader module.

A reader runs in a fresh worker process (``document_worker.py``), never in the daemon: a
hostile file can use all the memory, CPU or native-code bugs it likes and the daemon only sees
a worker die. The worker lowers its address space (RLIMIT_AS) and CPU time (RLIMIT_CPU) before
it reads a byte; the parent kills it at ``deadline`` or when the task is cancelled. Its answer
comes back as JSON on stdout (never pickle: a subverted worker must not run code in the
daemon), at most ``bounds.max_output_bytes`` of it. bench/formats.py measures what a worker
costs (about 0.1 s of spawn and imports per document beside the parse), too little next to a
download to be worth a pool of warm workers that a hostile file could poison for the next:
so documents stay out of the daemon's worker pool (``csp_web.infra.workers``, whose
long-lived workers cannot hold each task to its own RLIMIT_AS and RLIMIT_CPU either;
docs/scaling.md, "Every core").
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import trio

from csp_web.core.api.errors import OpError
from csp_web.infra.workers import cores
from csp_web.net.result import readable
from protocol import ErrorCode
from specialists.formats import Document, Limits
from specialists.formats.feed import is_feed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Format:
    """One document format: ``reader`` is ``module:function`` under specialists.formats.

    ``sniffed`` are types served for this format among others (XML): ``sniff`` (a pure test of
    the body's first bytes, run in the daemon) decides, as it does for an untyped body.
    ``decoded``: the body is text, decoded here by the charset rules (``decode_text``: BOM,
    HTTP charset, detection) and handed to the reader as UTF-8.
    """

    name: str
    reader: str
    types: tuple[str, ...]
    magic: tuple[bytes, ...] = ()
    suffixes: tuple[str, ...] = ()
    sniffed: tuple[str, ...] = ()
    sniff: Callable[[bytes], bool] | None = None
    decoded: bool = False


DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
ODT = "application/vnd.oasis.opendocument.text"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
# Office files are zips: their magic bytes (PK) cannot tell one from another, so an untyped
# one is named by its URL's suffix.
FORMATS: tuple[Format, ...] = (
    Format("pdf", "pdf:read_pdf", ("application/pdf", "application/x-pdf"), (b"%PDF-",), (".pdf",)),
    Format("docx", "docx:read_docx", (DOCX,), suffixes=(".docx",)),
    Format("odt", "docx:read_odt", (ODT,), suffixes=(".odt",)),
    Format("xlsx", "sheet:read_xlsx", (XLSX,), suffixes=(".xlsx",)),
    Format(
        "csv",
        "sheet:read_csv",
        ("text/csv", "application/csv", "text/comma-separated-values", "text/tab-separated-values"),
        suffixes=(".csv", ".tsv"),
        decoded=True,
    ),
    Format(
        "feed",
        "feed:read_feed",
        ("application/rss+xml", "application/atom+xml"),
        suffixes=(".rss", ".atom"),
        sniffed=("text/xml", "application/xml", "application/rdf+xml"),
        sniff=is_feed,
    ),
)
# Types that say nothing of the format: the bytes (then the URL's suffix) decide.
UNTYPED = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/download"})
# Codes a worker may answer with (its JSON on stdout, exit status 3); any other is its failure.
READER_CODES = {
    code.value: code
    for code in (ErrorCode.TOO_LARGE, ErrorCode.UNSUPPORTED_CONTENT, ErrorCode.CORRUPT_DOCUMENT)
}
REPORTED_EXIT = 3
_DETAIL = re.compile(r"[\w.:/+,-]{1,200}")  # what a reader's detail may hold, as replies show it
STDERR_TAIL = 4000  # bytes of a worker's stderr kept for the log
# The shapes a Document's metadata must have to reach a reply (``_reply_safe``): as headmeta
# holds an HTML page's, so a document's TITLE or FETCH line reads as a page's.
META_VALUE_CHARS = 2000
NO_TEXT_WHY = frozenset({"encrypted", "scanned", "max_pages"})
_LANG_TAG = re.compile(r"[A-Za-z]{2,3}(?:-[A-Za-z0-9]{1,8}){0,8}")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}:\d{2}Z)?")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Magic bytes are looked for at the start, after white space (a PDF's header may lie deeper,
# PDF 1.7 annex H.3, but an untyped text that quotes "%PDF-" is then read as the text it is).
MAGIC_WINDOW = 1024
WORKER = Path(__file__).with_name("document_worker.py")
WORKER_ENV = {"PATH": os.defpath, "LC_ALL": "C.UTF-8"}
# Workers at once, per trio run (as trio.to_thread's default limiter): one per core this
# process may use, so concurrent fetches of PDFs queue for CPU instead of multiplying
# address spaces.
WORKERS: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("document_workers")


@dataclass(frozen=True)
class Bounds:
    """What one worker may use: ``memory_bytes`` of address space, ``cpu_s`` of CPU time, and
    ``max_output_bytes`` of answer (the Markdown and fields as JSON)."""

    memory_bytes: int = 1 << 30
    cpu_s: int = 30
    max_output_bytes: int = 24_000_000


def reader_for(content_type: str, body: bytes, url: str) -> str | None:
    """The name of the reader for a response, or None when it is not a document: by its
    content type (a type several formats share, XML: by the format's sniff of the body), else
    (an untyped or octet-stream response) by its magic bytes or sniff, else by the URL path's
    suffix."""
    for fmt in FORMATS:
        if content_type in fmt.types or (content_type in fmt.sniffed and _sniffs(fmt, body)):
            return fmt.name
    if content_type not in UNTYPED:
        return None
    head = body[:MAGIC_WINDOW].lstrip()
    for fmt in FORMATS:
        if head.startswith(fmt.magic):
            return fmt.name
        if _sniffs(fmt, body):
            return fmt.name
    path = url.split("?", 1)[0].split("#", 1)[0].lower()
    return next((fmt.name for fmt in FORMATS if path.endswith(fmt.suffixes)), None)


def _sniffs(fmt: Format, body: bytes) -> bool:
    return fmt.sniff is not None and fmt.sniff(body)


def reader_path(name: str) -> str:
    """``module:function`` of the reader named ``name``; KeyError for an unknown name."""
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt.reader
    raise KeyError(name)


def reads_text(name: str) -> bool:
    """Whether the reader named ``name`` takes text (decoded by the charset rules, as UTF-8)."""
    return next(fmt.decoded for fmt in FORMATS if fmt.name == name)


async def read_document(
    name: str, data: bytes, limits: Limits, deadline: float, *, bounds: Bounds | None = None
) -> Document:
    """The Document reader ``name`` makes of ``data``, read in a worker process within
    ``bounds`` and by ``deadline`` (trio time), once one of ``workers()`` is free; the worker
    is killed on cancel.

    Raises OpError: the reader's own code (``unsupported_content``, ``too_large``);
    TOO_LARGE ``reader_memory`` (the worker ran out of address space) or ``reader_cpu`` (out of
    CPU time) or ``reader_output`` (an answer past its cap); FETCH_FAILED ``timeout`` at
    ``deadline``; UNSUPPORTED_CONTENT ``<name>:reader_failed`` for any other death.
    """
    bounds = bounds or Bounds()
    header = json.dumps({"reader": reader_path(name), "limits": asdict(limits), **asdict(bounds)})
    with trio.move_on_at(deadline):
        async with workers():
            code, out, err = await _run_worker(header.encode() + b"\n" + data, bounds)
        return _answer(name, code, out, err)
    raise OpError(ErrorCode.FETCH_FAILED, "timeout")


def workers() -> trio.CapacityLimiter:
    """This run's limiter of worker processes (``WORKERS``), made on first use."""
    try:
        return WORKERS.get()
    except LookupError:
        limiter = trio.CapacityLimiter(cores())
        WORKERS.set(limiter)
        return limiter


async def _run_worker(stdin: bytes, bounds: Bounds) -> tuple[int, bytes, bytes]:
    """Run one worker over ``stdin``: its exit code, its stdout and the tail of its stderr.
    Raises OpError(TOO_LARGE, "reader_output") past the output cap. The worker is killed when
    this returns or is cancelled before it exits."""
    # -B: the worker may write no file (its RLIMIT_FSIZE), a .pyc included.
    command: Sequence[str] = [sys.executable, "-s", "-B", "-X", "utf8", str(WORKER)]
    process = await trio.lowlevel.open_process(
        command,
        env=WORKER_ENV,  # none of the daemon's credentials (API keys) reach a hostile file's reader
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # no terminal of the daemon's signals it
    )
    try:
        err = bytearray()
        async with trio.open_nursery() as nursery:
            assert process.stdin is not None
            assert process.stderr is not None
            nursery.start_soon(_feed, process.stdin, stdin)
            nursery.start_soon(_tail, process.stderr, err)
            assert process.stdout is not None
            out = await _capped(process.stdout, bounds.max_output_bytes)
            if len(out) > bounds.max_output_bytes:
                _kill_group(process.pid)  # it may be blocked writing the rest
        if len(out) > bounds.max_output_bytes:
            raise OpError(ErrorCode.TOO_LARGE, "reader_output")
        return await process.wait(), out, bytes(err)
    finally:
        if process.returncode is None:
            _kill_group(process.pid)  # before the reap: the group's id is still its own
            with trio.CancelScope(shield=True):
                await process.wait()
        else:  # what it left in its group (a group id outlives its leader while in use)
            _kill_group(process.pid)


def _kill_group(pid: int) -> None:
    """SIGKILL the worker's process group (``start_new_session``: its id is the worker's
    pid): a subverted worker's children die with it rather than outlive the read."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    """Write ``data`` and close; a worker that died (or stopped reading) ends the feed."""
    try:
        await stream.send_all(data)
        await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def _tail(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    while chunk := await stream.receive_some():
        into += chunk
        del into[:-STDERR_TAIL]


async def _capped(stream: trio.abc.ReceiveStream, cap: int) -> bytes:
    """What ``stream`` brings until it ends, or the first chunk past ``cap`` bytes."""
    out = bytearray()
    while len(out) <= cap and (chunk := await stream.receive_some()):
        out += chunk
    return bytes(out)


def _answer(name: str, code: int, out: bytes, err: bytes) -> Document:
    if code == 0:
        return _decoded(name, out)
    if err and code != REPORTED_EXIT:
        # repr: the stderr of a worker a file subverted may forge log lines (newlines, escapes)
        log.info("%s reader exited %s: %r", name, code, err.decode("utf-8", "replace"))
    if code in (-signal.SIGXCPU, -signal.SIGKILL):
        raise OpError(ErrorCode.TOO_LARGE, "reader_cpu")
    # Native code that cannot allocate under RLIMIT_AS aborts or faults (PDFium aborts).
    if code in (-signal.SIGABRT, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGTRAP):
        raise OpError(ErrorCode.TOO_LARGE, "reader_memory")
    if code == REPORTED_EXIT:  # the worker's own report of an error: its JSON on stdout
        error = _decoded_error(name, out)
        raise OpError(READER_CODES[error[0]], error[1])
    raise OpError(ErrorCode.UNSUPPORTED_CONTENT, f"{name}:reader_failed")


def _decoded(name: str, out: bytes) -> Document:
    """The worker's Document, each field of the type it must have and its metadata held to
    the shapes replies print (``_reply_safe``): a worker that a hostile file subverted may
    write anything, and an honest reader copies what the file declares."""
    try:
        fields = json.loads(out)
        if not isinstance(fields, dict) or not all(
            _typed(fields.get(f.name), f.name) for f in dataclasses.fields(Document)
        ):
            raise TypeError("a field of the wrong type")
        return _reply_safe(Document(**fields))
    except (ValueError, TypeError, RecursionError) as exc:  # Recursion: JSON nested deep
        raise OpError(ErrorCode.UNSUPPORTED_CONTENT, f"{name}:reader_failed") from exc


def _reply_safe(document: Document) -> Document:
    """``document`` with its Markdown ``readable`` and its metadata as reply lines can carry
    it: the title and author on one line of at most ``META_VALUE_CHARS``; ``lang`` a BCP 47
    tag and ``published`` an ISO date, else None (a FETCH line prints both bare: a space in
    them would forge attributes);
    ``no_text`` one of ``NO_TEXT_WHY`` (it ends an ERROR line), ``pages_read`` within ``pages``.
    """
    pages_read = document.pages_read
    if document.pages is not None and pages_read is not None:
        pages_read = min(pages_read, document.pages)
    return dataclasses.replace(
        document,
        markdown=readable(document.markdown),
        title=_one_line(document.title),
        author=_one_line(document.author),
        lang=_matching(_LANG_TAG, document.lang),
        published=_matching(_ISO_DATE, document.published),
        no_text=document.no_text if document.no_text in NO_TEXT_WHY else None,
        pages_read=pages_read,
    )


def _one_line(text: str | None) -> str | None:
    """``text``'s words on one line (controls as spaces), cut at ``META_VALUE_CHARS``."""
    if text is None:
        return None
    return " ".join(_CONTROLS.sub(" ", text).split())[:META_VALUE_CHARS] or None


def _matching(pattern: re.Pattern[str], value: str | None) -> str | None:
    return value if value is not None and pattern.fullmatch(value) else None


def _typed(value: object, name: str) -> bool:
    if name == "markdown":
        return isinstance(value, str)
    if name == "cut":
        return isinstance(value, bool)
    if name in ("pages", "pages_read"):
        return value is None or (type(value) is int and value >= 0)
    return value is None or isinstance(value, str)


def _decoded_error(name: str, out: bytes) -> tuple[str, str]:
    """The worker's ``{"code": ..., "detail": ...}``, held to codes a reader may answer."""
    try:
        error = json.loads(out)
        code, detail = str(error["code"]), str(error["detail"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return ErrorCode.UNSUPPORTED_CONTENT.value, f"{name}:reader_failed"
    if code not in READER_CODES or not _DETAIL.fullmatch(detail):
        return ErrorCode.UNSUPPORTED_CONTENT.value, f"{name}:reader_failed"
    return code, detail

"""Document ops under IN:WEB (seed 004): the announcement board and the File Cabinet.

    TASK REQ:save IN:WEB OUT:ACK
    FILE_KEY fk_k2n3r5t7v2x4z6b3
    NOTE "for the tides report"

    STATUS OK
    SCOPE [memory]
    DATA saved:fk_k2n3r5t7v2x4z6b3
    FILE_KEY fk_k2n3r5t7v2x4z6b3
    PATH cabinet/fk_k2n3r5t7v2x4z6b3.json
    EXPIRES_AT 2026-12-24T18:00:00Z

``board`` lists the peer's recent fetches (``board.py``), ``save`` stores a held fileKey in the
cabinet, ``cabinet`` reads one back (paged like fetch), ``write_file`` writes one to a file
under the exec workspace roots (``workspace.py``). Each task is a turn of the board.
"""

from __future__ import annotations

import datetime
import functools

import trio

from csp_web.config import masked_paths, workspace_roots
from csp_web.core.api.context import OpContext
from csp_web.core.api.errors import FieldError, OpError
from csp_web.core.api.fields import Example, FieldSpec, Params, ReplyField, check_start
from csp_web.core.api.ops import READS_LOCAL, Effects, Op
from csp_web.core.api.replies import Result, cite
from csp_web.infra.workspace_paths import check_path
from protocol import ErrorCode, Field, Status

from ..pages.fetch_fields import empty_error
from ..pages.fetch_many import announce
from ..pages.filekeys import check, content_of, held, window
from ..pages.loading import Page
from ..services import WebServices, web_audit
from . import cabinet
from .board import file_lines
from .services import DocsServices
from .workspace import write_file as write_at

FILE_KEY = FieldSpec("FILE_KEY", required=True, doc="a fileKey from fetch (fk_...)")
NOTE_MAX_CHARS = 2000


async def board(params: Params, ctx: OpContext, services: DocsServices) -> Result:
    """The peer's announcement board: one FILE line per live entry, newest first."""
    config = services.config.docs.board
    services.board.turn(ctx.peer, config)
    listing = services.board.listing(ctx.peer, config)
    return Result(f"files:{len(listing)}", (), tuple(file_lines(listing)))


async def save(params: Params, ctx: OpContext, services: DocsServices) -> Result:
    """Store a held fileKey's content, URL, title and NOTE in the cabinet (30 days)."""
    key = params.text("FILE_KEY")
    services.board.turn(ctx.peer, services.config.docs.board)
    with web_audit(key) as notes:
        page = await held(services, key)
        config = services.config.docs.cabinet
        saved = await cabinet.save(ctx.services.outbox, config, page, params.opt_text("NOTE"))
        fields: list[Field] = [
            ("FILE_KEY", key),
            ("PATH", cabinet.path_of(key)),
            ("SAVED_AT", _iso(saved.saved_at)),
            ("EXPIRES_AT", _iso(saved.expires_at)),
            cite(page.url, page.title),
        ]
        return notes.attach(Result(f"saved:{key}", ("memory",), tuple(fields)))


async def from_cabinet(params: Params, ctx: OpContext, services: DocsServices) -> Result:
    """A cabinet entry's content, ``MAX_CHARS`` from ``START`` as fetch pages it; the entry
    is held and announced again, so fetch FILE_KEY and write_file find it."""
    key = params.text("FILE_KEY")
    services.board.turn(ctx.peer, services.config.docs.board)
    with web_audit(key) as notes:
        saved = await cabinet.load(ctx.services.outbox, services.config.docs.cabinet, key)
        await announce(ctx, services, saved.page())
        content, start = saved.content, params.integer("START")
        check_start(start, len(content))
        text, paging, status = window(content, start, _max_chars(params, services))
        fields: list[Field] = [("TITLE", saved.title)] if saved.title else []
        fields += [("URL", saved.url), ("FILE_KEY", key)]
        fields += [("NOTE", saved.note)] if saved.note else []
        fields += [
            ("SAVED_AT", _iso(saved.saved_at)),
            ("EXPIRES_AT", _iso(saved.expires_at)),
            *paging,
            cite(saved.url, saved.title),
        ]
        error = empty_error(saved.page(), content)  # never an empty OK: why, as fetch
        if error is not None:
            return notes.attach(Result(text, ("memory",), tuple(fields), Status.PARTIAL, error))
        return notes.attach(Result(text, ("memory",), tuple(fields), status))


async def write_file(params: Params, ctx: OpContext, services: DocsServices) -> Result:
    """Write a fileKey's content (held, else from the cabinet) to PATH under a workspace root."""
    key, path = params.text("FILE_KEY"), params.text("PATH")
    check(key)
    services.board.turn(ctx.peer, services.config.docs.board)
    with web_audit(key) as notes:
        roots, masked = workspace_roots(ctx.config), masked_paths(ctx.config)
        target = check_path(roots, path, masked=masked, user="write_file")
        page = await _source(ctx, services, key)
        data = content_of(page).encode("utf-8")
        write = functools.partial(
            write_at,
            target,
            data,
            max_bytes=services.config.docs.cabinet.max_file_bytes,
            overwrite=params.flag("OVERWRITE"),
        )
        real = await trio.to_thread.run_sync(write)
        fields: list[Field] = [("FILE_KEY", key), ("BYTES", str(len(data)))]
        fields.append(cite(page.url, page.title))
        return notes.attach(Result(f"path:{real}", (), tuple(fields)))


async def _source(ctx: OpContext, services: DocsServices, key: str) -> Page:
    try:
        return await held(services, key)
    except OpError as exc:
        if exc.code is not ErrorCode.UNKNOWN_FILE_KEY:
            raise
    config = services.config.docs.cabinet
    return (await cabinet.load(ctx.services.outbox, config, key)).page()


def _max_chars(params: Params, services: DocsServices) -> int:
    limits = services.config.fetch
    max_chars = params.opt_integer("MAX_CHARS") or limits.default_max_chars
    if max_chars > limits.max_chars_cap:
        raise FieldError(ErrorCode.INVALID_FIELD, f"MAX_CHARS above {limits.max_chars_cap}")
    return max_chars


def _iso(seconds: float) -> str:
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


BOARD_REPLIES = (
    ReplyField(
        "FILE",
        "one per page on the board",
        '<fileKey> <url> chars:<n> tokens:<n> turns_left:<n> "<title>"',
        repeat=True,
    ),
)
BOARD_EXAMPLE = Example(
    ("TASK REQ:board IN:WEB OUT:BOARD\nID 1\n"),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE []\n"
        "DATA files:1\n"
        "FILE fk_xxxxxxxxxxxxxxxx https://origin.test/tides chars:359 tokens:90 "
        'turns_left:2 "Tides of the North Sea"\n'
    ),
)

SAVE_REPLIES = (
    ReplyField("FILE_KEY", "always", "the key saved"),
    ReplyField("PATH", "OK", "its path in the Memory Specialist"),
    ReplyField("SAVED_AT", "OK", "when (ISO 8601, UTC)"),
    ReplyField("EXPIRES_AT", "OK", "when the cabinet drops it"),
    ReplyField("CITE", "OK", "the page (R-4)"),
)
SAVE_EXAMPLE = Example(
    ('TASK REQ:save fk_xxxxxxxxxxxxxxxx IN:WEB OUT:ACK\nID 1\nNOTE "tide tables"\n'),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE [memory]\n"
        "DATA saved:fk_xxxxxxxxxxxxxxxx\n"
        "FILE_KEY fk_xxxxxxxxxxxxxxxx\n"
        "PATH cabinet/fk_xxxxxxxxxxxxxxxx.json\n"
        "SAVED_AT 2026-01-01T00:00:00Z\n"
        "EXPIRES_AT 2026-01-01T00:00:00Z\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
    ),
)

CABINET_REPLIES = (
    ReplyField("TITLE", "the page had one", "its title"),
    ReplyField("URL", "OK", "the page's URL"),
    ReplyField("FILE_KEY", "always", "the key read"),
    ReplyField("NOTE", "saved with one", "the NOTE given to save"),
    ReplyField("SAVED_AT", "OK", "when it was saved"),
    ReplyField("EXPIRES_AT", "OK", "when the cabinet drops it"),
    ReplyField("CONTENT_LENGTH", "OK", "the whole content's length in chars", kind="int"),
    ReplyField("TOKENS", "OK", "about how many model tokens DATA is", kind="int"),
    ReplyField("TRUNCATED", "OK", "whether DATA stops before the end", kind="bool"),
    ReplyField("NEXT_START", "PARTIAL", "START for the next part", kind="int"),
    ReplyField("REMAINING_CHARS", "PARTIAL", "chars after this part", kind="int"),
    ReplyField("CITE", "OK", "the page (R-4)"),
)
CABINET_EXAMPLE = Example(
    ("TASK REQ:cabinet fk_xxxxxxxxxxxxxxxx IN:WEB OUT:CONTENT\nID 1\nMAX_CHARS 80\n"),
    (
        "STATUS PARTIAL\n"
        "ID 1\n"
        "SCOPE [memory]\n"
        'DATA "# Tides of the North Sea\\n\\nThe North Sea has two high tides '
        'every day, about twel"\n'
        'TITLE "Tides of the North Sea"\n'
        "URL https://origin.test/tides\n"
        "FILE_KEY fk_xxxxxxxxxxxxxxxx\n"
        'NOTE "tide tables"\n'
        "SAVED_AT 2026-01-01T00:00:00Z\n"
        "EXPIRES_AT 2026-01-01T00:00:00Z\n"
        "CONTENT_LENGTH 359\n"
        "TOKENS 20\n"
        "TRUNCATED true\n"
        "NEXT_START 80\n"
        "REMAINING_CHARS 279\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
    ),
)

WRITE_FILE_REPLIES = (
    ReplyField("FILE_KEY", "always", "the key written"),
    ReplyField("BYTES", "OK", "bytes written", kind="int"),
    ReplyField("CITE", "OK", "the page (R-4)"),
)
WRITE_FILE_EXAMPLE = Example(
    (
        "TASK REQ:write_file IN:WEB OUT:PATH\n"
        "ID 1\n"
        "FILE_KEY fk_xxxxxxxxxxxxxxxx\n"
        "PATH <workspace>/tides.md\n"
    ),
    (
        "STATUS OK\n"
        "ID 1\n"
        "SCOPE []\n"
        "DATA path:<workspace>/tides.md\n"
        "FILE_KEY fk_xxxxxxxxxxxxxxxx\n"
        "BYTES 359\n"
        'CITE https://origin.test/tides "Tides of the North Sea"\n'
    ),
)


OPS: list[Op[WebServices]] = [
    Op(
        "board",
        "WEB",
        "BOARD",
        "web",
        board,
        (),
        replies=BOARD_REPLIES,
        example=BOARD_EXAMPLE,
        doc="the announcement board: recent fetches",
        effects=READS_LOCAL,
    ),
    Op(
        "save",
        "WEB",
        "ACK",
        "web",
        save,
        (FILE_KEY, FieldSpec("NOTE", max_chars=NOTE_MAX_CHARS, doc="kept with the entry")),
        inline="FILE_KEY",
        replies=SAVE_REPLIES,
        example=SAVE_EXAMPLE,
        doc="keep a fileKey's content in the File Cabinet (Memory Specialist, 30 days)",
        # A new File Cabinet entry each time (SAVED_AT, EXPIRES_AT move).
        effects=Effects(destructive=False, open_world=False),
    ),
    Op(
        "cabinet",
        "WEB",
        "CONTENT",
        "web",
        from_cabinet,
        (
            FILE_KEY,
            FieldSpec("MAX_CHARS", "int", minimum=1, doc="as fetch"),
            FieldSpec("START", "int", default=0, minimum=0, doc="character offset to read from"),
        ),
        inline="FILE_KEY",
        replies=CABINET_REPLIES,
        example=CABINET_EXAMPLE,
        doc="a File Cabinet entry's content, paged by START/MAX_CHARS",
        effects=READS_LOCAL,
    ),
    Op(
        "write_file",
        "WEB",
        "PATH",
        "web",
        write_file,
        (
            FILE_KEY,
            FieldSpec(
                "PATH",
                required=True,
                doc="an absolute path under tool.exec.workspace_roots: a new name, or with"
                " OVERWRITE a regular file (a symlink, directory, FIFO, device or socket"
                " is refused)",
            ),
            FieldSpec(
                "OVERWRITE",
                "bool",
                default=False,
                doc="replace an existing file (renamed over: another hard link keeps the old)",
            ),
        ),
        replies=WRITE_FILE_REPLIES,
        example=WRITE_FILE_EXAMPLE,
        doc="write a fileKey's content to a file in a workspace root",
        # OVERWRITE replaces a file; writing the same content again changes nothing.
        effects=Effects(idempotent=True, open_world=False),
    ),
]

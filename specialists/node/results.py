"""A node's answers, taken as untrusted input: media assembled under a cap and checked against
its checksum (N-9, N-10), replies checked against a schema per action (N-11).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from csp_web.core.api.errors import OpError
from csp_web.infra.media import MediaStore
from protocol import ErrorCode, Reply, Status

from .wire import MediaInfo, parse_media

# Per action: the MIME types its media may have (None: no media), whether media is required,
# and the extra fields a reply may carry. WORK_MS is the node's own time (N-11).
_EXT = {"image/jpeg": "jpg", "image/png": "png", "video/mp4": "mp4"}
MEDIA_EXTENSIONS = (*_EXT.values(), "bin")  # what a node media store writes, and trims


@dataclass(frozen=True)
class Schema:
    media: tuple[str, ...] = ()
    media_required: bool = False
    data: re.Pattern[str] | None = None  # DATA when there is no media
    fields: dict[str, re.Pattern[str]] = field(default_factory=dict)


# [0-9], not \d: \d takes every script's digits, which no client reads back as a number.
_NUMBER = re.compile(r"-?[0-9]{1,9}(?:\.[0-9]{1,9})?")
_LOCATION = re.compile(r"lat:(-?[0-9]{1,2}(?:\.[0-9]{1,9})?),lon:(-?[0-9]{1,3}(?:\.[0-9]{1,9})?)")
SCHEMAS = {
    "camera_snap": Schema(("image/jpeg", "image/png"), True),
    "screen_record": Schema(("video/mp4", "image/png"), True),
    "location_get": Schema(
        data=_LOCATION,
        fields={"SOURCE": re.compile(r"geoclue|fixed"), "ACCURACY_M": _NUMBER},
    ),
    "notify": Schema(data=re.compile(r"notified")),
    # The seam for the browser issue's canvas: a snapshot (media) or a short text answer.
    "canvas": Schema(("image/png",), False, re.compile(r"[^\x00-\x1f]{1,4096}")),
}
COMMON_FIELDS = {"WORK_MS": _NUMBER}
# Codes a node may report for its own failure; anything else becomes node_error (N-12).
NODE_CODES = frozenset(
    {
        ErrorCode.NOT_AVAILABLE,
        ErrorCode.COMMAND_FAILED,
        ErrorCode.INVALID_FIELD,
        ErrorCode.TIMEOUT_EXCEEDED,
        ErrorCode.TOO_LARGE,
        ErrorCode.BUSY,
    }
)


def _bad(detail: str) -> OpError:
    return OpError(ErrorCode.NODE_ERROR, f"invalid reply: {detail}", scope=("node",))


class MediaAssembly:
    """The chunks of one capture, kept in order under ``max_bytes`` (raises OpError
    too_large past it, node_error for a chunk out of sequence)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.failed: OpError | None = None

    def add(self, seq: int, chunk: bytes) -> None:
        if self.failed is not None:
            raise self.failed
        if seq != len(self.parts):
            self.failed = _bad(f"chunk {seq} out of order (expected {len(self.parts)})")
            raise self.failed
        if self.size + len(chunk) > self.max_bytes:
            self.parts.clear()
            self.failed = OpError(
                ErrorCode.TOO_LARGE, f"media over {self.max_bytes} bytes", scope=("node",)
            )
            raise self.failed
        self.parts.append(chunk)
        self.size += len(chunk)

    def finish(self, info: MediaInfo) -> bytes:
        """The whole capture when it matches ``info`` (size, then SHA-256)."""
        if self.failed is not None:
            raise self.failed
        data = b"".join(self.parts)
        if len(data) != info.size:
            raise _bad(f"media is {len(data)} bytes, MEDIA says {info.size}")
        if hashlib.sha256(data).hexdigest() != info.sha256:
            raise _bad("media checksum mismatch")
        return data


@dataclass(frozen=True)
class Checked:
    """A reply that passed its schema: DATA (when no media), media, extra fields."""

    data: str
    media: MediaInfo | None
    fields: tuple[tuple[str, str], ...]
    work_ms: str | None


def check_reply(action: str, reply: Reply, *, max_text_chars: int) -> Checked:
    """``reply`` checked against ``action``'s schema; a FAIL becomes the OpError it stands
    for (codes outside NODE_CODES: node_error). Raises OpError."""
    if reply.status is Status.FAIL:
        raise _node_failure(reply.get("ERROR") or "", max_text_chars)
    if reply.status is not Status.OK:
        raise _bad(f"status {reply.status}")
    schema = SCHEMAS[action]
    allowed = {"ID", "SCOPE", "DATA", "MEDIA", *schema.fields, *COMMON_FIELDS}
    seen: set[str] = set()
    for key, value in reply.fields:
        if key not in allowed or key in seen:
            raise _bad(f"unexpected or repeated field {key}")
        seen.add(key)
        pattern = schema.fields.get(key) or COMMON_FIELDS.get(key)
        if pattern is not None and not pattern.fullmatch(value):
            raise _bad(f"{key} is malformed")
    return _checked(action, schema, reply, max_text_chars)


def _checked(action: str, schema: Schema, reply: Reply, max_text_chars: int) -> Checked:
    media_line = reply.get("MEDIA")
    media = parse_media(media_line) if media_line is not None else None
    if media is not None and media.mime not in schema.media:
        raise _bad(f"{action} gives no {media.mime} media")
    if media is None and schema.media_required:
        raise _bad(f"{action} must carry MEDIA")
    data = reply.get("DATA") or ""
    bad_text = len(data) > max_text_chars or schema.data is None or not schema.data.fullmatch(data)
    if media is None and bad_text:
        raise _bad("DATA is malformed")
    extra = tuple((k, v) for k, v in reply.fields if k in schema.fields)
    return Checked(data, media, extra, reply.get("WORK_MS"))


def _node_failure(error: str, max_text_chars: int) -> OpError:
    code, _, detail = error.partition(":")
    detail = detail[: min(max_text_chars, 500)]
    known = {str(c): c for c in NODE_CODES}.get(code)
    if known is not None:
        return OpError(known, f"node: {detail}", scope=("node",))
    return OpError(ErrorCode.NODE_ERROR, f"{code[:64]}: {detail}", scope=("node",))


def save_capture(store: MediaStore, name: str, task_id: str, info: MediaInfo, data: bytes) -> str:
    """Write ``data`` as ``<name>-<task_id>-<random>.<ext>`` in ``store`` (which then trims
    its folder); returns its path. Raises StorageFull("media") when the disk is full, leaving
    no partial file behind."""
    # A random tail (the store's): a client may reuse an ID, and one capture never replaces
    # another.
    safe_id = re.sub(r"[^A-Za-z0-9._-]", "_", task_id)
    return store.save_sync(f"{name}-{safe_id}", data, extension=_EXT.get(info.mime, "bin"))

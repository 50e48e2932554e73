"""The node link's frames (protocol/NODES.md), shared by the daemon and the reference node.

Pure functions over ``protocol`` frames: no I/O, so both ends build and check the same frames.
A node sends only link frames (``IN:NODE``: hello, pair, heartbeat, media); the daemon sends
it action tasks (``TASK REQ:<action> IN:NODE OUT:NODE_RESULT``) and, once, the token.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from csp_web.core.api.errors import OpError
from protocol import ErrorCode, NumberError, Task, parse_uint

DOMAIN = "NODE"
RESULT = "NODE_RESULT"
# The seed's four actions, and canvas (the browser issue's op on a node: the same task path).
ACTIONS = ("camera_snap", "screen_record", "location_get", "notify", "canvas")
LINK_OPS = ("hello", "pair", "heartbeat", "media")  # what a node may send (N-3)
NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # a node name: a host-name-like label
PLATFORM = re.compile(r"[A-Za-z0-9._/+ -]{1,64}")
TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # 32 random bytes, URL-safe base64 without padding
MEDIA = re.compile(r"sha256:([0-9a-f]{64}),bytes:([0-9]{1,12}),type:([a-z]+/[a-z0-9.+-]+)")
# A capture is at most max_media_bytes in chunks of at least a byte: 9 digits is ample.
MAX_SEQ_DIGITS = 9


@dataclass(frozen=True)
class Hello:
    """Who a node says it is: from ``hello`` (with TOKEN) or ``pair`` (without)."""

    name: str
    platform: str
    capabilities: tuple[str, ...]
    token: str | None = None


@dataclass(frozen=True)
class MediaInfo:
    """A reply's ``MEDIA sha256:<hex>,bytes:<n>,type:<mime>`` line (N-9)."""

    sha256: str
    size: int
    mime: str


def _invalid(detail: str) -> OpError:
    return OpError(ErrorCode.INVALID_FIELD, detail, scope=("node",))


def parse_hello(task: Task, *, token_required: bool) -> Hello:
    """The node's identity from a hello or pair frame; raises OpError(invalid_field) (N-2)."""
    known = {"ID", "NAME", "PLATFORM", "CAPABILITY", "TOKEN", "VERSION"}
    for key, _ in task.fields:
        if key not in known:
            raise OpError(ErrorCode.UNKNOWN_FIELD, key, scope=("node",))
    name = task.get("NAME") or ""
    if not NAME.fullmatch(name):
        raise _invalid("NAME must be 1-63 of [a-z0-9._-], starting with a letter or digit")
    platform = task.get("PLATFORM") or ""
    if not PLATFORM.fullmatch(platform):
        raise _invalid("PLATFORM must be 1-64 printable ASCII characters")
    capabilities = tuple(task.get_all("CAPABILITY"))
    unknown = [c for c in capabilities if c not in ACTIONS]
    if unknown or len(set(capabilities)) != len(capabilities):
        raise _invalid(f"CAPABILITY must name distinct actions of {', '.join(ACTIONS)}")
    token = task.get("TOKEN")
    if token_required and (token is None or not TOKEN.fullmatch(token)):
        raise _invalid("TOKEN is missing or malformed")
    if not token_required and token is not None:
        raise OpError(ErrorCode.UNKNOWN_FIELD, "TOKEN (a pair request carries none)")
    return Hello(name, platform, capabilities, token)


def hello_fields(hello: Hello) -> tuple[tuple[str, str], ...]:
    fields = [("NAME", hello.name), ("PLATFORM", hello.platform)]
    fields += [("CAPABILITY", c) for c in hello.capabilities]
    if hello.token is not None:
        fields.append(("TOKEN", hello.token))
    return tuple(fields)


def parse_media(value: str) -> MediaInfo:
    match = MEDIA.fullmatch(value)
    if match is None:
        raise _invalid("MEDIA must be sha256:<64 hex>,bytes:<n>,type:<mime>")
    return MediaInfo(match[1], parse_uint(match[2]), match[3])


def media_line(info: MediaInfo) -> str:
    return f"sha256:{info.sha256},bytes:{info.size},type:{info.mime}"


def chunk_task(for_id: str, seq: int, chunk: bytes) -> Task:
    """One media chunk of the capture that answers the daemon's task ``for_id`` (N-9); the
    sender adds its ID."""
    fields = (
        ("FOR", for_id),
        ("SEQ", str(seq)),
        ("CHUNK", base64.b64encode(chunk).decode("ascii")),
    )
    return Task("media", DOMAIN, "ACK", None, fields)


def decode_chunk(task: Task) -> tuple[str, int, bytes]:
    """(FOR, SEQ, bytes) of a media frame; raises OpError(invalid_field), or NumberError
    for a SEQ that is not ASCII digits (a node that cannot write a number is cut)."""
    for_id, seq, chunk = task.get("FOR"), task.get("SEQ"), task.get("CHUNK")
    if for_id is None or seq is None or chunk is None:
        raise _invalid("a media frame needs FOR, SEQ and CHUNK")
    try:
        number = parse_uint(seq, max_digits=MAX_SEQ_DIGITS)
    except NumberError as exc:
        raise NumberError(f"SEQ {exc.detail}") from None
    try:
        data = base64.b64decode(chunk, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid("CHUNK is not base64") from None
    return for_id, number, data

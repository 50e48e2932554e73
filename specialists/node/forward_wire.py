"""The parts of a forwarded node task that cross Redis besides its events (fleet.py): the
capture handed from the holder to the caller in chunks, and the checks a holder makes of a
peer's task before it runs it as the ``node`` op would a client's.
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import partial
from typing import Any

from csp_web.core.api.errors import OpError
from csp_web.infra.redis_link import RedisLink, RedisUnavailable
from protocol import ErrorCode

from .wire import ACTIONS, NAME, MediaInfo

MEDIA_CHUNK_BYTES = 1024 * 1024  # one Redis call each: well inside a call's deadline locally
MEDIA_TTL_S = 60  # a capture left by a caller that gave up is gone after this
MAX_PARAMS_CHARS = 8192  # as ops_node.MAX_PARAMS_CHARS: a peer's task is checked again here
CODES = {str(code): code for code in ErrorCode}  # a holder's answer back to its code


async def store_media(link: RedisLink, rid: str, data: bytes) -> None:
    """Leave ``data`` for the caller of request ``rid`` (1 MiB chunks, ``MEDIA_TTL_S``);
    raises OpError node_unavailable when Redis is unavailable."""
    key = link.key("node", "media", rid)

    def push(r: Any, *, chunk: bytes) -> Any:
        pipe = r.pipeline(transaction=False)
        pipe.rpush(key, chunk)
        pipe.expire(key, MEDIA_TTL_S)
        return pipe.execute()

    try:
        for start in range(0, len(data), MEDIA_CHUNK_BYTES):
            chunk = data[start : start + MEDIA_CHUNK_BYTES]
            await link.call(partial(push, chunk=chunk), "node_media_put")
    except RedisUnavailable:
        raise OpError(
            ErrorCode.NODE_UNAVAILABLE, "media not handed over (redis)", scope=("node",)
        ) from None


async def fetch_media(link: RedisLink, rid: str, info: MediaInfo) -> bytes:
    """The capture a holder left for request ``rid``, checked against ``info`` (size,
    SHA-256), its key deleted; raises OpError node_unavailable (Redis) or node_error."""
    key = link.key("node", "media", rid)
    parts: list[bytes] = []
    try:
        for index in range(math.ceil(info.size / MEDIA_CHUNK_BYTES)):
            parts.append(await link.call(partial(_chunk, key, index), "node_media"))
        await link.call(lambda r: r.delete(key), "node_media_done")
    except RedisUnavailable:
        raise OpError(ErrorCode.NODE_UNAVAILABLE, "media lost (redis)", scope=("node",)) from None
    data = b"".join(parts)
    if len(data) != info.size or hashlib.sha256(data).hexdigest() != info.sha256:
        raise OpError(ErrorCode.NODE_ERROR, "forwarded media incomplete", scope=("node",))
    return data


def _chunk(key: str, index: int, r: Any) -> bytes:
    return bytes(r.lindex(key, index) or b"")


def checked_task(message: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """A peer's node task checked as the ``node`` op checks a client's (raises OpError)."""
    name, action, params = message.get("name"), message.get("action"), message.get("params")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise OpError(ErrorCode.NODE_UNKNOWN, str(name)[:64], scope=("node",))
    if action not in ACTIONS:
        raise OpError(ErrorCode.INVALID_FIELD, "ACTION", scope=("node",))
    if not isinstance(params, dict) or len(json.dumps(params)) > MAX_PARAMS_CHARS:
        raise OpError(ErrorCode.INVALID_FIELD, "PARAMS", scope=("node",))
    return name, str(action), params

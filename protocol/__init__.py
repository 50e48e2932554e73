"""CSP/1, the plain-text line protocol of agent specialists, as a sans-IO codec.

Bytes in, frames out; frames in, bytes out. Nothing here does I/O or imports trio, httpx or
yaml: the daemon, the client and the tests all drive the same ``Connection``. The normative
description is SPEC.md beside this file.
"""

# csp-web's own: ``csp_web.app.start`` tells this package from another named ``protocol``.
__csp_web__ = True

from ._connection import CLOSED, NEED_DATA, Connection, Sentinel
from ._errors import ProtocolError
from ._frames import Field, Frame, Reply, Status, Task
from ._limits import Limits
from ._numbers import NumberError, parse_decimal, parse_int, parse_uint
from ._serialize import serialize
from ._trace import MAX_TRACEPARENT_CHARS, TraceParent, TraceParentError, parse_traceparent
from ._values import FREE_TEXT_KEYS
from .codes import ErrorCode

__all__ = [
    "CLOSED",
    "FREE_TEXT_KEYS",
    "MAX_TRACEPARENT_CHARS",
    "NEED_DATA",
    "Connection",
    "ErrorCode",
    "Field",
    "Frame",
    "Limits",
    "NumberError",
    "ProtocolError",
    "Reply",
    "Sentinel",
    "Status",
    "Task",
    "TraceParent",
    "TraceParentError",
    "parse_decimal",
    "parse_int",
    "parse_traceparent",
    "parse_uint",
    "serialize",
]

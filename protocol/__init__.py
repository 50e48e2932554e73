"""CSP/1, the plain-text line protocol of agent specialists, as a sans-IO codec.

Bytes in, frames out; frames in, bytes out. Nothing here does I/O or imports trio, httpx or
yaml: the daemon, the client and the tests all drive the same ``Connection``. The normative
description is SPEC.md beside this file.

The public names are loaded on first use (PEP 562's module ``__getattr__``), not when the
package is: ``python -m protocol.codes`` then runs ``codes`` once, as ``__main__``, instead of
after ``import protocol`` already imported it (runpy's RuntimeWarning, and two ErrorCode
classes in one process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# csp-web's own: ``csp_web.app.start`` tells this package from another named ``protocol``.
__csp_web__ = True

if TYPE_CHECKING:
    from ._budget import DIMENSIONS, MAX_AMOUNT, Budget, BudgetError, format_budget, parse_budget
    from ._connection import CLOSED, NEED_DATA, Connection, Sentinel
    from ._errors import ProtocolError
    from ._frames import Field, Frame, Reply, Status, Task
    from ._limits import Limits
    from ._numbers import NumberError, format_decimal, parse_decimal, parse_int, parse_uint
    from ._serialize import Oversize, oversize, serialize
    from ._trace import MAX_TRACEPARENT_CHARS, TraceParent, TraceParentError, parse_traceparent
    from ._values import FREE_TEXT_KEYS
    from .codes import ErrorCode

# Each public name and the module that defines it.
_SOURCES = {
    "DIMENSIONS": "_budget",
    "MAX_AMOUNT": "_budget",
    "Budget": "_budget",
    "BudgetError": "_budget",
    "format_budget": "_budget",
    "parse_budget": "_budget",
    "CLOSED": "_connection",
    "NEED_DATA": "_connection",
    "Connection": "_connection",
    "Sentinel": "_connection",
    "ProtocolError": "_errors",
    "Field": "_frames",
    "Frame": "_frames",
    "Reply": "_frames",
    "Status": "_frames",
    "Task": "_frames",
    "Limits": "_limits",
    "NumberError": "_numbers",
    "format_decimal": "_numbers",
    "parse_decimal": "_numbers",
    "parse_int": "_numbers",
    "parse_uint": "_numbers",
    "Oversize": "_serialize",
    "oversize": "_serialize",
    "serialize": "_serialize",
    "MAX_TRACEPARENT_CHARS": "_trace",
    "TraceParent": "_trace",
    "TraceParentError": "_trace",
    "parse_traceparent": "_trace",
    "FREE_TEXT_KEYS": "_values",
    "ErrorCode": "codes",
}

__all__ = [
    "CLOSED",
    "DIMENSIONS",
    "FREE_TEXT_KEYS",
    "MAX_AMOUNT",
    "MAX_TRACEPARENT_CHARS",
    "NEED_DATA",
    "Budget",
    "BudgetError",
    "Connection",
    "ErrorCode",
    "Field",
    "Frame",
    "Limits",
    "NumberError",
    "Oversize",
    "ProtocolError",
    "Reply",
    "Sentinel",
    "Status",
    "Task",
    "TraceParent",
    "TraceParentError",
    "format_budget",
    "format_decimal",
    "oversize",
    "parse_budget",
    "parse_decimal",
    "parse_int",
    "parse_traceparent",
    "parse_uint",
    "serialize",
]


def __getattr__(name: str) -> object:
    """The public ``name``, imported from its module on first use and kept here after."""
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{source}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_SOURCES})

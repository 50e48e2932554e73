"""The op table: one entry per (REQ, IN), with its fields, OUT kind and handler (SPEC D-1, D-2).

Specialists are plain async functions listed here by the code that composes the daemon; there
is no decorator magic and no dispatch by attribute name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from csp_web.core.errors import FieldError
from csp_web.core.fields import FieldSpec, Params
from protocol import ErrorCode, Task

if TYPE_CHECKING:
    from csp_web.core.context import OpContext
    from csp_web.core.replies import Result

Handler = Callable[[Params, "OpContext"], Awaitable["Result"]]


@dataclass(frozen=True)
class Op:
    """One operation: ``TASK REQ:<req> IN:<domain> OUT:<out>`` runs ``handler``.

    ``specialist`` names the slot pool it runs in (web, tool, memory, sys); ``inline`` names
    the field that inline header text fills (SPEC D-4).
    """

    req: str
    domain: str
    out: str
    specialist: str
    handler: Handler
    fields: tuple[FieldSpec, ...] = ()
    inline: str | None = None
    doc: str = ""

    def describe(self) -> dict[str, Any]:
        """The JSON-able entry ``REQ:ops`` prints for this op."""
        out: dict[str, Any] = {"req": self.req, "in": self.domain, "out": self.out}
        if self.inline:
            out["inline"] = self.inline
        out["fields"] = [spec.describe() for spec in self.fields]
        if self.doc:
            out["doc"] = self.doc
        return out


class Registry:
    """Every op the daemon runs, keyed by (REQ, IN)."""

    def __init__(self, ops: Iterable[Op]) -> None:
        self._ops: dict[tuple[str, str], Op] = {}
        self._domains: dict[str, list[str]] = {}
        for op in ops:
            key = (op.req, op.domain)
            if key in self._ops:
                raise ValueError(f"op {op.req} IN:{op.domain} registered twice")
            self._ops[key] = op
            self._domains.setdefault(op.req, []).append(op.domain)

    def __iter__(self) -> Any:
        return iter(sorted(self._ops.values(), key=lambda op: (op.domain, op.req)))

    def __len__(self) -> int:
        return len(self._ops)

    def lookup(self, task: Task) -> Op:
        """The op ``task`` names; raises FieldError(unknown_op, wrong_domain, wrong_out)."""
        op = self._ops.get((task.req, task.domain))
        if op is None:
            domains = self._domains.get(task.req)
            if domains is None:
                raise FieldError(ErrorCode.UNKNOWN_OP, task.req)
            raise FieldError(ErrorCode.WRONG_DOMAIN, f"{task.req} runs IN:{'|'.join(domains)}")
        if task.out != op.out:
            raise FieldError(ErrorCode.WRONG_OUT, f"{task.req} gives OUT:{op.out}")
        return op

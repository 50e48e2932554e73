"""The op table: one entry per (REQ, IN), with its fields, OUT kind and handler (SPEC D-1, D-2).

An ``Op[S]`` is a static declaration whose handler takes the services ``S`` of its
specialist; ``bind`` pairs it with the opened services at composition (core.compose), so a
handler gets its own typed services and nothing else. The ``OpTable`` is the declarations
alone (what ``REQ:ops``, the ops reference and cron's task check read), known before
anything opens; the ``Registry`` indexes the bound ops the dispatcher runs.

There is no decorator magic and no dispatch by attribute name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeAlias, TypeVar

from csp_web.core.api.errors import FieldError
from csp_web.core.api.fields import FRAME_FIELDS, Example, FieldSpec, Params, ReplyField
from protocol import ErrorCode, Task

if TYPE_CHECKING:
    from csp_web.core.api.context import OpContext
    from csp_web.core.api.replies import Result

S = TypeVar("S")
Handler: TypeAlias = Callable[[Params, "OpContext", S], Awaitable["Result"]]
Run: TypeAlias = Callable[[Params, "OpContext"], Awaitable["Result"]]
# An op's answer without waiting (no checkpoint, no I/O), or None: then it runs as a task.
NowHandler: TypeAlias = Callable[[Params, "OpContext", S], "Result | None"]
AnswerNow: TypeAlias = Callable[[Params, "OpContext"], "Result | None"]


@dataclass(frozen=True)
class Hot(Generic[S]):
    """How an op may be answered at once, in the connection's reader (``Dispatcher.try_now``,
    dispatch/hot.py) rather than as a task of its own: ``likely(task, services)`` is a cheap
    guess that ``answer`` will not decline (a cache hit: its entry is in memory), asked
    before the frame takes its turn; ``answer(params, ctx, services)`` gives exactly the
    result ``handler`` would, or None (then the handler runs as usual). ``answer`` must not
    wait, and must change nothing before it knows it answers (a declined frame runs again)."""

    likely: Callable[[Task, S], bool]
    answer: NowHandler[S]


@dataclass(frozen=True)
class Effects:
    """What running an op does besides answering, as MCP's tool annotations say it (an MCP
    host may ask before a call that is not ``read_only``, or warn of a ``destructive`` one).

    ``read_only``: it changes nothing anywhere (no file, job, memory or remote state);
    ``destructive``: it may delete or overwrite what exists (meaningful when not read-only);
    ``idempotent``: a second identical call has no effect beyond the first's;
    ``open_world``: it reaches outside this machine (the web, an API, a paired node).
    The defaults are MCP's own for a tool that says nothing: the worst a client assumes.
    """

    read_only: bool = False
    destructive: bool = True
    idempotent: bool = False
    open_world: bool = True

    def describe(self) -> dict[str, bool]:
        """The JSON-able ``effects`` entry of ``REQ:ops``."""
        return {
            "read_only": self.read_only,
            "destructive": self.destructive,
            "idempotent": self.idempotent,
            "open_world": self.open_world,
        }


# Ops that only read: what a fetch, a search or a status query does (the cache they fill
# is the daemon's own, not a change the caller asked for).
READS_WEB = Effects(read_only=True, destructive=False, idempotent=True, open_world=True)
READS_LOCAL = Effects(read_only=True, destructive=False, idempotent=True, open_world=False)


@dataclass(frozen=True)
class Op(Generic[S]):
    """One operation: ``TASK REQ:<req> IN:<domain> OUT:<out>`` runs ``handler``.

    ``specialist`` names the slot pool it runs in (web, tool, memory, sys); ``inline`` names
    the field that inline header text fills (SPEC D-4); ``replies`` the fields its reply
    can carry beyond the common ones, and ``example`` one exchange (docs/ops.md).
    ``effects`` what it does besides answering (MCP's tool annotations).
    ``instant``: the handler never waits (no sleep, no I/O), so a connection runs it
    without a task of its own.
    """

    req: str
    domain: str
    out: str
    specialist: str
    handler: Handler[S]
    fields: tuple[FieldSpec, ...] = ()
    inline: str | None = None
    doc: str = ""
    replies: tuple[ReplyField, ...] = ()
    example: Example | None = None
    instant: bool = False
    effects: Effects = Effects()
    hot: Hot[S] | None = None

    def describe(self) -> dict[str, Any]:
        """The JSON-able entry ``REQ:ops`` prints for this op (SPEC D-5): its own fields,
        then those every frame may carry (``frame_fields``, D-3)."""
        out: dict[str, Any] = {"req": self.req, "in": self.domain, "out": self.out}
        if self.inline:
            out["inline"] = self.inline
        out["fields"] = [spec.describe() for spec in self.fields]
        out["frame_fields"] = [field.spec.describe() for field in FRAME_FIELDS]
        out["replies"] = [field.describe() for field in self.replies]
        if self.doc:
            out["doc"] = self.doc
        out["effects"] = self.effects.describe()
        return out


class OpSpec(Protocol):
    """An op's declaration without its handler: what the table and the dispatcher read."""

    @property
    def req(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def out(self) -> str: ...
    @property
    def specialist(self) -> str: ...
    @property
    def fields(self) -> tuple[FieldSpec, ...]: ...
    @property
    def inline(self) -> str | None: ...
    @property
    def doc(self) -> str: ...
    @property
    def replies(self) -> tuple[ReplyField, ...]: ...
    @property
    def example(self) -> Example | None: ...
    @property
    def instant(self) -> bool: ...
    @property
    def effects(self) -> Effects: ...

    def describe(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class BoundOp:
    """An op bound to its services: ``run(params, ctx)`` is its handler with them;
    ``likely_now`` and ``answer_now`` its ``Hot`` route's, when it has one."""

    spec: OpSpec
    run: Run
    likely_now: Callable[[Task], bool] | None = None
    answer_now: AnswerNow | None = None

    @property
    def req(self) -> str:
        return self.spec.req

    @property
    def domain(self) -> str:
        return self.spec.domain

    @property
    def out(self) -> str:
        return self.spec.out


def bind(op: Op[S], services: S) -> BoundOp:
    """``op`` with ``services``: its handler gets them as its third argument."""
    handler = op.handler

    def run(params: Params, ctx: OpContext) -> Awaitable[Result]:
        # The handler's own coroutine, not one wrapping it: a coroutine less per op run.
        return handler(params, ctx, services)

    if op.hot is None:
        return BoundOp(op, run)
    likely, answer = op.hot.likely, op.hot.answer

    def likely_now(task: Task) -> bool:
        return likely(task, services)

    def answer_now(params: Params, ctx: OpContext) -> Result | None:
        return answer(params, ctx, services)

    return BoundOp(op, run, likely_now, answer_now)


class _Keyed(Protocol):
    @property
    def req(self) -> str: ...
    @property
    def domain(self) -> str: ...
    @property
    def out(self) -> str: ...


K = TypeVar("K", bound=_Keyed)


class _Index(Generic[K]):
    """Entries keyed by (REQ, IN); a key given twice raises ValueError."""

    def __init__(self, entries: Iterable[K]) -> None:
        self._entries: dict[tuple[str, str], K] = {}
        self._domains: dict[str, list[str]] = {}
        for entry in entries:
            key = (entry.req, entry.domain)
            if key in self._entries:
                raise ValueError(f"op {entry.req} IN:{entry.domain} registered twice")
            self._entries[key] = entry
            self._domains.setdefault(entry.req, []).append(entry.domain)

    def __iter__(self) -> Iterator[K]:
        return iter(sorted(self._entries.values(), key=lambda e: (e.domain, e.req)))

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, task: Task) -> K:
        """The entry ``task`` names; raises FieldError(unknown_op, wrong_domain, wrong_out)."""
        entry = self._entries.get((task.req, task.domain))
        if entry is None:
            domains = self._domains.get(task.req)
            if domains is None:
                raise FieldError(ErrorCode.UNKNOWN_OP, _echoed(task.req))
            raise FieldError(ErrorCode.WRONG_DOMAIN, f"{task.req} runs IN:{'|'.join(domains)}")
        if task.out != entry.out:
            raise FieldError(ErrorCode.WRONG_OUT, f"{task.req} gives OUT:{entry.out}")
        return entry


# An unknown REQ is named in its FAIL and its audit record up to this many characters: a
# client's typo is shown whole, a 1 MiB name is not copied into every reply and record.
ECHOED_NAME_CHARS = 64


def _echoed(name: str) -> str:
    if len(name) <= ECHOED_NAME_CHARS:
        return name
    return f"{name[:ECHOED_NAME_CHARS]}... ({len(name)} characters)"


class OpTable(_Index[OpSpec]):
    """Every op's declaration, sorted by (IN, REQ): data before anything opens."""


class Registry(_Index[BoundOp]):
    """Every bound op the daemon runs, keyed by (REQ, IN)."""

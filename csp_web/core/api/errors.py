"""The exceptions that become FAIL replies.

    OpError                 any failure a handler wants to report; carries its catalogue code
    ├── FieldError          a request field is missing, unknown or malformed (dispatch)
    ├── Busy                admission refused the task (specialist slots, outbox)
    └── StorageFull         a disk the daemon writes to is full (``csp_web.core.api.storage``)

Handlers raise these; ``csp_web.core.dispatch.dispatcher`` is the one place that turns them, and
any other exception, into a reply frame. Third-party errors (httpx, OSError, trio) are translated
into ``OpError`` at the seam where they are caught, by a table in the module that owns the seam.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from csp_web.core.api.audit import OpAudit
from protocol import ErrorCode


class OpError(Exception):
    """A task failed with ``code``; ``detail`` follows the colon on the ERROR line.

    ``scope`` and ``data`` fill the reply's SCOPE and DATA lines (the seeds show
    ``SCOPE [shell]`` / ``DATA exit:1`` on FAIL); ``fields`` are further reply lines, such as
    ``URL`` or ``STDERR_SUMMARY``, written after ERROR in the order given. ``audit`` is what
    the op adds to its audit record however it failed (``csp_web.core.api.audit``).
    """

    def __init__(
        self,
        code: ErrorCode,
        detail: str = "",
        *,
        scope: Iterable[str] = (),
        data: str = "none",
        fields: Iterable[tuple[str, str]] = (),
        audit: OpAudit | None = None,
    ) -> None:
        super().__init__(f"{code}:{detail}")
        self.code = code
        self.detail = detail
        self.scope = tuple(scope)
        self.data = data
        self.fields = tuple(fields)
        self.audit = audit

    @property
    def wire_text(self) -> str:
        """The ERROR line's value, ``code:detail``: its one spelling (replies, run outcomes)."""
        return f"{self.code}:{self.detail}"


class FieldError(OpError):
    """A request field failed validation before the handler ran."""


class Busy(OpError):
    """Admission refused the task at once rather than let it wait without bound."""


class StorageFull(OpError):
    """A write to one of the daemon's stores failed for want of space: ``which`` is
    ``outbox``, ``cache``, ``memory``, ``media``, ``state`` or ``workspace`` (web write_file),
    the ERROR line's detail."""

    def __init__(self, which: str) -> None:
        super().__init__(ErrorCode.STORAGE_FULL, which)
        self.which = which


@contextmanager
def audit_failures(audit: OpAudit) -> Iterator[None]:
    """An OpError leaving the block carries ``audit``, unless it carries one already (the
    innermost, most detailed audit wins)."""
    try:
        yield
    except OpError as exc:
        if exc.audit is None:
            exc.audit = audit
        raise

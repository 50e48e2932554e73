"""What an op adds to its one audit record (SPEC M-1): a typed, frozen value per op kind.

A handler returns its audit on its result (``Result.audit``), or raises it on its error
(``OpError.audit``); the dispatcher writes one ``audit`` record per task, the common fields
(op, peer, outcome, duration) beside these. Bulky artefacts (an exec's full output) stay
writes of their own, which the audit names by path. ``csp_web.core.api.errors.audit_failures``
attaches an audit to the OpError leaving a block.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class OpAudit:
    """The base of every op's audit: its dataclass fields become the record's own fields
    (never a credential: an op masks what it must before it builds one)."""

    def record_fields(self) -> dict[str, Any]:
        """The fields this audit adds to the record, by name."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

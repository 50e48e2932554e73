"""What an op adds to its one audit record (SPEC M-1): a typed, frozen value per op kind.

A handler returns its audit on its result (``Result.audit``), or raises it on its error
(``OpError.audit``); the dispatcher writes one ``audit`` record per task, the common fields
(op, peer, outcome, duration) beside these. Bulky artefacts (an exec's full output) stay
writes of their own, which the audit names by path. ``csp_web.core.api.errors.audit_failures``
attaches an audit to the OpError leaving a block.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

# A URL's userinfo: what comes before the last "@" of its authority. The authority follows a
# special scheme's colon and whatever slashes or backslashes come next (WHATWG URL reads
# "https:u:p@h" and "https:\\u:p@h" as "https://u:p@h"), or any "//"; it ends at the first
# slash, backslash, "?", "#" or space. "mailto:bob@x" and "npm:lodash@4" have none.
_USERINFO = re.compile(r"(?i)(\b(?:https?|wss?|ftp|file):[/\\]*|//)[^/\\?#\s]*@")


def redact_userinfo(text: str) -> str:
    """``text`` with the userinfo (``user:password@``) of each URL in it written ``***@``,
    the rest kept: the one way a client's URL, or text that may hold one, reaches an audit
    record, a memory write or a FAIL reply. The gate refuses such a URL
    (``url_rejected:userinfo``); what it refused is still recorded, without the password.
    Text without an "@" is returned as it is after one scan."""
    if "@" not in text:
        return text
    return _USERINFO.sub(r"\1***@", text)


@dataclasses.dataclass(frozen=True)
class OpAudit:
    """The base of every op's audit: its dataclass fields become the record's own fields
    (never a credential: an op masks what it must before it builds one)."""

    def record_fields(self) -> dict[str, Any]:
        """The fields this audit adds to the record, by name; each text with
        ``redact_userinfo`` applied, whatever op built it (a URL, a command, a query)."""
        return {
            field.name: _redacted(getattr(self, field.name)) for field in dataclasses.fields(self)
        }


def _redacted(value: Any) -> Any:
    return redact_userinfo(value) if isinstance(value, str) else value

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

# A URL's userinfo in free text: what comes before the last "@" of its authority. The
# authority follows a scheme and "//", or a special scheme's colon and whatever slashes or
# backslashes come next (WHATWG URL reads "https:u:p@h" and "https:\\u:p@h" as
# "https://u:p@h"); it ends at the first slash, "?", "#" or space, and at a backslash for a
# special scheme. A scheme starts no word: "x-file:" is not "file:". Without a scheme there
# is no authority ("echo //a@b", a query's "?a=//b@c"), nor without "//" after another
# scheme's colon ("mailto:bob@x", "npm:lodash@4", "x-file:bob@corp").
_SPECIAL = "https?|wss?|ftp|file"
_USERINFO = re.compile(
    r"(?i)(?<![a-z0-9+.\-])"
    rf"(?:((?:https?|wss?|ftp):[/\\]*|file:[/\\]{{2}})[^/\\?#\s]*@"
    rf"|((?!(?:{_SPECIAL}):)[a-z][a-z0-9+.\-]*://)[^/?#\s]*@)"
)
# A value that is one URL: its scheme, the schemes WHATWG calls special, and what is stripped
# before it is read (leading C0 controls and spaces; tabs and line breaks anywhere).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_SPECIAL_SCHEMES = frozenset({"http", "https", "ws", "wss", "ftp", "file"})
_DROPPED = frozenset("\t\n\r")
_LEADING = "".join(map(chr, range(0x21)))


def redact_userinfo(text: str) -> str:
    """``text`` with the userinfo (``user:password@``) of each URL in it written ``***@``,
    the rest kept: the one way free text that may hold a URL (a command, a query, an error's
    detail) reaches an audit record, a memory write or a FAIL reply. The gate refuses such a
    URL (``url_rejected:userinfo``); what it refused is still recorded, without the
    password. A value that is one URL goes through ``redact_url``, which finds a userinfo
    holding a space too. Text without an "@" is returned as it is after one scan."""
    if "@" not in text:
        return text
    return _USERINFO.sub(_stars, text)


def _stars(match: re.Match[str]) -> str:
    return f"{match.group(1) or match.group(2)}***@"


def redact_url(url: str) -> str:
    """``url``, a value that is one URL (a URL or ENDPOINT field, an audit's ``url``), with
    its userinfo written ``***``, read by the URL's structure as WHATWG and urlsplit read it:
    after ``scheme://`` (a special scheme's slashes or backslashes, or none: ``https:u:p@h``;
    or a scheme-relative ``//``) the authority runs to the first ``/``, ``?``, ``#`` (or
    backslash, for a special scheme), and everything before its last "@" is userinfo, a
    space, tab or U+3000 in it too: the gate refuses such a URL (``url_rejected:whitespace``)
    before it reads its userinfo. Text after the authority goes through
    ``redact_userinfo``; a value with no authority (``npm:lodash@4``) only through that."""
    if "@" not in url:
        return url
    kept = [i for i, char in enumerate(url) if char not in _DROPPED]
    read = "".join(url[i] for i in kept)
    at = len(read) - len(read.lstrip(_LEADING))
    scheme = _SCHEME.match(read, at)
    stops = "/?#"
    if scheme is None:
        if not read.startswith("//", at):
            return redact_userinfo(url)
        at += 2
    elif scheme.group()[:-1].lower() in _SPECIAL_SCHEMES:
        at, stops = scheme.end(), "/\\?#"
        while at < len(read) and read[at] in "/\\":
            at += 1
    elif read.startswith("//", scheme.end()):
        at = scheme.end() + 2
    else:
        return redact_userinfo(url)
    end = next((i for i in range(at, len(read)) if read[i] in stops), len(read))
    last = read.rfind("@", at, end)
    if last < 0:
        return redact_userinfo(url)
    # Back to ``url``'s own positions: a tab dropped inside the userinfo goes with it.
    return redact_userinfo(url[: kept[at]] + "***" + url[kept[last] :])


@dataclasses.dataclass(frozen=True)
class OpAudit:
    """The base of every op's audit: its dataclass fields become the record's own fields
    (never a credential: an op masks what it must before it builds one)."""

    def record_fields(self) -> dict[str, Any]:
        """The fields this audit adds to the record, by name; each text with
        ``redact_userinfo`` applied, whatever op built it (a URL, a command, a query), and
        ``redact_url`` to one that is a URL (``url``, ``endpoint``)."""
        return {
            field.name: redacted(field.name, getattr(self, field.name))
            for field in dataclasses.fields(self)
        }


# The fields whose value is one URL, redacted by its structure (``redact_url``): an audit's
# ``url`` and ``endpoint``, a FAIL reply's ``URL`` and ``ENDPOINT`` (names compared lowercased).
URL_FIELDS = frozenset({"url", "endpoint"})


def redacted(name: str, value: Any) -> Any:
    """``value`` of the field ``name`` (an audit's or a reply's) without a URL's userinfo:
    ``redact_url`` for a field in ``URL_FIELDS``, else ``redact_userinfo``; a value that is
    not text as it is."""
    if not isinstance(value, str):
        return value
    return redact_url(value) if name.lower() in URL_FIELDS else redact_userinfo(value)

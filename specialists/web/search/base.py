"""What every search backend shares: the query it is asked, the hits it gives, how it fails.

A backend is sans-IO, like the codec: ``build`` turns a query into an ``HttpRequest`` and
``parse`` turns the response into hits or a ``BackendFailure``. ``chain`` owns the I/O, the
rate limits, the quota and the circuit breakers.
"""

from __future__ import annotations

import datetime
import html
import re
import unicodedata
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from csp_web.net import FetchResult

Freshness = str  # "pd" | "pw" | "pm" | "py": past day, week, month, year (Brave's spelling)


Vertical = str  # "web" | "news" | "images" | "videos"
VERTICALS = ("web", "news", "images", "videos")


@dataclass(frozen=True)
class SearchQuery:
    """One search as the op asks it: ``count`` results wanted after de-duplication.

    The filters go to each backend in its own syntax where it has one; ``filters.admits``
    holds every hit to them again whatever the backend did. ``after`` and ``before`` are
    inclusive; ``today`` is the op's date, so a build that needs a range's open end reads no
    clock; ``widened`` is the FRESHNESS that covers ``after`` for backends with no range.
    """

    text: str
    count: int
    freshness: Freshness | None = None
    sites: tuple[str, ...] = ()
    exclude_sites: tuple[str, ...] = ()
    after: datetime.date | None = None
    before: datetime.date | None = None
    undated: str = "keep"  # keep | drop: hits without a date when a range is asked
    country: str | None = None  # ISO 3166-1 alpha-2, lower case
    lang: str | None = None  # a language code, lower case
    vertical: Vertical = "web"
    today: datetime.date | None = None
    widened: Freshness | None = None

    @property
    def dated(self) -> bool:
        """Whether a published-date range is asked."""
        return self.after is not None or self.before is not None

    def range_ends(self) -> tuple[datetime.date, datetime.date]:
        """The range as two dates: an open start is 1990-01-01 (before any dated web page),
        an open end ``today`` (which the op sets; without it, 2200-01-01)."""
        start = self.after or datetime.date(1990, 1, 1)
        return start, self.before or self.today or datetime.date(2200, 1, 1)


def site_operators(query: SearchQuery) -> str:
    """SITE and EXCLUDE_SITE as the ``site:`` operators Brave, DuckDuckGo and SearXNG's
    engines read: `` (site:a OR site:b) -site:c``; empty without them."""
    parts = []
    if len(query.sites) == 1:
        parts.append(f"site:{query.sites[0]}")
    elif query.sites:
        parts.append("(" + " OR ".join(f"site:{site}" for site in query.sites) + ")")
    parts += [f"-site:{site}" for site in query.exclude_sites]
    return (" " + " ".join(parts)) if parts else ""


@dataclass(frozen=True)
class Hit:
    """One result as a backend ranked it; ``snippet`` and ``title`` are plain text; the
    other fields only when the backend gives them."""

    url: str
    title: str
    snippet: str
    score: float | None = None
    thumbnail: str | None = None
    published: str | None = None  # UTC ISO-8601 (dates.published): a date, or a Z datetime
    extra_snippets: tuple[str, ...] = ()  # at most MAX_EXTRA_SNIPPETS, each plain text
    favicon: str | None = None  # an https URL
    lang: str | None = None  # the page's language code as the backend names it
    sources: tuple[str, ...] = ()  # the backends whose lists held it (fused answers only)


@dataclass(frozen=True)
class HttpRequest:
    """What a backend wants sent; ``secret_headers`` carry the key and never follow a redirect
    to another origin."""

    url: str
    method: str = "GET"
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes | None = None
    secret_headers: tuple[str, ...] = ()


class BackendFailure(Exception):
    """A backend gave no answer. ``reason`` is lower_snake (it becomes the ERROR detail);
    ``hint`` is for humans. ``counts`` is False for our own refusals (no key, local rate
    limit, quota spent), which say nothing about the backend's health; ``rate`` marks the
    rate-limit family; ``retry_after_s`` is when it may answer again."""

    def __init__(
        self,
        reason: str,
        hint: str = "",
        *,
        counts: bool = True,
        rate: bool = False,
        retry_after_s: float | None = None,
        source: str | None = None,
    ) -> None:
        super().__init__(f"{reason}: {hint}" if hint else reason)
        self.reason = reason
        self.hint = hint
        self.counts = counts
        self.rate = rate
        self.retry_after_s = retry_after_s
        self.source = source  # the backend's own text ``reason`` was made from, if any

    def redact(self, secret: str) -> None:
        """Take ``secret`` out of ``reason`` and ``hint``, in any letter case. A reason made
        from the backend's own text is made again from that text redacted, so neither its
        lower_snake spelling nor the 64-character cut can keep a piece of the secret."""
        if self.source is not None:
            self.reason = reason_code(redact(self.source, secret))
        else:
            self.reason = self.reason.replace(reason_code(secret), "redacted")
        self.hint = redact(self.hint, secret)


def redact(text: str, secret: str) -> str:
    """``text`` with every occurrence of ``secret`` (any letter case) as ``[redacted]``."""
    if not secret:
        return text
    return re.sub(re.escape(secret), "[redacted]", text, flags=re.IGNORECASE)


@dataclass(frozen=True)
class Backend:
    """One kind of search provider (``SearchProvider.kind``)."""

    kind: str
    default_base_url: str | None
    needs_key: bool
    build: Callable[[SearchQuery, str, str | None], HttpRequest]
    parse: Callable[[FetchResult], list[Hit]]
    # How many results the backend says it has in all, when it says (SearXNG does).
    total: Callable[[FetchResult], int | None] | None = None
    verticals: frozenset[Vertical] = frozenset({"web"})


# What a backend's JSON holds where its parse reads: a type; a nested object's own Shape; or
# ``[type]``, a list whose items are of that type. Members nobody reads are not named.
Shape = Mapping[str, Union[type, "Shape", list[type]]]


def shaped(value: object, shape: Shape, where: str) -> dict[str, Any]:
    """``value`` as an object each of whose members in ``shape`` is absent, null (read as
    absent: JSON APIs send both) or of its type, nested objects and list items checked in
    turn. Anything else is the backend's BackendFailure("bad_response") naming the first
    member that is not, never an answer read as empty: an API that changed its format, or
    an answer that is not its own, must show as a failure and fall back."""
    if not isinstance(value, dict):
        raise BackendFailure("bad_response", f"{where or 'the answer'} is not an object")
    for key, kind in shape.items():
        member, path = value.get(key), f"{where}.{key}" if where else key
        if member is None:
            continue
        if isinstance(kind, Mapping):
            shaped(member, kind, path)
        elif isinstance(kind, list):
            if not isinstance(member, list) or not all(_is(item, kind[0]) for item in member):
                raise BackendFailure("bad_response", f"{path} is not a list of {kind[0].__name__}")
        elif not _is(member, kind):
            raise BackendFailure("bad_response", f"{path} is not a {kind.__name__}")
    return value


def _is(value: object, kind: type) -> bool:
    """``isinstance``, but JSON's true and false are no number, and an integer is a float
    (as JSON has one number type)."""
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, int | float) if kind is float else isinstance(value, kind)


def listed(document: Mapping[str, Any], key: str, shape: Shape, where: str) -> list[dict[str, Any]]:
    """The objects of list ``document[key]``, each ``shaped`` and holding a string ``url``;
    an absent or null list is no results."""
    items = document.get(key)
    if items is None:
        return []
    path = f"{where}.{key}" if where else key
    if not isinstance(items, list):
        raise BackendFailure("bad_response", f"{path} is not a list")
    checked = [shaped(item, shape, f"{path}[{index}]") for index, item in enumerate(items)]
    for index, item in enumerate(checked):
        if not isinstance(item.get("url"), str):
            raise BackendFailure("bad_response", f"{path}[{index}].url is not a string")
    return checked


def status_failure(result: FetchResult) -> BackendFailure:
    """The generic failure for a status the backend has no special reading of."""
    return BackendFailure(f"http_{result.status_code}", f"HTTP {result.status_code}")


def error_failure(
    result: FetchResult, document: object, *, code_key: str, message_key: str
) -> BackendFailure:
    """The failure a JSON API names in ``{"error": {code_key: ..., message_key: ...}}``
    (Brave: code/detail; Perplexity: type/message), else the HTTP status's."""
    error = document.get("error") if isinstance(document, dict) else None
    if isinstance(error, dict) and isinstance(error.get(code_key), str):
        message = clean_text(error.get(message_key), markup=False)
        code = error[code_key]
        return BackendFailure(reason_code(code), message, source=code)
    return status_failure(result)


def with_query(base_url: str, params: dict[str, str]) -> str:
    """``base_url`` with ``params`` added to whatever query it already has."""
    parts = urllib.parse.urlsplit(base_url)
    query = urllib.parse.parse_qsl(parts.query) + list(params.items())
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def reason_code(text: str) -> str:
    """``text`` as a lower_snake reason for an ERROR detail (at most 64 characters)."""
    return re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_")[:64] or "error"


_TAG = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")
_DROP_CATEGORIES = frozenset({"Cc", "Cf", "Cs"})
MAX_TEXT_CHARS = 300  # seed 000: "SNIPPET <max_300_chars_summary>"
MAX_EXTRA_SNIPPETS = 5  # Brave's extra_snippets: "up to 5 alternative excerpts"
_LANG = re.compile(r"[a-z]{2,3}(?:-[a-z0-9]{2,8})?")
_HTTPS_URL = re.compile(r'https://[^\x00-\x20\x7f-\uffff"<>\\^`{|}]+')
MAX_ICON_URL_CHARS = 2048  # the URL length every browser and CDN accepts


def https_url(value: object) -> str | None:
    """``value`` when it is an https URL of printable ASCII (``//host/...`` read as https) of
    at most MAX_ICON_URL_CHARS, else None: an icon or thumbnail is shown to clients on a
    reply line, so never a plain-http or script URL, nor a space, quote or control character
    that would end or break the line."""
    if not isinstance(value, str):
        return None
    if value.startswith("//"):
        value = "https:" + value
    if len(value) > MAX_ICON_URL_CHARS or not _HTTPS_URL.fullmatch(value):
        return None
    return value


def lang_code(value: object) -> str | None:
    """``value`` as a lower-case language tag (``en``, ``pt-br``), else None."""
    if not isinstance(value, str):
        return None
    code = value.strip().lower().replace("_", "-")
    return code if _LANG.fullmatch(code) else None


def extra_snippets(value: object) -> tuple[str, ...]:
    """A backend's list of further excerpts as plain text, empty ones dropped, at most
    ``MAX_EXTRA_SNIPPETS``."""
    items = value if isinstance(value, list) else []
    texts = (clean_text(item) for item in items if isinstance(item, str))
    return tuple(text for text in texts if text)[:MAX_EXTRA_SNIPPETS]


def clean_text(value: object, *, limit: int = MAX_TEXT_CHARS, markup: bool = True) -> str:
    """``value`` as one line of plain text of at most ``limit`` characters.

    Tags are dropped and entities decoded when ``markup`` (Brave's descriptions carry
    ``<strong>``), whitespace runs become one space, control and format characters go (a
    reply line may not carry them, SPEC F-5). A cut ends at a word with an ellipsis.
    """
    text = value if isinstance(value, str) else ""
    if markup:
        text = html.unescape(_TAG.sub("", text))
    text = "".join(
        " " if char.isspace() else char
        for char in text
        if char.isspace() or unicodedata.category(char) not in _DROP_CATEGORIES
    )
    text = _SPACE.sub(" ", text).strip()
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit * 3 // 4:
        cut = cut[:space]
    return cut.rstrip() + "…"

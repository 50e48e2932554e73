"""Published dates as the backends spell them, read into one form (sans-IO: no clock).

Brave's ``page_age`` is ISO-8601 without a zone (``2024-05-02T09:12:44``) and its ``age`` a
display date (``May 2, 2024``) or a relative one (``2 days ago``, skipped: reading it needs a
clock); SearXNG's ``publishedDate`` is ISO-8601 with or without a zone or a space for ``T``;
Perplexity's ``date`` is ``2024-05-02``; DuckDuckGo's result page shows
``2024-05-02T00:00:00.0000000``. A value without a zone is taken as UTC.

``published`` answers ``YYYY-MM-DD`` when only a date was given and ``YYYY-MM-DDTHH:MM:SSZ``
otherwise; ``day`` reads either back as the date the AFTER/BEFORE range compares.
"""

from __future__ import annotations

import datetime
import re

_FRACTION = re.compile(r"(\.\d+)")
_DISPLAY_FORMATS = ("%B %d, %Y", "%b %d, %Y", "%d %B %Y", "%d %b %Y")
# Years outside this are a backend's placeholder (0001-01-01) or a parse of garbage.
_FIRST_YEAR, _LAST_YEAR = 1990, 2200


def published(value: object) -> str | None:
    """``value`` as a UTC ISO-8601 date or datetime, or None when it is not one we read."""
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        return None
    text = value.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return _date_only(text)
    moment = _iso(text) or _display(text)
    if moment is None or not _FIRST_YEAR <= moment.year <= _LAST_YEAR:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    utc = moment.astimezone(datetime.UTC).replace(microsecond=0)
    if (utc.hour, utc.minute, utc.second) == (0, 0, 0) and _is_midnight_only(text):
        return utc.date().isoformat()
    return utc.strftime("%Y-%m-%dT%H:%M:%SZ")


def day(value: str) -> datetime.date:
    """The date of a ``published`` value."""
    return datetime.date.fromisoformat(value[:10])


def _date_only(text: str) -> str | None:
    try:
        parsed = datetime.date.fromisoformat(text)
    except ValueError:
        return None
    return parsed.isoformat() if _FIRST_YEAR <= parsed.year <= _LAST_YEAR else None


def _iso(text: str) -> datetime.datetime | None:
    # fromisoformat reads at most 6 fractional digits; DuckDuckGo writes 7.
    trimmed = _FRACTION.sub(lambda match: match.group()[:7], text.replace("Z", "+00:00"))
    try:
        return datetime.datetime.fromisoformat(trimmed)
    except ValueError:
        return None


def _display(text: str) -> datetime.datetime | None:
    for form in _DISPLAY_FORMATS:
        try:
            return datetime.datetime.strptime(text, form)
        except ValueError:
            continue
    return None


def _is_midnight_only(text: str) -> bool:
    """True when ``text`` names a day, not a moment: a display date, or an ISO time of
    exactly midnight with no zone (SearXNG's and DuckDuckGo's way of writing a date)."""
    if _display(text) is not None:
        return True
    moment = _iso(text)
    return moment is not None and moment.tzinfo is None and moment.time() == datetime.time()

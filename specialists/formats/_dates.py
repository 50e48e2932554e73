"""Dates as documents and feeds write them, read into one form: ISO-8601 UTC."""

from __future__ import annotations

import datetime as dt
from email.utils import parsedate_to_datetime

# Years outside this are typos or tricks (a feed dated year 1 or 9999); they are not dates.
_EARLIEST, _LATEST = 1900, 2200


def iso_utc(text: str) -> str | None:
    """``text`` (W3C/ISO-8601 as Atom and office files write it, or RFC 822 as RSS does) as
    ``YYYY-MM-DDTHH:MM:SSZ``; a time without a zone is taken as UTC. None when it is no
    date. Never raises."""
    text = text.strip()
    if not text or len(text) > 64:
        return None
    moment = _iso(text) or _rfc822(text)
    if moment is None or not _EARLIEST <= moment.year <= _LATEST:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(dt.UTC).replace(tzinfo=None)
    return moment.replace(microsecond=0).isoformat() + "Z"


def _iso(text: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text)
    except ValueError:
        return None


def _rfc822(text: str) -> dt.datetime | None:
    try:
        return parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None

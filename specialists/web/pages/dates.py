"""Dates as pages declare them, made ISO-8601 (``PUBLISHED`` in fetch replies)."""

from __future__ import annotations

import datetime
import email.utils
import re

# 2024-03-05, 2024-03-05T10:00:00Z, 2024-03-05 10:00 +0100: the date is the first 10 chars.
_ISO_DAY = re.compile(r"(\d{4})-(\d{2})-(\d{2})(?:[T\s].*)?")
_COMPACT_DAY = re.compile(r"(\d{4})(\d{2})(\d{2})")  # Dublin Core and old CMSes: 20240305


def iso_date(value: str) -> str | None:
    """The calendar date ``value`` names, as ``YYYY-MM-DD``: ISO-8601 (with or without a
    time), ``YYYYMMDD``, or an RFC 2822 date (``Tue, 05 Mar 2024 10:00:00 GMT``); None when it
    names no valid date. The day is the one the page wrote, in its own time zone."""
    text = value.strip()
    match = _ISO_DAY.fullmatch(text) or _COMPACT_DAY.fullmatch(text)
    if match is not None:
        return _day(int(match[1]), int(match[2]), int(match[3]))
    try:
        parsed = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed.date().isoformat()


def _day(year: int, month: int, day: int) -> str | None:
    try:
        return datetime.date(year, month, day).isoformat()
    except ValueError:
        return None

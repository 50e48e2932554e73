"""Cron schedules: five fields read by croniter in an IANA time zone, times handled in UTC.

A schedule is exactly five whitespace-separated fields (minute hour day-of-month month
day-of-week); croniter's seconds and year fields and ``@daily`` aliases are refused so that a
SCHEDULE means what it means to crontab(5). The zone comes from the separate ``TZ`` field (default
UTC), as systemd timers take theirs, rather than from a ``CRON_TZ=`` prefix inside the
expression: each field then carries one thing and is validated on its own.

Occurrences are computed in the job's zone and returned in UTC. Across DST changes croniter
fires a wall time that falls in the spring-forward gap once, at the first valid minute after
it, and fires a wall time that occurs twice in the autumn once for each UTC instant; the
scheduler runs each UTC instant at most once. croniter errors are translated here, the seam,
into ``ScheduleError``.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

UTC = datetime.UTC
_FIELD = re.compile(r"[0-9A-Za-z*/,?#-]+")
_TZ_NAME = re.compile(r"[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*")
_TICK = datetime.timedelta(microseconds=1)


class ScheduleError(ValueError):
    """A SCHEDULE or TZ that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Schedule:
    """A five-field cron expression in the zone named ``tz``."""

    expr: str
    tz: str = "UTC"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.tz)

    def next_after(self, when: datetime.datetime) -> datetime.datetime | None:
        """The first occurrence strictly after ``when`` (UTC), or None if there is none."""
        try:
            found = croniter(self.expr, when.astimezone(self.zone)).get_next(datetime.datetime)
        except (CroniterError, OverflowError):  # no date left before year 9999
            return None
        return _as_utc(found)

    def latest_at_or_before(self, when: datetime.datetime) -> datetime.datetime | None:
        """The last occurrence at or before ``when`` (UTC), or None if there is none."""
        start = when.astimezone(self.zone) + _TICK
        try:
            found = croniter(self.expr, start).get_prev(datetime.datetime)
        except (CroniterError, OverflowError):  # no date left before year 9999
            return None
        return _as_utc(found)


def parse_schedule(expr: str, tz: str | None) -> Schedule:
    """A schedule that fires at least once after now; raises ScheduleError."""
    fields = expr.split()
    if len(fields) != 5:
        raise ScheduleError("SCHEDULE must have exactly 5 fields")
    if not all(_FIELD.fullmatch(field) for field in fields):
        raise ScheduleError("SCHEDULE has a character cron does not use")
    schedule = Schedule(" ".join(fields), _zone_name("UTC" if tz is None else tz))
    try:
        croniter(schedule.expr)
    except CroniterError as exc:
        raise ScheduleError(f"SCHEDULE is not valid cron: {exc}") from None
    if schedule.next_after(datetime.datetime.now(UTC)) is None:
        raise ScheduleError("SCHEDULE never fires")
    return schedule


def _zone_name(name: str) -> str:
    # ZoneInfo would also read any path-like key from disk; the grammar check comes first.
    if not _TZ_NAME.fullmatch(name):
        raise ScheduleError("TZ must be an IANA zone name such as Europe/Paris")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(f"TZ names no known zone: {name}") from None
    return name


def _as_utc(found: object) -> datetime.datetime:
    assert isinstance(found, datetime.datetime)
    return found.astimezone(UTC)


def iso(when: datetime.datetime, *, precise: bool = False) -> str:
    """``2026-01-10T02:00:00Z``; with ``precise`` (or a fraction) ``...02:00:00.000000Z``."""
    when = when.astimezone(UTC)
    spec = "%Y-%m-%dT%H:%M:%S.%fZ" if precise or when.microsecond else "%Y-%m-%dT%H:%M:%SZ"
    return when.strftime(spec)


def parse_iso(text: str) -> datetime.datetime:
    """The UTC time ``iso`` wrote; raises ValueError."""
    return datetime.datetime.fromisoformat(text).astimezone(UTC)


def run_key(job_id: str, at: datetime.datetime, *, precise: bool = False) -> str:
    """``<job>@<scheduled time>``: one run's identity, also the ID its task is sent with.

    Manual runs use ``precise`` keys, whose fraction keeps them apart from scheduled ones
    (cron times are whole minutes).
    """
    return f"{job_id}@{iso(at, precise=precise)}"

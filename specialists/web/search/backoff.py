"""Time budgets: when an upstream that answered 429 wants us back (Retry-After,
X-RateLimit-Reset), and by when a task's network work must end.

``resume_at`` is a pure function of the headers and two clocks: ``wall`` (Unix time, for
HTTP-dates and epoch resets) and ``now`` (trio time, what ``Bucket.pause_until`` takes). Used by
the search backends and by ``REQ:api``.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping

import trio

# Time kept back from the task's deadline so a FAIL naming the real cause goes out before the
# dispatcher's timeout_exceeded would: a tenth of the budget, at most half a second.
RESERVE_FRACTION = 0.1
MAX_RESERVE_S = 0.5
# A header asking for longer than a month is wrong or hostile; Brave's longest window (its
# monthly quota, seed 000) still fits.
MAX_PAUSE_S = 31 * 86400.0
# An X-RateLimit-Reset above this is a Unix time (GitHub), below it seconds to wait (Brave).
_EPOCH_FLOOR = 1_000_000_000


def resume_at(headers: Mapping[str, str], *, now: float, wall: float) -> float | None:
    """The trio time the upstream asked us to wait until, or None when it named none.

    ``Retry-After`` (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) wins over
    ``X-RateLimit-Reset``. A reset header lists one value per window (Brave: ``1, 1419704``);
    the windows whose ``X-RateLimit-Remaining`` is 0 are the spent ones, and we wait for the
    last of them. Delays are clamped to ``[0, MAX_PAUSE_S]``.
    """
    delay = _retry_after_s(headers.get("retry-after"), wall)
    if delay is None:
        delay = _reset_s(
            headers.get("x-ratelimit-reset"), headers.get("x-ratelimit-remaining"), wall
        )
    if delay is None:
        return None
    return now + min(max(delay, 0.0), MAX_PAUSE_S)


def task_deadline(*, fallback_s: float) -> float:
    """The trio time by which the running task's network work must end: the dispatcher's
    deadline (the enclosing cancel scope's) minus a reserve, or ``fallback_s`` from now when
    no deadline is set."""
    now = trio.current_time()
    left = trio.current_effective_deadline() - now
    if math.isinf(left):
        return now + fallback_s
    return now + left - min(MAX_RESERVE_S, max(left, 0.0) * RESERVE_FRACTION)


def _retry_after_s(value: str | None, wall: float) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - wall


def _reset_s(value: str | None, remaining: str | None, wall: float) -> float | None:
    resets = _numbers(value)
    if not resets:
        return None
    left = _numbers(remaining)
    if len(left) == len(resets) and any(count <= 0 for count in left):
        resets = [reset for reset, count in zip(resets, left, strict=True) if count <= 0]
    delays = [reset - wall if reset > _EPOCH_FLOOR else reset for reset in resets]
    return max(delays)


def _numbers(value: str | None) -> list[float]:
    if not value:
        return []
    try:
        numbers = [float(part) for part in value.split(",")]
    except ValueError:
        return []
    return numbers if all(math.isfinite(number) for number in numbers) else []

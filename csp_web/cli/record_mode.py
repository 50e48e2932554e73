"""Record modes: what ``csp-web replay --record-mode MODE`` does with each transcript's
cassette, named and meant as vcrpy's (and pytest-recording's ``--record-mode``):

- ``none``: replay only; a request the cassette does not hold fails naming it (a transcript
  without a cassette replays with an empty one, so it makes no live request at all);
- ``once``: record when the cassette does not exist, else replay only;
- ``new_episodes``: replay what the cassette holds, send the other requests to the live
  upstreams and append them to it;
- ``all``: record everything again (``--record``).

Without a mode, a transcript with a cassette replays as ``none`` and one without runs
against the daemon as it is (most transcripts make no upstream request).
"""

from __future__ import annotations

import enum


class RecordMode(enum.StrEnum):
    NONE = "none"
    ONCE = "once"
    NEW_EPISODES = "new_episodes"
    ALL = "all"


class Plan(enum.Enum):
    """What one transcript's run does with its cassette."""

    LIVE = "live"  # no cassette: the daemon as configured
    REPLAY = "replay"  # offline from the cassette (an empty one when there is none)
    RECORD = "record"  # every request live, the cassette written anew
    EPISODES = "episodes"  # recorded requests replayed, the others live and appended


def plan(mode: RecordMode | None, cassette_exists: bool) -> Plan:
    """The run ``mode`` asks for a transcript whose cassette exists or not."""
    if mode is None:
        return Plan.REPLAY if cassette_exists else Plan.LIVE
    if mode is RecordMode.NONE:
        return Plan.REPLAY
    if mode is RecordMode.ALL or not cassette_exists:
        return Plan.RECORD
    return Plan.REPLAY if mode is RecordMode.ONCE else Plan.EPISODES


def recorded(plan_: Plan) -> bool:
    """Whether a run of ``plan_`` writes its cassette (and so the transcript's replies)."""
    return plan_ in (Plan.RECORD, Plan.EPISODES)

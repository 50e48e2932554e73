"""Transcripts: recorded client frames and the replies expected, replayed against a daemon.

The ``.csp`` format (docs/transcripts.md) is line based:

    # a comment; blank lines are ignored
    > TASK REQ:ping IN:SYS OUT:PONG      a line the client sends ("> " + text)
    >                                    an empty line the client sends (ends the frame)
    >! "\\u00ff\\n"                       raw bytes: a JSON string, each char < 256 one byte
    < STATUS OK                          a line of an expected reply
    < EXEC_TIME {{int}}                  {{int}} {{num}} {{any}} {{re:...}} match what varies
    <                                    the empty line that ends an expected reply

A transcript is a conversation on one connection, in steps: the client lines up to the next
expected replies are sent together, and those replies are awaited before the next step, so a
later step may depend on an earlier one (read after write). Within a step, replies are matched
to expected ones by ID where both carry the same ID, the others in order.
"""

from __future__ import annotations

import json
import re
from contextlib import suppress
from dataclasses import dataclass, field

import trio

from protocol import CLOSED, NEED_DATA, Connection, Limits, Reply, serialize

_PLACEHOLDER = re.compile(r"\{\{(int|num|any|re:(?:[^}]|\}(?!\}))*)\}\}")
_PATTERNS = {"int": r"-?[0-9]+", "num": r"-?[0-9]+(?:\.[0-9]+)?", "any": r".*"}


class TranscriptError(Exception):
    """The transcript file itself is malformed; the message names the line."""


@dataclass
class Step:
    sent: bytes = b""
    expected: list[list[str]] = field(default_factory=list)


@dataclass
class Transcript:
    name: str
    steps: list[Step] = field(default_factory=list)


def parse_transcript(text: str, name: str = "<transcript>") -> Transcript:
    """Parse a ``.csp`` file's text; raises TranscriptError naming the bad line."""
    transcript = Transcript(name)
    step = Step()
    sent = bytearray()
    current: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith(">") and step.expected:
            step.sent, sent = bytes(sent), bytearray()
            transcript.steps.append(step)
            step = Step()
        if line.startswith(">!"):
            sent += _raw_bytes(line[2:].strip(), f"{name}:{number}")
        elif line == ">" or line.startswith("> "):
            sent += line[2:].encode("utf-8") + b"\n"
        elif line == "<":
            if current:
                step.expected.append(current)
            current = []
        elif line.startswith("< "):
            current.append(line[2:])
        elif line.strip() and not line.startswith("#"):
            raise TranscriptError(f"{name}:{number}: lines start with '>', '<' or '#'")
    if current:
        raise TranscriptError(f"{name}: last expected reply has no closing '<' line")
    step.sent = bytes(sent)
    if step.sent or step.expected:
        transcript.steps.append(step)
    return transcript


def _raw_bytes(literal: str, where: str) -> bytes:
    try:
        text = json.loads(literal)
        return bytes(ord(ch) for ch in text)
    except (ValueError, TypeError) as exc:
        raise TranscriptError(f"{where}: '>!' takes a JSON string of chars below 256") from exc


def line_matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` fits ``expected``, placeholders matching what varies."""
    pattern, last = [], 0
    for match in _PLACEHOLDER.finditer(expected):
        pattern.append(re.escape(expected[last : match.start()]))
        kind = match.group(1)
        pattern.append(kind[3:] if kind.startswith("re:") else _PATTERNS[kind])
        last = match.end()
    pattern.append(re.escape(expected[last:]))
    return re.fullmatch("".join(pattern), actual) is not None


def reply_lines(reply: Reply) -> list[str]:
    return serialize(reply).decode("utf-8").split("\n")[:-2]


def _frame_id(lines: list[str]) -> str | None:
    return next((line[3:] for line in lines if line.startswith("ID ")), None)


def compare(expected: list[list[str]], actual: list[Reply]) -> list[str]:
    """Human-readable differences; empty when every reply matches."""
    diffs: list[str] = []
    if len(actual) != len(expected):
        diffs.append(f"expected {len(expected)} replies, got {len(actual)}")
    for index, (want, have) in enumerate(zip(expected, pair(expected, actual), strict=True), 1):
        diffs += _diff_frame(index, want, have)
    return diffs


def pair(expected: list[list[str]], actual: list[Reply]) -> list[list[str]]:
    """The lines of the actual reply each expected reply is compared with, in order: the
    one with its ID where both carry the same ID, else the next unclaimed one ([] if none)."""
    got = [reply_lines(reply) for reply in actual]
    by_id = {_frame_id(lines): lines for lines in got if _frame_id(lines) is not None}
    unmatched = [
        lines
        for lines in got
        if _frame_id(lines) is None or _frame_id(lines) not in {_frame_id(e) for e in expected}
    ]
    paired: list[list[str]] = []
    for want in expected:
        want_id = _frame_id(want)
        have = by_id.get(want_id) if want_id is not None else None
        if have is None:
            have = unmatched.pop(0) if unmatched else []
        paired.append(have)
    return paired


def _diff_frame(index: int, want: list[str], have: list[str]) -> list[str]:
    if len(want) == len(have) and all(map(line_matches, want, have)):
        return []
    out = [f"reply {index}:"]
    out += [f"  - {line}" for line in want]
    out += [f"  + {line}" for line in have]
    return out


async def replay(
    transcript: Transcript,
    stream: trio.abc.Stream,
    *,
    timeout_s: float = 30.0,
    heard: list[list[Reply]] | None = None,
) -> list[str]:
    """Play the transcript's steps on ``stream``; the differences from what was expected.
    ``heard``, when given, gets each played step's replies (``--record`` writes them into
    the transcript: csp_web.cli.transcript_write)."""
    codec = Connection(Limits(64 << 20, 64 << 20, 100_000))
    diffs: list[str] = []
    for number, step in enumerate(transcript.steps, 1):
        replies = await _play_step(step, stream, codec, timeout_s)
        if heard is not None:
            heard.append(replies)
        diffs += [f"step {number}: {line}" for line in compare(step.expected, replies)]
        if len(replies) < len(step.expected):
            break
    return diffs


async def _play_step(
    step: Step, stream: trio.abc.Stream, codec: Connection, timeout_s: float
) -> list[Reply]:
    replies: list[Reply] = []
    # A peer that hung up (sending, or reading: a reset) answers no more: the replies it
    # did not send are the step's differences, never a traceback.
    with trio.move_on_after(timeout_s), suppress(trio.BrokenResourceError):
        if step.sent:
            await stream.send_all(step.sent)
        while len(replies) < len(step.expected):
            while (event := codec.next_event()) not in (NEED_DATA, CLOSED):
                assert isinstance(event, Reply)
                replies.append(event)
            if event is CLOSED or len(replies) >= len(step.expected):
                break
            codec.receive_data(await stream.receive_some(65536))
    return replies

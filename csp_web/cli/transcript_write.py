"""Writing the replies a recording received into its transcript as the expected ones, so
``csp-web replay --record`` leaves a transcript that replays, instead of a diff to paste.

Each expected reply the received one does not match is rewritten; the rest of the file
(comments, sent lines, blank lines) is kept as written. Within a rewritten reply, a line the
author wrote that still matches the received line of its field is kept, so a placeholder such
as ``ERROR bad_value:{{any}}`` survives a re-recording.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Sequence

from csp_web.cli.transcript import Transcript, line_matches, pair
from protocol import Reply

# Fields whose value is a duration, different on every run (scripts/reply_corpus.py masks
# the same ones): written as a placeholder, or the next replay would fail on them.
VARYING_FIELDS = frozenset({"EXEC_TIME", "DURATION_MS", "ELAPSED_MS"})


def rewrite_expected(
    text: str, transcript: Transcript, heard: Sequence[list[Reply]]
) -> tuple[str, int]:
    """``text``, the file ``transcript`` was parsed from, with each expected reply of the
    steps in ``heard`` (the replies each played step received) that its received reply does
    not match replaced by that reply; and how many were replaced. An expected reply no reply
    came for (a step that timed out, or was never played) is kept as written."""
    blocks: list[list[str]] = [want for step in transcript.steps for want in step.expected]
    written = list(blocks)
    index = 0
    for step, replies in zip(transcript.steps, heard, strict=False):
        for want, have in zip(step.expected, pair(step.expected, replies), strict=True):
            written[index] = merged(want, have)
            index += 1
    changed = sum(old != new for old, new in zip(blocks, written, strict=True))
    return _with_blocks(text, written), changed


def merged(want: list[str], have: list[str]) -> list[str]:
    """The expected lines for received reply ``have``: ``want`` when it matches (or nothing
    was received); else ``have``'s lines, each kept as ``want`` wrote it when ``want``'s
    next line of the same field matches it."""
    if not have or (len(want) == len(have) and all(map(line_matches, want, have))):
        return want
    by_field: dict[str, deque[str]] = defaultdict(deque)
    for line in want:
        by_field[_field(line)].append(line)
    out = []
    for line in have:
        queue = by_field[_field(line)]
        written = queue.popleft() if queue else None
        out.append(
            written if written is not None and line_matches(written, line) else _as_expected(line)
        )
    return out


def _field(line: str) -> str:
    return line.partition(" ")[0]


def _as_expected(line: str) -> str:
    """A received line as an expected one: a varying field's value, or one that would read
    as a placeholder (it holds ``{{``) and so not match itself, becomes ``{{any}}``."""
    if _field(line) in VARYING_FIELDS or not line_matches(line, line):
        return f"{_field(line)} {{{{any}}}}"
    return line


def _with_blocks(text: str, blocks: list[list[str]]) -> str:
    """``text`` with its expected replies, in file order, replaced by ``blocks``; a comment
    or blank line inside a reply is moved before it."""
    out: list[str] = []
    held: list[str] = []  # the lines of the reply being read: comments and blanks only
    in_reply = False
    index = 0
    for line in text.splitlines(keepends=True):
        bare = line.rstrip("\r\n")
        if bare.startswith("< "):
            in_reply = True
        elif bare == "<" and in_reply:
            out += held + [f"< {reply_line}\n" for reply_line in blocks[index]] + [line]
            held, in_reply, index = [], False, index + 1
        elif in_reply:
            held.append(line)
        else:
            out.append(line)
    return "".join(out + held)

"""Member statistics beside a forum post: "Posts: 1,077", "Joined: Aug 2008".

Forum engines print the author's standing beside every post (phpBB's profile list,
vBulletin's user info, XenForo's message counts). They describe the member, not the
thread, and repeat on every post; a block holding only such label-value pairs, or a <dl>
whose terms are all such labels ("Joined", "Messages"), is left out.
English labels only.
"""

from __future__ import annotations

import re

MAX_CHARS = 120  # a block of member statistics is short
MAX_VALUE_CHARS = 40  # "1,077", "Mon Jul 24, 2017 9:28 am"
_LABELS = (
    r"posts|joined|join date|reputation|reaction score|messages|karma|member since"
    r"|likes received|thanks received|points"
)
_LABEL = re.compile(rf"(?:{_LABELS})\s*:", re.IGNORECASE)
_START = re.compile(_LABELS, re.IGNORECASE)


def starts_stats(text: str) -> bool:
    """True when `text` starts like a member statistic (a cheap first test
    on the first text of a block, before its whole text is read)."""
    return _START.match(text.lstrip()) is not None


def is_member_pairs(labels: list[str]) -> bool:
    """True when every label of a list of pairs (a <dl>'s terms) is a member statistic:
    "Joined", "Messages", "Reaction score" printed without colons."""
    return bool(labels) and all(
        _LABEL.fullmatch(f"{label.strip().rstrip(':')}:") for label in labels
    )


def is_member_stats(text: str) -> bool:
    """True when `text` is one or more member-statistic pairs and nothing else."""
    text = " ".join(text.split())
    if not text or len(text) > MAX_CHARS or _LABEL.match(text) is None:
        return False
    values = _LABEL.split(text)[1:]
    return all(0 < len(value.strip()) <= MAX_VALUE_CHARS for value in values)

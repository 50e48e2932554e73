"""The snapshot's text, read and rewritten line by line (pure: no Playwright, no I/O).

Playwright's AI snapshot is YAML-shaped, one element a line::

    - link "Home" [ref=e5] [cursor=pointer]:
      - /url: /a
    - button "evil [ref=e1]" [ref=e14]: B

A line is ``<indent>- <role> ["<name>"] [<attr>]...[: <text>]``; the name is a JSON string,
so a page's own text (a name or a text child that looks like ``[ref=e1]``) sits inside quotes
or after the colon and is never read as an attribute. ``rewrite`` swaps each ref for the
page's label (``refs.RefBook``), drops what says nothing to a reader (``[cursor=pointer]``
on roles that are clickable anyway, the ``[box=...]`` it reads for labelled screenshots),
and cuts the text before the line that would pass the ref cap.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

_HEAD = re.compile(r"( *)- ")
_ROLE = re.compile(r"[a-z]+")
_QUOTED_KEY = re.compile(r"'((?:[^']|'')*)'")
_PROP = re.compile(r" *- (?:/[a-z]+|text): ")
_REF_LIKE = re.compile(r"\[ref=")
# What a page's own text (a name, a text child, a URL) shows in place of ``[ref=``: a page
# must not print ``Cancel [ref=e12]`` beside the real e12 and have a model believe it.
_PAGE_REF = "[page-ref="
_ATTR = re.compile(r" \[([a-z-]+)(?:=([^\]\s]*))?\]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# Roles a reader knows to be clickable: their [cursor=pointer] is noise. On other roles
# (generic, img, listitem) it is kept: it marks a click target the page drew itself.
_CLICKABLE = frozenset(
    (
        *("link", "button", "checkbox", "radio", "switch", "tab", "option", "treeitem"),
        *("menuitem", "menuitemcheckbox", "menuitemradio", "combobox", "textbox"),
        *("searchbox", "spinbutton", "slider"),
    )
)
# Roles drawn on a labelled screenshot: what a vision model would point at to act.
_ACTIONABLE = _CLICKABLE | {"listbox"}


@dataclass(frozen=True)
class Box:
    """A labelled element's box on the page, in the main frame's viewport CSS pixels."""

    label: str
    x: float
    y: float
    width: float
    height: float


@dataclass
class Rewritten:
    """The text a reader gets, the labels it carries (label to Playwright ref), whether the
    ref cap cut it, and the boxes of its actionable elements (when read with boxes)."""

    text: str
    live: dict[str, str] = field(default_factory=dict)
    cut: bool = False
    boxes: list[Box] = field(default_factory=list)


@dataclass
class _Line:
    """An element line's parts: its key (role, JSON-quoted name, attributes), whether the
    key was single-quoted as a whole (Playwright does when the name holds ``: `` or ``#``),
    and what follows the key (``""`` or ``: <text>``)."""

    indent: str
    role: str
    name: str
    attrs: list[tuple[str, str | None, str]]  # key, value, as written
    quoted: bool
    rest: str


def _parse(line: str) -> _Line | None:
    """An element line's parts; None for text, props (``/url:``) and any other shape."""
    item = _HEAD.match(line)
    if item is None:
        return None
    at = item.end()
    quoted = line.startswith("'", at)
    if quoted:
        close = _QUOTED_KEY.match(line, at)
        if close is None:
            return None
        key, rest = close.group(1).replace("''", "'"), line[close.end() :]
        parsed = _parse_key(key)
        if parsed is None or parsed[1] != len(key):
            return None
    else:
        parsed = _parse_key(line, at)
        if parsed is None:
            return None
        rest = line[parsed[1] :]
    if rest and not rest.startswith(":"):
        return None
    role, name, attrs = parsed[0]
    return _Line(item.group(1), role, name, attrs, quoted, rest)


_Key = tuple[str, str, list[tuple[str, str | None, str]]]


def _parse_key(text: str, at: int = 0) -> tuple[_Key, int] | None:
    """The role, name and attributes written from ``at``, and where they end."""
    role = _ROLE.match(text, at)
    if role is None:
        return None
    at = role.end()
    name_start = at
    if text.startswith(' "', at):
        try:
            _name, at = json.JSONDecoder().raw_decode(text, at + 1)
        except ValueError:
            return None
    name = text[name_start:at]
    attrs = []
    while (attr := _ATTR.match(text, at)) is not None:
        attrs.append((attr.group(1), attr.group(2), attr.group()))
        at = attr.end()
    return (role.group(), name, attrs), at


def rewrite(text: str, label: Callable[[str], str], *, max_refs: int) -> Rewritten:
    """``text`` with labels for refs, cut before the line holding ref ``max_refs + 1``. A
    line of a shape not known here is dropped when it holds ``[ref=``: no ref the page
    could have written reaches the reader unlabelled."""
    out = Rewritten("")
    kept: list[str] = []
    frames: list[tuple[int, float, float]] = []  # (indent, x, y) of enclosing iframes
    for raw in _SURROGATE.sub("\ufffd", text).split("\n"):
        parsed = _parse(raw)
        if parsed is None:
            if not (_REF_LIKE.search(raw) and _HEAD.match(raw) and not _PROP.match(raw)):
                kept.append(_defanged(raw))
            continue
        ref = next((value for key, value, _ in parsed.attrs if key == "ref"), None)
        if ref is not None and len(out.live) >= max_refs:
            out.cut = True
            break
        name = label(ref) if ref is not None else None
        line, box = _render(parsed, name)
        kept.append(line)
        if ref is not None and name is not None:
            out.live[name] = ref
        _place(out, frames, parsed, name, box)
    out.text = "\n".join(kept)
    return out


def _render(parsed: _Line, label: str | None) -> tuple[str, tuple[float, ...] | None]:
    """The line as a reader gets it, and its box when it had one."""
    key = [parsed.role, _defanged(parsed.name)]
    box = None
    for name, value, written in parsed.attrs:
        if name == "box":
            box = _box(value)
        elif name == "cursor" and parsed.role in _CLICKABLE:
            continue
        elif name == "ref" and label is not None:
            key.append(f" [ref={label}]")
        else:
            key.append(written)
    text = "".join(key)
    if parsed.quoted:
        text = "'" + text.replace("'", "''") + "'"
    return f"{parsed.indent}- {text}{_defanged(parsed.rest)}", box


def _defanged(page_text: str) -> str:
    """The page's own words with every ``[ref=`` shown as ``[page-ref=``: only the labels
    this module writes look like refs."""
    return _REF_LIKE.sub(_PAGE_REF, page_text)


def _box(value: str | None) -> tuple[float, ...] | None:
    try:
        numbers = tuple(float(part) for part in (value or "").split(","))
    except ValueError:
        return None
    return numbers if len(numbers) == 4 else None


def _place(
    out: Rewritten,
    frames: list[tuple[int, float, float]],
    parsed: _Line,
    label: str | None,
    box: tuple[float, ...] | None,
) -> None:
    """Keep an actionable element's box, moved out of the iframes around it: a frame's
    elements are boxed in its own viewport, which sits at the iframe element's box."""
    indent = len(parsed.indent)
    while frames and frames[-1][0] >= indent:
        frames.pop()
    if box is None:
        return
    x = box[0] + sum(frame[1] for frame in frames)
    y = box[1] + sum(frame[2] for frame in frames)
    if parsed.role == "iframe":
        frames.append((indent, x, y))
    if label is not None and parsed.role in _ACTIONABLE and box[2] > 0 and box[3] > 0:
        out.boxes.append(Box(label, x, y, box[2], box[3]))


def page_of(text: str, start: int, max_chars: int) -> tuple[str, int | None]:
    """Up to ``max_chars`` of ``text`` from ``start``, ended at a line's end when more follows
    (so no line, and no ref, is split across pages) unless one line alone is longer; the
    START of the next page, or None at the end."""
    end = start + max_chars
    if end >= len(text):
        return text[start:], None
    line_end = text.rfind("\n", start, end)
    if line_end >= start:
        end = line_end + 1
    return text[start:end], end

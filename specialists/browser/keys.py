"""``ACTION press KEY``: a key or chord checked against Playwright's key names.

A chord is modifiers then one key, joined by ``+`` (``Control+A``, ``Shift+Tab``,
``Control+Shift+ArrowLeft``, ``Control++``); a key is one of Playwright's names
(``keyboard.press``'s US layout: ``Enter``, ``ArrowDown``, ``F5``, ``KeyA``, ``Digit1``...) or
one printable character. Anything else is refused before the page is touched: Playwright
would otherwise type an unknown name's letters one by one or throw mid-chord.
"""

from __future__ import annotations

from csp_web.core.api.errors import OpError
from protocol import ErrorCode

MAX_KEY_CHARS = 64  # "Control+Shift+Alt+Meta+" and the longest name, twice over
MAX_CHORD_KEYS = 5  # four modifiers and a key

_SIDED = ("Shift", "Control", "Alt", "Meta")
MODIFIERS = frozenset(
    [*_SIDED, "ControlOrMeta", *(f"{name}{side}" for name in _SIDED for side in ("Left", "Right"))]
)
# Playwright's US layout (usKeyboardLayout) by code, besides the generated ranges below.
_NAMED = [
    "Enter",
    "Tab",
    "Escape",
    "Backspace",
    "Delete",
    "Insert",
    "Home",
    "End",
    "PageUp",
    "PageDown",
    "Space",
    "AltGraph",
    "ArrowUp",
    "ArrowDown",
    "ArrowLeft",
    "ArrowRight",
    "CapsLock",
    "NumLock",
    "ScrollLock",
    "Pause",
    "PrintScreen",
    "ContextMenu",
    "Backquote",
    "Minus",
    "Equal",
    "Backslash",
    "BracketLeft",
    "BracketRight",
    "Quote",
    "Semicolon",
    "Comma",
    "Period",
    "Slash",
    "NumpadAdd",
    "NumpadSubtract",
    "NumpadMultiply",
    "NumpadDivide",
    "NumpadDecimal",
    "NumpadEnter",
    "AudioVolumeMute",
    "AudioVolumeDown",
    "AudioVolumeUp",
    "MediaTrackNext",
    "MediaTrackPrevious",
    "MediaPlayPause",
]
KEY_NAMES = frozenset(
    [*_NAMED, *MODIFIERS]
    + [f"F{n}" for n in range(1, 13)]
    + [f"Digit{n}" for n in range(10)]
    + [f"Numpad{n}" for n in range(10)]
    + [f"Key{chr(c)}" for c in range(ord("A"), ord("Z") + 1)]
)


def check_key(key: str) -> str:
    """``key`` unchanged when it is a key or chord Playwright knows; else invalid_field."""
    if not key or len(key) > MAX_KEY_CHARS:
        raise _invalid(f"KEY must be 1-{MAX_KEY_CHARS} characters")
    parts = _split(key)
    if len(parts) > MAX_CHORD_KEYS:
        raise _invalid(f"KEY holds at most {MAX_CHORD_KEYS} keys")
    *held, last = parts
    if any(part not in MODIFIERS for part in held):
        raise _invalid("KEY: only Shift, Control, Alt, Meta, ControlOrMeta go before a +")
    if last not in KEY_NAMES and not _printable(last):
        raise _invalid("KEY is not a key name (Enter, ArrowDown, F5, KeyA...) or one character")
    return key


def _split(key: str) -> list[str]:
    """The chord's parts; a trailing ``+`` after a ``+`` is the plus key itself."""
    if key == "+":
        return ["+"]
    if key.endswith("++"):
        return [*key[:-2].split("+"), "+"]
    return key.split("+")


def _printable(part: str) -> bool:
    return len(part) == 1 and part.isprintable() and not part.isspace()


def _invalid(detail: str) -> OpError:
    return OpError(ErrorCode.INVALID_FIELD, detail)

"""Link targets: resolve against the page URL and keep only web links."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

_WEB_SCHEMES = ("http", "https")
# Characters that would end a Markdown link target early or split it across tokens.
_ESCAPES = str.maketrans(
    {"(": "%28", ")": "%29", " ": "%20", "<": "%3C", ">": "%3E", "\n": "", "\r": "", "\t": ""}
)


def resolve_link(href: str | None, base_url: str | None) -> str | None:
    """The absolute http(s) URL `href` points to, or None (javascript:, mailto:, fragments...).

    Relative targets need `base_url`; without one they are dropped. Never raises.
    """
    if not href:
        return None
    href = href.strip()
    if not href or href.startswith("#"):
        return None
    try:
        target = urljoin(base_url, href) if base_url else href
        parts = urlsplit(target)
    except ValueError:  # malformed ports or IPv6 literals
        return None
    if parts.scheme.lower() not in _WEB_SCHEMES or not parts.netloc:
        return None
    return target.translate(_ESCAPES)

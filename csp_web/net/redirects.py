"""One redirect hop: where it goes, with which method, and which headers may come along.

The client follows redirects itself (httpx's ``follow_redirects`` is off) so that every hop
passes the same gate and resolver as the first request.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from csp_web.config.guard import GuardConfig
from csp_web.net.urlgate import ParsedUrl, check_reference

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Headers that carry a caller's identity (curl and requests strip the same set cross-origin).
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
# Headers of a request body, dropped when a redirect turns the method into GET.
_BODY_HEADERS = ("content-type", "content-length", "content-encoding", "transfer-encoding")
_LOCATION = "csp_web.location"  # where ``hold_location`` keeps a redirect's Location


@dataclass(frozen=True)
class Hop:
    """The next request of a chain."""

    url: ParsedUrl
    method: str
    content: bytes | None


async def hold_location(response: httpx.Response) -> None:
    """Take a redirect's Location out of ``response``'s headers into its extensions, before
    httpx sees it (a response event hook: it runs first). httpx parses every Location to build
    the request it would follow, even with ``follow_redirects`` off, and raises IDNAError or
    RemoteProtocolError on a malformed one before our gate could refuse it by rule."""
    if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
        response.extensions[_LOCATION] = response.headers["location"]
        del response.headers["location"]


def restore_location(response: httpx.Response) -> None:
    """Put back the Location ``hold_location`` took, once httpx has returned ``response``:
    its reader (the caller, the cassette tap) sees the headers the upstream sent."""
    location = response.extensions.get(_LOCATION)
    if location is not None:
        response.headers["location"] = location


def is_redirect(response: httpx.Response) -> bool:
    """Whether ``response`` sends us on: a redirect status with a Location."""
    return _LOCATION in response.extensions


def next_hop(
    current: ParsedUrl,
    response: httpx.Response,
    *,
    method: str,
    content: bytes | None,
    config: GuardConfig,
) -> Hop:
    """The request ``response``'s Location asks for, through the whole URL gate again.

    Raises OpError(URL_REJECTED | SSRF_BLOCKED) for a Location the gate refuses; the raw
    header is checked for whitespace, controls and backslashes before it is joined, since
    joining would percent-encode them out of sight.
    """
    url = check_reference(current, response.extensions[_LOCATION], config)
    # RFC 9110 §15.4: 303 turns any method but HEAD into GET; browsers and httpx do the same
    # for a POST answered by 301 or 302. 307 and 308 repeat the request as it was.
    status = response.status_code
    if (status == 303 and method != "HEAD") or (status in (301, 302) and method == "POST"):
        return Hop(url, "GET", None)
    return Hop(url, method, content)


def credential_names(extra: Iterable[str]) -> frozenset[str]:
    """The lower-case names of headers that must not cross origins: the usual three plus
    whatever the caller names."""
    return CREDENTIAL_HEADERS | {name.lower() for name in extra}


def carries_credentials(headers: httpx.Headers, names: frozenset[str]) -> bool:
    """Whether any header in ``names`` is present."""
    return any(name in headers for name in names)


def without(headers: httpx.Headers, names: Iterable[str]) -> httpx.Headers:
    """A copy of ``headers`` lacking every header in ``names``."""
    kept = httpx.Headers(headers)
    for name in names:
        kept.pop(name, None)
    return kept


def body_headers_dropped(headers: httpx.Headers, hop: Hop) -> httpx.Headers:
    """``headers`` fit for ``hop``: without body headers when the hop carries no body."""
    return headers if hop.content is not None else without(headers, _BODY_HEADERS)

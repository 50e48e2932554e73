"""A keep-alive connection with bytes left over after a complete response is never reused.

An origin that sends more than its Content-Length (a second, complete response smuggled in
after the first, or a body longer than it declared) must not answer the next request made on
that origin (another op's, another URL's) from those bytes. curl ("Excess found") and browsers
keep the first response as its framing delimits it and close the connection; so does the guard.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import AsyncIterator

import pytest
import trio
import trustme

from csp_web.net import GuardConfig, GuardedClient, open_guarded_client

from ._dns import FixedResolver
from ._origin import WAIT_S
from ._raw_origin import RawOrigin, page, response

FIRST = b"<html><body><p>first page words</p></body></html>"
EXTRAS = {
    "a smuggled response": response(b"<html><title>POISONED</title><p>POISONED</p></html>"),
    "a body past its length": b"words are here " * 20,
}
# When the extra bytes arrive: in the same write as the response; in a write of their own
# (over TLS: records of their own) that reaches the client with it; or only once the first
# fetch has returned.
TIMINGS = ("together", "own-write", "after")


@pytest.fixture(params=["http", "https"])
async def raw_origin(
    request: pytest.FixtureRequest, nursery: trio.Nursery, ca: trustme.CA
) -> RawOrigin:
    served = RawOrigin(request.param)
    context = None
    if request.param == "https":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("origin.test").configure_cert(context)
    await nursery.start(functools.partial(served.serve, ssl_context=context))
    return served


@pytest.fixture
async def raw_client(raw_origin: RawOrigin, trust: ssl.SSLContext) -> AsyncIterator[GuardedClient]:
    config = GuardConfig(
        allow_http=True, allowed_ports=(raw_origin.port,), allow_private=("127.0.0.1",)
    )
    dns = FixedResolver({"origin.test": ["127.0.0.1"]})
    async with open_guarded_client(config, resolver=dns, ssl_context=trust) as opened:
        yield opened


@pytest.mark.parametrize("timing", TIMINGS)
@pytest.mark.parametrize("extra", list(EXTRAS))
async def test_bytes_past_a_complete_response_never_answer_the_next_request(
    raw_client: GuardedClient, raw_origin: RawOrigin, extra: str, timing: str
) -> None:
    first, rest = response(FIRST), EXTRAS[extra]
    raw_origin.answers["/leftover"] = {
        "together": ((first + rest,), ()),
        "own-write": ((first, rest), ()),
        "after": ((first,), (rest,)),
    }[timing]
    with trio.fail_after(WAIT_S):
        kept = await raw_client.fetch(raw_origin.url("origin.test", "/leftover"))
        if timing == "after":
            raw_origin.release.set()
            await raw_origin.sent.wait()  # on loopback: in the client's socket once sent
        victim = await raw_client.fetch(raw_origin.url("origin.test", "/victim"))
    assert (kept.status_code, kept.body) == (200, FIRST)  # as its Content-Length framed it
    assert (victim.status_code, victim.body) == (200, page("/victim").partition(b"\r\n\r\n")[2])
    assert raw_origin.seen == [(1, "/leftover"), (2, "/victim")]  # on a connection of its own


async def test_a_clean_keep_alive_connection_is_still_reused(
    raw_client: GuardedClient, raw_origin: RawOrigin
) -> None:
    with trio.fail_after(WAIT_S):
        for path in ("/one", "/two", "/three"):
            await raw_client.fetch(raw_origin.url("origin.test", path))
    assert raw_origin.seen == [(1, "/one"), (1, "/two"), (1, "/three")]

"""Malformed URLs of every kind the URL gate names, and the check every op's answer to one
must pass: a FAIL whose code is in the catalogue and is not internal_error."""

from __future__ import annotations

from protocol import ErrorCode, Reply, Status
from tests.net._origin import Origin

# Malformed URLs of every kind the gate names: bad IPv6 literals, bad ports, IDNA errors,
# controls and look-alikes, userinfo. {port} is the origin's, so a port alone never decides.
MALFORMED_URLS = [
    "https://[::1/",
    "https://[::1]x/",
    "https://[zz]/",
    "https://[:::1]/",
    "https://[::1]]/",
    "https://]::1[/",
    "https://[fe80::1%25eth0]/",
    "https://[127.0.0.1]/",
    "https://[v1.fe80::a]/",
    "https://[::ffff:127.1]/",
    "https://[::1]:/",
    "https://[::1]:99999/",
    "https://origin.test:99999/",
    "https://origin.test:-1/",
    "https://origin.test:0x1bb/",
    "https://origin.test:{port}:{port}/",
    "https://origin.test:\uff14\uff14\uff13/",
    "https://xn--zz.example/",
    "https://xn--.example/",
    "https://\u2100.example/",
    "https://exa\ufe56mple.com/",
    "https://a..b/",
    "https://exa\u00admple.com/",
    "https://exa\x01mple.com/",
    "https://origin.test:{port}/\x7f",
    "https://user:pw@origin.test:{port}/",
    "https://@origin.test:{port}/",
    "https://a@b@origin.test:{port}/",
    "https:origin.test",
    "https://",
    "//origin.test/",
]


def malformed(origin: Origin) -> list[str]:
    return [url.replace("{port}", str(origin.port)) for url in MALFORMED_URLS]


def error_code(reply: Reply) -> str:
    """The code part of ERROR, after checking the reply is a FAIL with one."""
    assert reply.status is Status.FAIL, reply
    error = reply.get("ERROR") or ""
    return error.partition(":")[0]


def assert_catalogued_failure(reply: Reply) -> None:
    code = error_code(reply)
    assert code in {member.value for member in ErrorCode}, reply
    assert code != ErrorCode.INTERNAL_ERROR.value, reply

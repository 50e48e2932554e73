"""``redact_userinfo``: the one way a client's URL, or text that may hold one, reaches an audit
record, a memory write or a FAIL reply; each op's audit goes through it (``OpAudit``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from csp_web.core.api.audit import OpAudit, redact_url, redact_userinfo
from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import fail_reply
from protocol import ErrorCode


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("https://user:pw@host.test/a?b=c#d", "https://***@host.test/a?b=c#d"),
        ("HTTPS://user:pw@host.test:8443", "HTTPS://***@host.test:8443"),
        ("https://u:p@w@host.test/", "https://***@host.test/"),  # the last "@" ends it
        ("https://:pw@host.test/", "https://***@host.test/"),
        ("https:user:pw@host.test/", "https:***@host.test/"),  # WHATWG: slashes optional
        ("https:\\\\user:pw@host.test/", "https:\\\\***@host.test/"),
        ("ssh://git:tok@host.test/r", "ssh://***@host.test/r"),
        ("git+ssh://git:tok@host.test/r", "git+ssh://***@host.test/r"),
        ("https://u%40x:p@[::1]:8443/", "https://***@[::1]:8443/"),
        ("WSS:\\\\u:p@host.test/", "WSS:\\\\***@host.test/"),
        ("https://a.test/x https://u:p@b.test/y", "https://a.test/x https://***@b.test/y"),
        ("what is at https://u:p@b.test/?", "what is at https://***@b.test/?"),
        ("curl -u x https://u:p@b.test", "curl -u x https://***@b.test"),
    ],
)
def test_a_urls_userinfo_is_written_stars_and_the_rest_kept(text: str, kept: str) -> None:
    assert redact_userinfo(text) == kept


@pytest.mark.parametrize(
    "text",
    [
        "https://host.test/@user/page",  # "@" in the path
        "https://host.test/?to=a@b.test",  # and in the query
        "https://host.test/#a@b",
        "mailto:bob@host.test",  # no authority
        "npm:lodash@4.17.21",  # an api ENDPOINT: name:path
        "npm:@types/node",
        "write to bob@host.test",
        "git@github.com:org/repo.git",
        "https://host.test/plain",
        "echo //a@b",  # no scheme: not a URL's authority
        "//user:pw@host.test/",
        "x-file:bob@corp.com",  # a non-special scheme's authority needs "//"
        "file:bob@corp.com",
        "npm:user@4",
        "http://h/?a=//b@c",  # "//" in a query starts no authority
        "see https://h/x?to=//b@c and mailto:a@b",
    ],
)
def test_text_without_a_userinfo_is_left_as_it_is(text: str) -> None:
    assert redact_userinfo(text) == text


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("https://user:ab s3cr3tpw@h.test/page", "https://***@h.test/page"),
        ("https://user:ab\ts3cr3tpw@h.test/page", "https://***@h.test/page"),
        ("https://user:ab\u3000s3cr3tpw@h.test/page", "https://***@h.test/page"),
        ("https://u:a@b c@h.test?q#f", "https://***@h.test?q#f"),  # the last "@" ends it
        ("https:u:a b@h.test/", "https:***@h.test/"),
        ("https:\\\\u:a b@h.test\\x", "https:\\\\***@h.test\\x"),
        (" HTTPS://u:a b@h.test/", " HTTPS://***@h.test/"),
        ("ht\ttps://u:a b@h.test/", "ht\ttps://***@h.test/"),  # WHATWG drops the tab
        ("ssh://u:a b@h.test/r", "ssh://***@h.test/r"),
        ("//user:pw@host.test/", "//***@host.test/"),
        ("https://u:a b@[::1]:8080/", "https://***@[::1]:8080/"),
    ],
)
def test_a_value_that_is_one_url_loses_its_userinfo_by_the_urls_structure(
    url: str, kept: str
) -> None:
    """A URL's userinfo is everything before the last "@" of its authority, whitespace
    and all (WHATWG and urlsplit both read "u:pa ss@h" so): the gate refuses it
    (``url_rejected:whitespace``), and the echo of what it refused holds no password."""
    assert redact_url(url) == kept


@pytest.mark.parametrize(
    "url",
    [
        "npm:lodash@4.17.21",
        "npm:@types/node",
        "mailto:bob@host.test",
        "https://host.test/@user/page",
        "https://host.test/?to=a b@c",
        "https://host.test#a@b",
        "x-file:bob@corp.com",
        "origin.test/page",
    ],
)
def test_a_url_without_a_userinfo_is_left_as_it_is(url: str) -> None:
    assert redact_url(url) == url


@pytest.mark.parametrize("field", ["URL", "ENDPOINT"])
def test_a_fail_reply_echoes_a_url_whose_password_holds_a_space_without_it(field: str) -> None:
    url = "https://user:ab s3cr3tpw@origin.test/page"
    error = OpError(ErrorCode.URL_REJECTED, "whitespace", fields=((field, url),))
    assert fail_reply(error, None).get(field) == "https://***@origin.test/page"


@dataclass(frozen=True)
class _Audit(OpAudit):
    url: str | None
    count: int = 0


def test_every_text_field_of_an_ops_audit_is_redacted() -> None:
    assert _Audit("https://u:p@h.test/", 3).record_fields() == {
        "url": "https://***@h.test/",
        "count": 3,
    }
    assert _Audit(None).record_fields() == {"url": None, "count": 0}


def test_an_audits_url_field_is_redacted_by_the_urls_structure() -> None:
    assert _Audit("https://u:a\u3000b@h.test/").record_fields()["url"] == "https://***@h.test/"


def test_a_fail_reply_echoes_what_it_refused_without_the_password() -> None:
    error = OpError(ErrorCode.URL_REJECTED, "userinfo", fields=(("URL", "https://u:p@h.test/"),))
    assert fail_reply(error, "t1").fields == (
        ("ID", "t1"),
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "url_rejected:userinfo"),
        ("URL", "https://***@h.test/"),
    )

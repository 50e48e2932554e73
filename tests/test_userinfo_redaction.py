"""``redact_userinfo``: the one way a client's URL, or text that may hold one, reaches an audit
record, a memory write or a FAIL reply; each op's audit goes through it (``OpAudit``)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from csp_web.core.api.audit import OpAudit, redact_userinfo
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
        ("//user:pw@host.test/", "//***@host.test/"),
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
    ],
)
def test_text_without_a_userinfo_is_left_as_it_is(text: str) -> None:
    assert redact_userinfo(text) == text


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


def test_a_fail_reply_echoes_what_it_refused_without_the_password() -> None:
    error = OpError(ErrorCode.URL_REJECTED, "userinfo", fields=(("URL", "https://u:p@h.test/"),))
    assert fail_reply(error, "t1").fields == (
        ("ID", "t1"),
        ("SCOPE", "[]"),
        ("DATA", "none"),
        ("ERROR", "url_rejected:userinfo"),
        ("URL", "https://***@h.test/"),
    )

"""A worker's answer (csp_web/infra/answers.py): what a worker sends is rebuilt exactly, and
anything else a broken or subverted worker could send is Malformed, never a value of another
shape, a larger one, or a crash of the daemon."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from csp_web.infra.answers import Malformed, TaskRaised, decode, encode_raised, encode_value
from specialists.web.pages.loading import Page
from specialists.web.search.base import BackendFailure, Hit

PAGE = Page(
    url="https://a.test/\udcff",  # a lone surrogate passes as it is
    status=200,
    content_type="text/html",
    kind="html",
    title="潮汐",
    markdown="# Tides\n",
    redirect_chain=("https://a.test/",),
    meta={"og:title": "Tides"},
    fetched_at=1.5,
    pages=3,
)


def page_json(**changes: Any) -> bytes:
    data = json.loads(encode_value(PAGE).decode("utf-8", "surrogatepass"))
    data["ok"].update(changes)
    return json.dumps(data).encode()


def test_a_page_hits_and_summaries_come_back_equal_and_of_their_types() -> None:
    assert decode(encode_value(PAGE), Page) == PAGE
    hits = [Hit("https://a.test/", "A", "a", score=1, extra_snippets=("b",))]
    assert decode(encode_value(hits), list[Hit]) == hits
    assert decode(encode_value(("a", "b")), tuple[str, ...]) == ("a", "b")
    assert decode(encode_value(None), None) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"url": ["https://a.test/"]},
        {"markdown": 7},
        {"status": True},
        {"kind": "script"},
        {"redirect_chain": "https://a.test/"},
        {"meta": {"og:title": ["x"]}},
        {"planted": "x"},
        {"$": "Hit"},
    ],
)
def test_a_page_with_a_field_of_another_type_or_an_extra_field_is_malformed(
    changes: dict[str, Any],
) -> None:
    with pytest.raises(Malformed):
        decode(page_json(**changes), Page)


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 2_000_000 + b"]" * 2_000_000,  # nested past the parser's depth
        b"\xff",
        b'{"ok": 1, "raised": 2}',
        b'{"ok": "1"}',
        b"[]",
        b'{"ok": 1' + b"0" * 5000 + b"}",  # an int past Python's digit limit
    ],
)
def test_an_answer_that_is_not_json_of_the_shape_is_malformed(data: bytes) -> None:
    with pytest.raises(Malformed):
        decode(data, int)


def test_an_exception_of_a_named_class_comes_back_with_its_attributes() -> None:
    failure = BackendFailure("rate_limited", "slow down", rate=True, retry_after_s=2.0)
    with pytest.raises(BackendFailure) as raised:
        decode(encode_raised(failure, "Traceback"), list[Hit], (BackendFailure,))
    got = raised.value
    assert (got.args, got.reason, got.hint, got.rate, got.retry_after_s, got.counts) == (
        failure.args,
        "rate_limited",
        "slow down",
        True,
        2.0,
        True,
    )


def test_an_exception_of_another_class_is_its_traceback_only() -> None:
    with pytest.raises(TaskRaised) as raised:
        decode(encode_raised(ValueError("x"), "Traceback: ValueError"), int, (BackendFailure,))
    assert raised.value.text == "Traceback: ValueError"


@pytest.mark.parametrize(
    "attrs", [{"_reason": "x"}, {"__class__": "x"}, {"reason": ["x"]}, {"reason": {"a": 1}}]
)
def test_an_exception_with_a_private_or_non_scalar_attribute_is_malformed(
    attrs: dict[str, Any],
) -> None:
    name = f"{BackendFailure.__module__}.{BackendFailure.__qualname__}"
    raised = {"class": name, "args": ["x"], "attrs": attrs}
    data = json.dumps({"raised": raised, "text": ""}).encode()
    with pytest.raises(Malformed):
        decode(data, int, (BackendFailure,))


def test_a_value_that_is_not_data_does_not_encode() -> None:
    with pytest.raises(TypeError):
        encode_value(object())
    with pytest.raises(TypeError):
        encode_value(dataclasses)

"""The one decoding of a peer's JSON (csp_web/core/api/peer_json.py): any refusal is NotJson."""

from __future__ import annotations

import pytest

from csp_web.core.api import peer_json
from csp_web.core.api.fields import MAX_JSON_DEPTH


def test_json_nested_to_the_depth_cap_is_read() -> None:
    depth = MAX_JSON_DEPTH
    assert peer_json.loads("[" * depth + "]" * depth) is not None


@pytest.mark.parametrize(
    "data",
    [
        b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1),
        b"[" * 100_000 + b"]" * 100_000,  # json.loads: RecursionError
        b'{"a": ' * 100_000 + b"1" + b"}" * 100_000,
        b"[" * 100_000,  # and never closed
        b"not json",
        b"",
        b'{"a": "\xff"}',  # not UTF-8
        b"1" * 5000,  # past Python's 4,300-digit int conversion limit
    ],
)
def test_anything_json_refuses_is_not_json_a_value_error(data: bytes) -> None:
    with pytest.raises(peer_json.NotJson):
        peer_json.loads(data)
    assert issubclass(peer_json.NotJson, ValueError)  # a caller's except ValueError holds


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '{"a": "' + "[" * 1000 + '"}'
    assert peer_json.loads(text.encode()) == {"a": "[" * 1000}


def test_json_in_utf16_is_read_as_json_loads_reads_it() -> None:
    assert peer_json.loads('{"a": 1}'.encode("utf-16")) == {"a": 1}

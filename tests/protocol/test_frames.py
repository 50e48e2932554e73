"""The frame model and the serializer's choices for single values (SPEC V-3 to V-5)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest

from protocol import FREE_TEXT_KEYS, Reply, Status, Task, serialize

SPEC = Path(__file__).resolve().parents[2] / "protocol" / "SPEC.md"


def field_line(key: str, value: str) -> bytes:
    """The one field line ``serialize`` writes for ``key value``."""
    return serialize(Reply(Status.OK, ((key, value),))).split(b"\n")[1]


def header_line(task: Task) -> bytes:
    return serialize(task).split(b"\n")[0]


def test_free_text_keys_are_the_ones_spec_v4_lists() -> None:
    """V-4: the serializer's always-quoted keys are exactly SPEC's list."""
    text = SPEC.read_text(encoding="utf-8")
    rule = text.split("**V-4**", 1)[1].split("- **V-5**", 1)[0]
    assert set(re.findall(r"`([A-Z_]+)`", rule)) == FREE_TEXT_KEYS


@pytest.mark.parametrize("key", sorted(FREE_TEXT_KEYS))
def test_free_text_is_quoted_even_when_it_would_survive_raw(key: str) -> None:
    """V-4: free text is always written as a JSON string."""
    assert field_line(key, "plain words") == f'{key} "plain words"'.encode()


def test_quote_keys_chooses_which_keys_are_always_quoted() -> None:
    """V-4: the always-quoted set is a parameter of serialize."""
    frame = Reply(Status.OK, (("TITLE", "a b"), ("DATA", "c")))
    assert serialize(frame, quote_keys=frozenset()) == b"STATUS OK\nTITLE a b\nDATA c\n\n"
    assert serialize(frame, quote_keys=frozenset({"DATA"})) == b'STATUS OK\nTITLE a b\nDATA "c"\n\n'


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("", b'DATA ""'),
        (" lead", b'DATA " lead"'),
        ("trail ", b'DATA "trail "'),
        ("\tlead", b'DATA "\\tlead"'),
        ("trail\t", b'DATA "trail\\t"'),
        ("in\tside", b'DATA "in\\tside"'),
        ('"leading quote', b'DATA "\\"leading quote"'),
        ("two\nlines", b'DATA "two\\nlines"'),
        ("cr\rhere", b'DATA "cr\\rhere"'),
        ("nul\x00", b'DATA "nul\\u0000"'),
        ("del\x7f", b'DATA "del\\u007f"'),
        ("c1\x80\x85\x9f", b'DATA "c1\\u0080\\u0085\\u009f"'),
        ("back\\slash\n", b'DATA "back\\\\slash\\n"'),
        ("caf\u00e9\n", 'DATA "caf\u00e9\\n"'.encode()),
    ],
    ids=repr,
)
def test_value_that_would_not_survive_raw_is_quoted_and_escaped(value: str, line: bytes) -> None:
    """V-3: quoted when needed; DEL and C1 escaped as \\u00XX so the line obeys F-5."""
    assert field_line("DATA", value) == line


@pytest.mark.parametrize(
    "value",
    [
        "plain",
        'neo4j.com:"quoted inside"',
        'trailing quote"',
        "back\\slash",
        "[a.com,b.org]",
        "url:https://a,url:https://b",
        "caf\u00e9 \u2192 \U0001f600 \u00a0",
        "inner  double  spaces",
    ],
)
def test_value_that_survives_raw_is_written_raw(value: str) -> None:
    """V-1, V-3, V-5: raw unless quoting is needed; SCOPE and DATA lists keep their spelling."""
    assert field_line("DATA", value) == f"DATA {value}".encode()


def test_json_valued_fields_are_raw_json() -> None:
    """V-5: PARAMS and PAYLOAD carry a JSON object raw, since it never starts with a quote."""
    assert field_line("PARAMS", '{"path": "src/index.ts"}') == b'PARAMS {"path": "src/index.ts"}'
    assert field_line("PAYLOAD", '{"a": [1, "b"]}') == b'PAYLOAD {"a": [1, "b"]}'


@pytest.mark.parametrize(
    ("inline", "header"),
    [
        (None, b"TASK REQ:exec IN:SHELL OUT:EXEC_RESULT"),
        ("npm test", b"TASK REQ:exec npm test IN:SHELL OUT:EXEC_RESULT"),
        ("", b'TASK REQ:exec "" IN:SHELL OUT:EXEC_RESULT'),
        (" npm", b'TASK REQ:exec " npm" IN:SHELL OUT:EXEC_RESULT'),
        ('"x', b'TASK REQ:exec "\\"x" IN:SHELL OUT:EXEC_RESULT'),
        ("a\nb", b'TASK REQ:exec "a\\nb" IN:SHELL OUT:EXEC_RESULT'),
        ("a IN:B OUT:C", b"TASK REQ:exec a IN:B OUT:C IN:SHELL OUT:EXEC_RESULT"),
    ],
    ids=repr,
)
def test_inline_text_is_written_as_a_value(inline: str | None, header: bytes) -> None:
    """F-3, V-3: inline text is raw unless it needs quoting; free text rules do not apply."""
    assert header_line(Task("exec", "SHELL", "EXEC_RESULT", inline)) == header


def test_value_with_a_lone_surrogate_cannot_be_serialized() -> None:
    """V-3: a lone surrogate has no UTF-8 encoding, so no line could carry it."""
    with pytest.raises(ValueError, match="surrogate"):
        serialize(Reply(Status.OK, (("DATA", "a\ud800"),)))
    with pytest.raises(ValueError, match="surrogate"):
        serialize(Reply(Status.OK, (("TITLE", "\udc00"),)))
    with pytest.raises(ValueError, match="surrogate"):
        serialize(Task("exec", "SHELL", "EXEC_RESULT", "\ud83d"))


# The frame model.


def test_status_is_ok_partial_or_fail() -> None:
    """F-7: the three reply statuses."""
    assert [str(s) for s in Status] == ["OK", "PARTIAL", "FAIL"]


@pytest.mark.parametrize(
    ("req", "domain", "out"),
    [("Exec", "SHELL", "X"), ("", "SHELL", "X"), ("exec", "shell", "X"), ("exec", "SHELL", "")],
)
def test_task_refuses_names_outside_the_header_grammar(req: str, domain: str, out: str) -> None:
    """F-3: a Task that could not be written as a valid header cannot be built."""
    with pytest.raises(ValueError, match=r"."):
        Task(req, domain, out)


@pytest.mark.parametrize("key", ["", "data", "1A", "A-B", "A B"])
def test_frames_refuse_keys_outside_the_key_grammar(key: str) -> None:
    """F-4, F-8: a frame that could not be written as valid field lines cannot be built."""
    with pytest.raises(ValueError, match="key"):
        Reply(Status.OK, ((key, "v"),))
    with pytest.raises(ValueError, match="key"):
        Task("exec", "SHELL", "X", None, ((key, "v"),))


def test_frames_refuse_values_that_are_not_strings() -> None:
    with pytest.raises(TypeError, match="DATA"):
        Reply(Status.OK, (("DATA", cast(Any, 1)),))


def test_field_access_keeps_order_and_first_value() -> None:
    """F-4: get is the first value, get_all every value in order, id the ID field."""
    frame = Reply(Status.OK, (("SNIPPET", "a"), ("ID", "t-1"), ("SNIPPET", "b"), ("ID", "t-2")))
    assert frame.get("SNIPPET") == "a"
    assert frame.get("MISSING") is None
    assert frame.get("MISSING", "dflt") == "dflt"
    assert frame.get_all("SNIPPET") == ["a", "b"]
    assert frame.get_all("MISSING") == []
    assert frame.id == "t-1"
    assert Task("ops", "SYS", "OPS").id is None


def test_frames_are_immutable_values() -> None:
    frame = Reply(Status.OK, (("DATA", "x"),))
    assert frame == Reply(Status.OK, (("DATA", "x"),))
    assert hash(frame) == hash(Reply(Status.OK, (("DATA", "x"),)))
    with pytest.raises(AttributeError):
        frame.status = Status.FAIL  # type: ignore[misc]

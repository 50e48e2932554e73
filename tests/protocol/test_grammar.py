"""The grammar of headers, fields, values and line encoding, and resync after each error."""

from __future__ import annotations

import pytest

from protocol import ErrorCode, Reply, Status, Task

from .helpers import Failed, byte_by_byte, run

GOOD = b"STATUS OK\nDATA next\n\n"
GOOD_FRAME = Reply(Status.OK, (("DATA", "next"),))


def parse(wire: bytes) -> Task | Reply:
    """The one frame ``wire`` holds; anything else fails the test."""
    [frame] = run([wire])
    assert isinstance(frame, Task | Reply), frame
    return frame


def failure(wire: bytes) -> Failed:
    """The one error ``wire`` causes; anything else fails the test."""
    [outcome] = run([wire])
    assert isinstance(outcome, Failed), outcome
    return outcome


def code_of(wire: bytes) -> ErrorCode:
    return failure(wire).code


# Task headers.


def test_task_header_without_inline_text_has_no_inline() -> None:
    """F-3: REQ, IN and OUT are all a header needs."""
    assert parse(b"TASK REQ:ops IN:SYS OUT:OPS\n\n") == Task("ops", "SYS", "OPS")


def test_inline_text_is_everything_between_op_and_in() -> None:
    """F-3: inline text is the op's main argument, spaces and all."""
    frame = parse(b"TASK REQ:exec npm run  build IN:SHELL OUT:EXEC_RESULT\n\n")
    assert frame == Task("exec", "SHELL", "EXEC_RESULT", "npm run  build")


@pytest.mark.parametrize(
    ("header", "inline"),
    [
        (b"TASK REQ:search a IN:B c IN:WEB OUT:URL_REFS", "a IN:B c"),
        (b"TASK REQ:search a OUT:B c IN:WEB OUT:URL_REFS", "a OUT:B c"),
        (b"TASK REQ:search x IN:A OUT:B IN:WEB OUT:URL_REFS", "x IN:A OUT:B"),
        (b"TASK REQ:search IN: IN:WEB OUT:URL_REFS", "IN:"),
        (b"TASK REQ:search OUT:X IN:WEB OUT:URL_REFS", "OUT:X"),
    ],
)
def test_inline_text_may_contain_in_and_out_because_the_header_splits_from_the_right(
    header: bytes, inline: str
) -> None:
    """F-3: inline text may contain ` IN:` or ` OUT:`."""
    assert parse(header + b"\n\n") == Task("search", "WEB", "URL_REFS", inline)


def test_quoted_inline_text_is_decoded() -> None:
    """F-3, V-2: inline text is a value, so it may be a JSON string."""
    frame = parse(b'TASK REQ:exec "echo \\"hi\\"\\nls" IN:SHELL OUT:EXEC_RESULT\n\n')
    assert frame == Task("exec", "SHELL", "EXEC_RESULT", 'echo "hi"\nls')


def test_quoted_inline_text_may_contain_in_and_out() -> None:
    """F-3, V-2: a quoted inline holding ` IN:X OUT:Y` still splits at the last pair."""
    frame = parse(b'TASK REQ:search "a IN:X OUT:Y" IN:WEB OUT:URL_REFS\n\n')
    assert frame == Task("search", "WEB", "URL_REFS", "a IN:X OUT:Y")


def test_quoted_empty_inline_text_is_the_empty_string() -> None:
    """F-3, V-2: `""` inline is present but empty, unlike no inline at all."""
    frame = parse(b'TASK REQ:exec "" IN:SHELL OUT:EXEC_RESULT\n\n')
    assert frame == Task("exec", "SHELL", "EXEC_RESULT", "")
    assert frame != Task("exec", "SHELL", "EXEC_RESULT")


def test_quoted_inline_text_with_text_after_the_closing_quote_is_bad_value() -> None:
    """F-3, V-2: inline text obeys the value rules."""
    assert code_of(b'TASK REQ:exec "npm" test IN:SHELL OUT:EXEC_RESULT\n\n') == (
        ErrorCode.BAD_VALUE
    )


@pytest.mark.parametrize(
    "op",
    [b"Search", b"1search", b"_search", b"-x", b".x", b"se!arch", b"s\xc3\xa9arch", b""],
    ids=repr,
)
def test_op_name_outside_the_op_grammar_is_bad_header(op: bytes) -> None:
    """F-3: <op> matches [a-z][a-z0-9_.-]*."""
    assert code_of(b"TASK REQ:" + op + b" IN:WEB OUT:URL_REFS\n\n") == ErrorCode.BAD_HEADER


@pytest.mark.parametrize("op", ["a", "web.fetch", "a-b_c.9", "x0"])
def test_op_names_inside_the_grammar_parse(op: str) -> None:
    """F-3: dots, dashes, underscores and digits after the first letter."""
    assert parse(f"TASK REQ:{op} IN:WEB OUT:X\n\n".encode()) == Task(op, "WEB", "X")


@pytest.mark.parametrize(
    "header",
    [
        b"TASK REQ:search",
        b"TASK REQ:search IN:WEB",
        b"TASK REQ:search OUT:URL_REFS",
        b"TASK REQ:search OUT:URL_REFS IN:WEB",
        b"TASK REQ:search IN:WEB OUT:",
        b"TASK REQ:search IN: OUT:URL_REFS",
        b"TASK REQ:search IN:web OUT:URL_REFS",
        b"TASK REQ:search IN:WEB OUT:url_refs",
        b"TASK REQ:search IN:1WEB OUT:URL_REFS",
        b"TASK REQ:search IN:WEB OUT:URL-REFS",
        b"TASK REQ:search IN:WEB OUT:URL_REFS ",
        b"TASK REQ:search IN:WEB  OUT:URL_REFS",
        b"TASK REQ:search IN:WEB\tOUT:URL_REFS",
    ],
    ids=repr,
)
def test_task_header_without_a_valid_in_and_out_is_bad_header(header: bytes) -> None:
    """F-3: IN:<domain> and OUT:<kind> close the header and match [A-Z][A-Z0-9_]*."""
    assert code_of(header + b"\n\n") == ErrorCode.BAD_HEADER


# Reply headers.


@pytest.mark.parametrize("status", list(Status))
def test_each_status_value_is_a_reply_header(status: Status) -> None:
    """F-7: STATUS OK, PARTIAL and FAIL."""
    assert parse(f"STATUS {status}\n\n".encode()) == Reply(status)


@pytest.mark.parametrize(
    "header",
    [
        b"STATUS",
        b"STATUS ",
        b"STATUS ok",
        b"STATUS DONE",
        b"STATUS OK ",
        b"STATUS  OK",
        b"STATUS OK|PARTIAL|FAIL",
        b"STATUS\tOK",
        b"status OK",
        b"HELLO",
        b"TASK",
        b"TASK REQ",
        b"task REQ:search IN:WEB OUT:URL_REFS",
        b" TASK REQ:search IN:WEB OUT:URL_REFS",
        b"TASK  REQ:search IN:WEB OUT:URL_REFS",
        b"DATA none",
    ],
    ids=repr,
)
def test_first_line_that_is_no_task_or_status_header_is_bad_header(header: bytes) -> None:
    """F-7: any other first line is bad_header."""
    assert code_of(header + b"\nDATA none\n\n") == ErrorCode.BAD_HEADER


# Field lines.


def test_key_alone_has_the_empty_value() -> None:
    """F-4: `KEY` alone, and `KEY ` with its space, both carry the empty value."""
    assert parse(b"STATUS OK\nSCOPE\nDATA \n\n") == Reply(Status.OK, (("SCOPE", ""), ("DATA", "")))


def test_repeated_keys_keep_their_order() -> None:
    """F-4: a key may repeat and the order of all fields is kept."""
    frame = parse(b"STATUS OK\nSNIPPET a\nDATA d\nSNIPPET b\nSNIPPET c\n\n")
    assert frame.fields == (("SNIPPET", "a"), ("DATA", "d"), ("SNIPPET", "b"), ("SNIPPET", "c"))
    assert frame.get_all("SNIPPET") == ["a", "b", "c"]
    assert frame.get("SNIPPET") == "a"


def test_frame_with_no_fields_has_an_empty_field_tuple() -> None:
    """F-1: zero field lines are allowed."""
    assert parse(b"STATUS FAIL\n\n") == Reply(Status.FAIL, ())


@pytest.mark.parametrize("key", ["A", "ID", "X9", "STATUS_CODE", "A_", "A__1"])
def test_keys_inside_the_key_grammar_parse(key: str) -> None:
    """F-4: keys match [A-Z][A-Z0-9_]*."""
    assert parse(f"STATUS OK\n{key} v\n\n".encode()).fields == ((key, "v"),)


@pytest.mark.parametrize(
    "line",
    [
        b"data x",
        b"Data x",
        b"1KEY x",
        b"_KEY x",
        b"KEY-X x",
        b"KEY.X x",
        b"KEY:x",
        b"K\xc3\x89Y x",
        b" KEY x",
        b"KEY\tx",
        b"\t",
        b'"KEY" x',
    ],
    ids=repr,
)
def test_field_key_outside_the_key_grammar_is_bad_frame(line: bytes) -> None:
    """F-8: a field line whose key breaks [A-Z][A-Z0-9_]* is bad_frame."""
    assert code_of(b"STATUS OK\n" + line + b"\n\n") == ErrorCode.BAD_FRAME


# Values.


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"plain", "plain"),
        (b" leading space", " leading space"),
        (b"trailing space ", "trailing space "),
        (b'neo4j.com:"Official driver..."', 'neo4j.com:"Official driver..."'),
        (b'ends with a quote"', 'ends with a quote"'),
        (b'a "b" c', 'a "b" c'),
        (b"[a.com,b.org]", "[a.com,b.org]"),
        (b'{"facing": "back"}', '{"facing": "back"}'),
        (b"back\\slash \\n stays", "back\\slash \\n stays"),
        (b"tab\there", "tab\there"),
        ("caf\u00e9 \u2192 \U0001f600 \u00a0".encode(), "caf\u00e9 \u2192 \U0001f600 \u00a0"),
    ],
    ids=repr,
)
def test_unquoted_value_is_the_rest_of_the_line_taken_raw(raw: bytes, value: str) -> None:
    """V-1, F-5: after the one separating space the line is the value, TAB included."""
    assert parse(b"STATUS OK\nDATA " + raw + b"\n\n").fields == (("DATA", value),)


@pytest.mark.parametrize(
    ("quoted", "value"),
    [
        (b'""', ""),
        (b'"npm test"', "npm test"),
        (b'" edge "', " edge "),
        (b'"line one\\nline two"', "line one\nline two"),
        (b'"say \\"hi\\""', 'say "hi"'),
        (b'"back\\\\slash \\/ \\b\\f\\r\\t"', "back\\slash / \b\f\r\t"),
        (b'"\\u00e9\\u2192"', "\u00e9\u2192"),
        (b'"\\ud83d\\ude00"', "\U0001f600"),
        (b'"\\u0000\\u007f\\u0085"', "\x00\x7f\x85"),
        ('"\u00e9 raw"'.encode(), "\u00e9 raw"),
    ],
    ids=repr,
)
def test_quoted_value_is_one_json_string_literal_decoded(quoted: bytes, value: str) -> None:
    """V-2: a leading quote makes the value a JSON string that stands for its decoded text."""
    assert parse(b"STATUS OK\nTITLE " + quoted + b"\n\n").fields == (("TITLE", value),)


@pytest.mark.parametrize(
    "quoted",
    [
        b'"abc" ',
        b'"abc"x',
        b'"abc""',
        b'"a" "b"',
        b'"',
        b'"abc',
        b'"abc\\"',
        b'"\\x41"',
        b'"\\u12"',
        b'"\\uZZZZ"',
        b'"\\\'"',
        b'"a\tb"',
    ],
    ids=repr,
)
def test_quoted_value_that_is_not_exactly_one_json_string_is_bad_value(quoted: bytes) -> None:
    """V-2: text after the closing quote, no closing quote, bad escapes, raw TAB inside."""
    assert code_of(b"STATUS OK\nTITLE " + quoted + b"\n\n") == ErrorCode.BAD_VALUE


def test_quoted_value_with_text_after_closing_quote_is_bad_value() -> None:
    """V-2: nothing may follow the closing quote."""
    assert code_of(b'STATUS OK\nTITLE "Article" Title\n\n') == ErrorCode.BAD_VALUE


@pytest.mark.parametrize(
    "escape",
    [b"\\ud800", b"\\udbff", b"\\udc00", b"\\udfff", b"a\\ud83d", b"\\ude00\\ud83d", b"\\ud83dx"],
    ids=repr,
)
def test_escape_decoding_to_a_lone_surrogate_is_bad_value(escape: bytes) -> None:
    """V-2: no UTF-8 peer could read a lone surrogate back."""
    assert code_of(b'STATUS OK\nTITLE "' + escape + b'"\n\n') == ErrorCode.BAD_VALUE


# Encoding.


@pytest.mark.parametrize(
    "bad",
    [
        b"\xff",
        b"\xfe",
        b"\x80",
        b"\xc3",
        b"\xe2\x86",
        b"\xc0\xaf",
        b"\xe0\x80\xaf",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\xf8\x88\x80\x80\x80",
    ],
    ids=repr,
)
def test_invalid_utf8_is_bad_encoding(bad: bytes) -> None:
    """F-5: every line is strict UTF-8: no stray, truncated, overlong or surrogate sequences."""
    assert code_of(b"STATUS OK\nDATA a" + bad + b"b\n\n") == ErrorCode.BAD_ENCODING
    assert code_of(b"STATUS OK" + bad + b"\n\n") == ErrorCode.BAD_ENCODING


@pytest.mark.parametrize(
    "char",
    [*(chr(c) for c in range(0x20) if c not in (0x09, 0x0A)), "\x7f", "\x80", "\x85", "\x9f"],
    ids=lambda c: f"U+{ord(c):04X}",
)
def test_control_character_other_than_tab_is_bad_encoding(char: str) -> None:
    """F-5, F-2: C0 but TAB (CR mid-line included), DEL and C1 may not stand on a line."""
    raw = char.encode()
    assert code_of(b"STATUS OK\nDATA a" + raw + b"b\n\n") == ErrorCode.BAD_ENCODING
    assert code_of(b"STATUS OK\nDATA " + raw + b"x\n\n") == ErrorCode.BAD_ENCODING
    assert code_of(b"STA" + raw + b"TUS OK\n\n") == ErrorCode.BAD_ENCODING
    assert code_of(b'STATUS OK\nTITLE "a' + raw + b'b"\n\n') == ErrorCode.BAD_ENCODING


def test_cr_before_crlf_is_a_control_character() -> None:
    """F-2: only the CR right before LF belongs to the line end."""
    assert code_of(b"STATUS OK\nDATA x\r\r\n\n") == ErrorCode.BAD_ENCODING


def test_lone_cr_does_not_end_a_line() -> None:
    """F-2: CR alone is no line end but a control character."""
    assert code_of(b"STATUS OK\rDATA x\n\n") == ErrorCode.BAD_ENCODING


def test_tab_may_stand_anywhere_on_a_line() -> None:
    """F-5: TAB is the one allowed control character."""
    assert parse(b"STATUS OK\nDATA \t\ta\tb\t\n\n").fields == (("DATA", "\t\ta\tb\t"),)
    assert parse(b"TASK REQ:exec a\tb IN:SHELL OUT:EXEC_RESULT\n\n") == Task(
        "exec", "SHELL", "EXEC_RESULT", "a\tb"
    )


def test_characters_just_past_c1_are_allowed() -> None:
    """F-5: U+00A0 and above are text, not C1 controls."""
    assert parse("STATUS OK\nDATA \u00a0\u00ff\u2028\n\n".encode()).fields == (
        ("DATA", "\u00a0\u00ff\u2028"),
    )


# Errors carry the frame's ID when its ID line could be read.


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (b"STATUS OK\nID t-1\nbad x\n\n", ErrorCode.BAD_FRAME),
        (b"STATUS OK\nbad x\nID t-1\n\n", ErrorCode.BAD_FRAME),
        (b'STATUS OK\nID t-1\nTITLE "x" y\n\n', ErrorCode.BAD_VALUE),
        (b"STATUS MAYBE\nID t-1\n\n", ErrorCode.BAD_HEADER),
        (b"TASK REQ:Bad IN:WEB OUT:X\nID t-1\n\n", ErrorCode.BAD_HEADER),
        (b'TASK REQ:x "a" b IN:WEB OUT:X\nID t-1\n\n', ErrorCode.BAD_VALUE),
    ],
    ids=repr,
)
def test_error_carries_the_frame_id_when_an_id_line_was_readable(
    wire: bytes, code: ErrorCode
) -> None:
    """R-5: the FAIL reply for a malformed frame can echo its ID."""
    assert failure(wire) == Failed(code, "t-1")


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"STATUS OK\nID t-1\nDATA a\x00b\n\n", id="nul-in-field"),
        pytest.param(b"STATUS OK\nID t-1\nDATA \xff\n\n", id="invalid-utf8-in-field"),
        pytest.param(b"STATUS \x7fOK\nID t-1\n\n", id="del-in-header"),
    ],
)
def test_bad_encoding_error_carries_the_frame_id_when_the_id_line_is_readable(
    wire: bytes,
) -> None:
    """R-5, F-5: a bad byte on another line does not make the ID line unreadable."""
    assert failure(wire) == Failed(ErrorCode.BAD_ENCODING, "t-1")


@pytest.mark.parametrize(
    "wire",
    [
        b"STATUS OK\nbad x\n\n",
        b'STATUS OK\nTITLE "x" y\n\n',
        b"STATUS MAYBE\n\n",
        b"STATUS OK\nDATA a\x00b\n\n",
        b"STATUS OK\nID a\x01b\nbad x\n\n",
        b"STATUS OK\nIDX t-1\nbad x\n\n",
    ],
    ids=repr,
)
def test_error_without_a_readable_id_line_carries_no_frame_id(wire: bytes) -> None:
    """R-5: no ID line, or one holding a control character, gives frame_id None."""
    assert failure(wire).frame_id is None


@pytest.mark.parametrize(
    "wire",
    [
        pytest.param(b"STATUS OK\nID t\xff1\nDATA x\n\n", id="id-line-itself-bad"),
        pytest.param(b"STATUS OK\nID t\xff1\nbad x\n\n", id="other-line-bad"),
    ],
)
def test_id_line_that_is_not_utf8_gives_no_frame_id(wire: bytes) -> None:
    """R-5, F-5: an ID the peer did not send (bytes replaced by U+FFFD) must not be echoed."""
    assert failure(wire).frame_id is None


@pytest.mark.parametrize(
    "error_line",
    [
        pytest.param(b"bad x", id="bad_frame"),
        pytest.param(b'TITLE "x" y', id="bad_value"),
        pytest.param(b"DATA \x00", id="bad_encoding"),
    ],
)
def test_quoted_id_line_gives_its_decoded_frame_id_whatever_the_error(error_line: bytes) -> None:
    """R-5, V-2: `ID "t-1"` is the ID t-1, as the bad_header path already reports it."""
    assert failure(b'STATUS MAYBE\nID "t-1"\n\n').frame_id == "t-1"
    assert failure(b'STATUS OK\nID "t-1"\n' + error_line + b"\n\n").frame_id == "t-1"


# Resync: after each kind of error the next frame parses.

MALFORMED = [
    pytest.param(b"STATUS OK\nbad key\nDATA x\n\n", ErrorCode.BAD_FRAME, id="bad_frame"),
    pytest.param(b"HELLO world\nDATA x\n\n", ErrorCode.BAD_HEADER, id="bad_header"),
    pytest.param(b"TASK REQ:x IN:A\nDATA x\n\n", ErrorCode.BAD_HEADER, id="bad_task_header"),
    pytest.param(b"STATUS OK\nDATA \xff\nDATA x\n\n", ErrorCode.BAD_ENCODING, id="bad_utf8"),
    pytest.param(b"STATUS OK\nDATA a\rb\nDATA x\n\n", ErrorCode.BAD_ENCODING, id="bad_cr"),
    pytest.param(b'STATUS OK\nTITLE "a" b\nDATA x\n\n', ErrorCode.BAD_VALUE, id="bad_value"),
    pytest.param(b'STATUS OK\nTITLE "\\udc00"\n\n', ErrorCode.BAD_VALUE, id="bad_surrogate"),
]


@pytest.mark.parametrize(("bad", "code"), MALFORMED)
def test_after_a_malformed_frame_the_next_frame_parses(bad: bytes, code: ErrorCode) -> None:
    """R-5, R-6: one error for the bad frame, then the connection goes on at its blank line."""
    wire = bad + GOOD + bad + b"\n\r\n" + GOOD
    expected = [Failed(code), GOOD_FRAME, Failed(code), GOOD_FRAME]
    assert run([wire]) == expected
    assert run(byte_by_byte(wire)) == expected


@pytest.mark.parametrize(("bad", "code"), MALFORMED)
def test_malformed_frame_at_eof_raises_once_then_closes(bad: bytes, code: ErrorCode) -> None:
    """R-5, F-6: a bad frame cut short by EOF is still one error."""
    assert run([bad.removesuffix(b"\n\n")]) == [Failed(code)]


def test_lines_of_a_malformed_frame_do_not_leak_into_the_next_frame() -> None:
    """R-6: the rest of the bad frame is discarded."""
    assert run([b"STATUS OK\nbad\nDATA leaked\n\nSTATUS OK\n\n"]) == [
        Failed(ErrorCode.BAD_FRAME),
        Reply(Status.OK),
    ]

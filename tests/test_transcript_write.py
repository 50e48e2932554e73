"""What ``--record`` writes into a transcript as its expected replies: the replies received,
keeping the author's lines (and placeholders) that still match, and everything else in the
file as written."""

from __future__ import annotations

from csp_web.cli.transcript import parse_transcript
from csp_web.cli.transcript_write import merged, rewrite_expected
from protocol import Reply, Status


def _reply(*fields: tuple[str, str], status: Status = Status.OK) -> Reply:
    return Reply(status, tuple(fields))


def test_a_matching_reply_is_kept_as_written() -> None:
    want = ["STATUS OK", "COUNT {{int}}"]
    assert merged(want, ["STATUS OK", "COUNT 7"]) is want


def test_a_line_still_matching_its_field_keeps_its_placeholder_and_the_rest_is_as_received() -> (
    None
):
    want = ["STATUS FAIL", "ERROR bad_value:{{any}}", "URL x"]
    have = ["STATUS FAIL", "SCOPE []", "ERROR bad_value:too long", "URL y"]
    assert merged(want, have) == ["STATUS FAIL", "SCOPE []", "ERROR bad_value:{{any}}", "URL y"]


def test_a_duration_and_a_line_that_would_read_as_a_placeholder_become_any() -> None:
    have = ["STATUS OK", "EXEC_TIME 12", "DATA {{int}} is literal"]
    assert merged(["STATUS OK"], have) == ["STATUS OK", "EXEC_TIME {{any}}", "DATA {{any}}"]


def test_no_reply_received_keeps_the_expected_one() -> None:
    assert merged(["STATUS OK", "X 1"], []) == ["STATUS OK", "X 1"]


def test_rewrite_replaces_only_the_differing_replies_and_keeps_comments_and_sent_lines() -> None:
    text = (
        "# first\n> TASK REQ:ping IN:SYS OUT:PONG\n>\n< STATUS OK\n# kept\n<\n"
        "> TASK REQ:ping IN:SYS OUT:PONG\n> ID b\n>\n< STATUS OK\n< ID b\n<\n"
        "> TASK REQ:never IN:SYS OUT:X\n>\n< STATUS OK\n<\n"
    )
    heard = [[_reply(("DATA", "pong"))], [_reply(("ID", "b"))]]  # the third step not played
    written, changed = rewrite_expected(text, parse_transcript(text), heard)
    assert changed == 1
    assert written == (
        "# first\n> TASK REQ:ping IN:SYS OUT:PONG\n>\n# kept\n< STATUS OK\n< DATA pong\n<\n"
        "> TASK REQ:ping IN:SYS OUT:PONG\n> ID b\n>\n< STATUS OK\n< ID b\n<\n"
        "> TASK REQ:never IN:SYS OUT:X\n>\n< STATUS OK\n<\n"
    )
    again, none = rewrite_expected(written, parse_transcript(written), heard)
    assert (again, none) == (written, 0)

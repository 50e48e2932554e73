"""Output capture under its byte cap, and the seed's 500-character summaries."""

from __future__ import annotations

import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from specialists.tool.exec import summarize
from specialists.tool.exec._capture import CappedOutput, drain

CAP = 64
TAIL = 16


def captured(data: bytes, *, chunk: int = 7) -> CappedOutput:
    output = CappedOutput(max_bytes=CAP, tail_bytes=TAIL)
    for start in range(0, len(data), chunk):
        output.feed(data[start : start + chunk])
    return output


def test_output_of_exactly_the_cap_is_kept_whole() -> None:
    data = bytes(range(CAP))
    output = captured(data)
    assert not output.truncated
    assert output.text() == data.decode("utf-8", "replace")


def test_one_byte_over_the_cap_drops_the_middle_and_counts_it() -> None:
    data = b"h" * (CAP - TAIL) + b"m" + b"t" * TAIL
    output = captured(data)
    assert output.truncated
    assert (output.total_bytes, output.omitted_bytes) == (CAP + 1, 1)
    assert output.text() == "h" * (CAP - TAIL) + "\n… [1 bytes omitted] …\n" + "t" * TAIL


@given(st.binary(max_size=400), st.integers(min_value=1, max_value=70))
def test_any_chunking_keeps_the_first_and_last_bytes_and_counts_all(
    data: bytes, chunk: int
) -> None:
    output = captured(data, chunk=chunk)
    assert output.total_bytes == len(data)
    assert output.truncated == (len(data) > CAP)
    if not output.truncated:
        assert output.text() == data.decode("utf-8", "replace")
    else:
        head = data[: CAP - TAIL].decode("utf-8", "replace")
        assert output.text().startswith(head)


def test_invalid_utf8_is_replaced_not_raised() -> None:
    assert captured(b"ok \xff\xfe end").text() == "ok \ufffd\ufffd end"


def test_tail_cut_inside_a_character_drops_the_stray_continuation_bytes() -> None:
    data = b"h" * (CAP - TAIL) + b"x" * 5 + "é".encode() * TAIL
    tail = captured(data).text().rsplit("\n", 1)[1]
    assert tail == "é" * (TAIL // 2)


async def test_drain_reads_a_stream_to_its_end_keeping_only_the_cap() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    output = CappedOutput(max_bytes=CAP, tail_bytes=TAIL)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(drain, receive, output)
        for _ in range(100):
            await send.send_all(b"y\n" * 50)
        await send.aclose()
    assert output.total_bytes == 100 * 100
    assert len(output.text().encode()) < CAP + 64  # head + tail + the marker line


def test_summary_of_500_characters_is_the_text_itself() -> None:
    text = "a" * 500
    assert summarize(text, max_chars=500) == text


def test_summary_of_501_characters_keeps_both_ends_within_500() -> None:
    text = "H" + "m" * 499 + "T"
    summary = summarize(text, max_chars=500)
    assert len(summary) == 500
    assert summary.startswith("H")
    assert summary.endswith("T")
    assert " … " in summary


@given(st.text(max_size=2000), st.integers(min_value=16, max_value=600))
def test_summary_never_exceeds_its_budget(text: str, budget: int) -> None:
    assert len(summarize(text, max_chars=budget)) <= budget


def test_summary_of_a_truncated_stream_ends_with_the_stream_s_real_end() -> None:
    output = captured(b"start " + b"x" * 1000 + b" the error")
    summary = output.summary(40)
    assert summary.startswith("start")
    assert summary.endswith("the error")
    assert len(summary) <= 40


def test_summary_strips_surrounding_whitespace() -> None:
    assert captured(b"\n  19 tests passed\n").summary(500) == "19 tests passed"

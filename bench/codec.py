"""Codec speed: parse + serialize a typical 6-line task and its reply, beside h11.

h11 parses an HTTP request of similar size (and serializes a similar response) in the same run,
so the ratio does not depend on how busy the machine is. Goal: ours no slower (ratio >= 1.0).

    python bench/codec.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import h11

from protocol import Connection, Reply, Status, serialize

TASK = (
    b"TASK REQ:fetch IN:WEB OUT:CONTENT\n"
    b"ID req-20261122-0001\n"
    b"URL https://example.com/articles/2026/11/trio-structured-concurrency\n"
    b"EXTRACT text\n"
    b"MAX_CHARS 8000\n"
    b"TIMEOUT_MS 10000\n"
    b"\n"
)
REPLY = Reply(
    Status.OK,
    (
        ("ID", "req-20261122-0001"),
        ("SCOPE", "[example.com]"),
        ("DATA", "Structured concurrency keeps every task inside a nursery."),
        ("TITLE", "Trio and structured concurrency"),
        ("WORD_COUNT", "1234"),
    ),
)
HTTP_REQUEST = (
    b"GET /articles/2026/11/trio-structured-concurrency HTTP/1.1\r\n"
    b"Host: example.com\r\n"
    b"User-Agent: csp-web/0.1.0\r\n"
    b"Accept: text/html\r\n"
    b"X-Request-Id: req-20261122-0001\r\n"
    b"\r\n"
)
HTTP_RESPONSE_HEADERS = [
    ("Content-Type", "text/plain"),
    ("X-Request-Id", "req-20261122-0001"),
    ("X-Title", "Trio and structured concurrency"),
    ("Content-Length", "57"),
]


def ours(rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        conn = Connection()
        conn.receive_data(TASK)
        conn.next_event()
        serialize(REPLY)
    return time.perf_counter() - start


def theirs(rounds: int) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        conn = h11.Connection(h11.SERVER)
        conn.receive_data(HTTP_REQUEST)
        conn.next_event()
        conn.send(h11.Response(status_code=200, headers=HTTP_RESPONSE_HEADERS))
    return time.perf_counter() - start


def main() -> None:
    rounds, repeats = 20_000, 5
    ours(1000), theirs(1000)  # warm-up
    best_ours = min(ours(rounds) for _ in range(repeats))
    best_h11 = min(theirs(rounds) for _ in range(repeats))
    print(f"csp/1 parse+serialize: {best_ours / rounds * 1e6:.2f} us per task+reply")
    print(f"h11   parse+serialize: {best_h11 / rounds * 1e6:.2f} us per request+response")
    print(f"ratio (h11 time / ours): {best_h11 / best_ours:.2f}  (goal >= 1.0)")
    print("reproduce: python bench/codec.py")


if __name__ == "__main__":
    main()

"""The reply corpus: every frame of tests/corpus/*.csp sent to ``python -m csp_web serve`` on
stdin, the replies written to one file (or stdout). A refactor that must not change the wire
records it before and ``cmp``s it after (docs/transcripts.md, "The reply corpus").

Each ``.csp`` file is one conversation with a fresh daemon (its own temp state dir, embedded
memory, tests/corpus/config.yaml). Its steps (``>`` lines up to the next ``<`` block, as in
tests/transcripts/) are sent one after the other; the replies of a step are collected until
as many arrived as the step expects, then sorted (frames with ID may be answered in any order,
SPEC C-2). Values that vary by run (stats figures, timings, times, temp paths) are masked.

    python scripts/reply_corpus.py > corpus.bin
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus"
REPLY_TIMEOUT_S = 30.0
MASKS = [
    # REQ:stats: every figure (uptime, counts, latencies) varies by run
    (re.compile(rb"^(DATA uptime_s:).*$", re.M), rb"\1<masked>"),
    (
        re.compile(
            rb"^(OUTBOX|OP(?= [^{])|REJECTED|RELOAD|MEMORY|MCP|EXEC_LIMITS|SANDBOX) .*$", re.M
        ),
        rb"\1 <masked>",
    ),
    (re.compile(rb"^(EXEC_TIME|DURATION_MS|ELAPSED_MS) .*$", re.M), rb"\1 <masked>"),
    (re.compile(rb"(next_run|NEXT_RUN|last_run|LAST_RUN)([ :=])[^ ,\n]*"), rb"\1\2<masked>"),
    (re.compile(rb"^(RUN_KEY [^@\n]*@).*$", re.M), rb"\1<masked>"),
    (re.compile(rb"ref [0-9a-f]{8}"), rb"ref <masked>"),
]


def steps(text: str) -> list[tuple[bytes, int]]:
    """(bytes sent, replies expected) per step of a .csp text."""
    out: list[tuple[bytes, int]] = []
    sent, expected, in_reply = bytearray(), 0, False
    for line in text.splitlines():
        if line.startswith(">") and expected:
            out.append((bytes(sent), expected))
            sent, expected = bytearray(), 0
        if line.startswith(">!"):
            sent += json.loads(line[2:].strip()).encode("latin-1")
        elif line == ">" or line.startswith("> "):
            sent += line[2:].encode("utf-8") + b"\n"
        elif line == "<":
            if in_reply:
                expected += 1
            in_reply = False
        elif line.startswith("< "):
            in_reply = True
    if sent or expected:
        out.append((bytes(sent), expected))
    return out


def read_replies(proc: subprocess.Popen[bytes], buffer: bytearray, count: int) -> list[bytes]:
    """``count`` reply frames (each up to its empty line) from the daemon's stdout."""
    assert proc.stdout is not None
    replies: list[bytes] = []
    deadline = time.monotonic() + REPLY_TIMEOUT_S
    while len(replies) < count:
        end = buffer.find(b"\n\n")
        if end >= 0:
            replies.append(bytes(buffer[: end + 2]))
            del buffer[: end + 2]
            continue
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([proc.stdout], [], [], left)[0]:
            replies.append(b"<no reply within the timeout>\n\n")
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            replies.append(b"<daemon closed stdout>\n\n")
            continue
        buffer += chunk
    return replies


def conversation(path: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="csp-corpus-") as state:
        config = Path(state) / "config.yaml"
        config.write_text(
            (CORPUS / "config.yaml").read_text().replace("@STATE@", state), encoding="utf-8"
        )
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "csp_web", "serve", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=state,
        )
        assert proc.stdin is not None
        out = bytearray(f"=== {path.name}\n".encode())
        buffer = bytearray()
        try:
            for sent, expected in steps(path.read_text("utf-8")):
                proc.stdin.write(sent)
                proc.stdin.flush()
                out += b"".join(sorted(read_replies(proc, buffer, expected)))
            proc.stdin.close()
            proc.wait(timeout=REPLY_TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        out += buffer + f"=== exit {proc.returncode}\n".encode()
        masked = bytes(out).replace(state.encode(), b"<state>")
    for pattern, replacement in MASKS:
        masked = pattern.sub(replacement, masked)
    return masked


def main() -> None:
    files = sorted([*CORPUS.glob("*.csp"), *(ROOT / "tests" / "transcripts").glob("*.csp")])
    sys.stdout.buffer.write(b"".join(conversation(path) for path in files))


if __name__ == "__main__":
    main()

"""A run of a million frames through one ``csp-web serve`` on stdin, as an orchestrator pipes
them: every frame answered once and in order, the daemon's memory and state directory flat
from the first hundred thousand to the last, no traceback logged, exit 0 at EOF.

The frames cycle through what a long run meets: pings, pings with an ID, an unknown op, a
malformed field and a memory write (through the outbox to the embedded Memory Specialist).
A write that finds the memory pool full is refused ``busy`` (SPEC C-3): pipelined faster
than the store commits, some are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import trio
import yaml

CSP_WEB = shutil.which("csp-web") or "csp-web"
FRAMES = 1_000_000
# The memory a run may gain between its first 100,000 frames and its last: caches and
# tables that fill once (the outbox's pages, SQLite's), not a leak of bytes per frame
# (a leak of 16 bytes a frame would add 14 MB).
RSS_GROWTH_BOUND_KB = 12 * 1024
STATE_BOUND_BYTES = 64 << 20  # 20,000 memory writes of a few hundred bytes, with their pages


def _cycle(n: int) -> tuple[bytes, bytes]:
    """The frame at position ``n`` of the run and the first line of its reply. A frame with
    an ID may be answered before earlier ones (SPEC C-2); the rest keep their order."""
    kind = n % 50
    if kind == 0:
        return f"TASK REQ:ping IN:SYS OUT:PONG\nID f{n}\n\n".encode(), b"STATUS OK"
    if kind == 1:
        return b"TASK REQ:nosuch IN:SYS OUT:PONG\n\n", b"STATUS FAIL"
    if kind == 2:
        return b"TASK REQ:ping IN:SYS OUT:PONG\nTIMEOUT_MS 1x\n\n", b"STATUS FAIL"
    if kind == 3:
        write = (
            f"TASK REQ:write IN:MEMORY OUT:ACK\nFROM run\nTYPE note\nPATH run/{n}.md\nDATA n{n}\n\n"
        )
        return write.encode(), b"STATUS OK"
    return b"TASK REQ:ping IN:SYS OUT:PONG\n\n", b"STATUS OK"


def _busy(reply: bytes) -> bool:
    return reply.startswith(b"STATUS FAIL\n") and b"\nERROR busy:memory:" in reply


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _tree_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


@pytest.mark.slow
async def test_a_million_frames_on_stdin_are_each_answered_in_order_in_flat_memory(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"daemon": {"state_dir": str(state), "log_level": "warning"}}))
    env = {k: v for k, v in os.environ.items() if k != "CSP_WEB_CONFIG"}
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [CSP_WEB, "serve", "--config", str(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    assert process.stdin is not None
    assert process.stdout is not None
    frames, firsts = zip(*(_cycle(n) for n in range(FRAMES)), strict=True)
    in_order = [first for n, first in enumerate(firsts) if n % 50 != 0]  # the frames with no ID
    ids: set[bytes] = set()
    answered, busy, wrong = 0, 0, []
    rss: list[int] = []
    try:
        with trio.fail_after(900):  # about 90 s here; a hang fails instead of holding CI
            async with trio.open_nursery() as nursery:

                async def feed() -> None:
                    assert process.stdin is not None
                    for start in range(0, FRAMES, 10_000):
                        await process.stdin.send_all(b"".join(frames[start : start + 10_000]))

                nursery.start_soon(feed)
                pending = b""
                while answered < FRAMES:
                    chunk = await process.stdout.receive_some(1 << 20)
                    assert chunk, f"stdout ended after {answered} replies"
                    *replies, pending = (pending + chunk).split(b"\n\n")
                    for reply in replies:
                        head, _, rest = reply.partition(b"\n")
                        if rest.startswith(b"ID "):
                            ids.add(rest[3:].partition(b"\n")[0])
                        elif head != in_order[answered - len(ids)] and not _busy(reply):
                            wrong.append((answered, reply[:200]))
                        else:
                            busy += head == b"STATUS FAIL" and _busy(reply)
                        answered += 1
                        if answered in (100_000, FRAMES):
                            rss.append(_rss_kb(process.pid))
            await process.stdin.aclose()
            assert await process.wait() == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert wrong[:5] == []
    assert answered == FRAMES
    assert busy < FRAMES // 50  # at most the memory writes, one frame in 50
    assert ids == {f"f{n}".encode() for n in range(0, FRAMES, 50)}
    assert rss[1] - rss[0] < RSS_GROWTH_BOUND_KB, rss
    assert _tree_bytes(state) < STATE_BOUND_BYTES
    assert "Traceback" not in log.read_text(errors="replace")

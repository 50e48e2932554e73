"""The worker process a document reader runs in (``documents.read_document`` starts it).

    python document_worker.py < header-line + document bytes > Document as JSON

Run as a script, not as ``-m``: importing ``specialists.web`` would load the whole specialist
(about 1 s); this imports only the one reader module it is told to. Before it reads the
document it lowers its own address space (RLIMIT_AS) and CPU time (RLIMIT_CPU, past which the
kernel sends SIGXCPU, then SIGKILL) to the bounds the header names, so a hostile file meets
those limits here and never in the daemon. Its answer is the Document as JSON on stdout (exit
0), or ``{"code", "detail"}`` (exit 3) for an ``Unreadable`` file or a MemoryError.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import resource
import sys
from pathlib import Path
from typing import Any

HEADER_MAX_BYTES = 65_536
REPORTED_EXIT = 3  # documents.REPORTED_EXIT


def bound(header: dict[str, Any]) -> None:
    """Lower this process's address space and CPU time to the header's bounds."""
    memory, cpu = int(header["memory_bytes"]), int(header["cpu_s"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def read(header: dict[str, Any], data: bytes) -> tuple[int, dict[str, Any]]:
    """The exit status and the JSON-able answer of the reader the header names over ``data``."""
    from specialists.formats import Limits, Unreadable

    module, function = str(header["reader"]).split(":")
    reader = getattr(importlib.import_module(f"specialists.formats.{module}"), function)
    try:
        document = reader(data, Limits(**header["limits"]))
    except Unreadable as exc:
        return REPORTED_EXIT, {"code": exc.code, "detail": exc.detail}
    except MemoryError:
        return REPORTED_EXIT, {"code": "too_large", "detail": "reader_memory"}
    return 0, dataclasses.asdict(document)


def main() -> int:
    sys.path[0] = str(Path(__file__).resolve().parents[3])  # the packages, not this folder
    header = json.loads(sys.stdin.buffer.readline(HEADER_MAX_BYTES))
    bound(header)
    status, answer = read(header, sys.stdin.buffer.read())
    # UTF-8, a lone surrogate a broken font map may yield replaced rather than a crash.
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8", "replace"))
    return status


if __name__ == "__main__":
    raise SystemExit(main())

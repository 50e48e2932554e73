"""A small tmpfs of its own for each test that fills a disk (CI runs as root; elsewhere the
tests that need one are skipped, saying why)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

import pytest

SIZE = "8m"  # room for the daemon's stores, small enough to fill in a moment


@dataclass
class Tmpfs:
    """A mounted tmpfs at ``path``; ``fill`` takes every free byte, ``free`` gives it back."""

    path: str

    @property
    def filler(self) -> str:
        return os.path.join(self.path, "filler")

    def fill(self) -> None:
        """Write the filler file until the disk is full (ENOSPC), to its last byte."""
        with open(self.filler, "ab", buffering=0) as file:
            for chunk in (b"\0" * 65536, b"\0"):
                with pytest.raises(OSError, match="No space left"):
                    _write_forever(file, chunk)

    def free(self) -> None:
        os.unlink(self.filler)


def _write_forever(file: BinaryIO, chunk: bytes) -> None:
    while True:
        file.write(chunk)


@pytest.fixture
def tmpfs() -> Iterator[Tmpfs]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root (CI runs as root)")
    path = tempfile.mkdtemp(prefix="csp-full-", dir="/tmp")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0700", "tmpfs", path],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        os.rmdir(path)
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield Tmpfs(path)
    finally:
        subprocess.run(["umount", "-l", path], check=False)
        shutil.rmtree(path, ignore_errors=True)

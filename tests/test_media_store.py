"""The media store the browser's screenshots and the nodes' captures share
(``csp_web.infra.media``), on a real folder: written whole, 0600 in a 0700 folder, and trimmed
after each write by age, then by size, each bound at N and N+1; what it did not write stays."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from csp_web.infra.media import MediaStore

# Whole seconds: an mtime set to the nanosecond compares exactly with the trim's ``now``.
NOW = int(time.time())


def _dated(path: str, age_s: int) -> None:
    then = (NOW - age_s) * 1_000_000_000
    os.utime(path, ns=(then, then))


def test_a_file_is_kept_at_max_age_s_and_removed_a_second_past_it(tmp_path: Path) -> None:
    store = MediaStore(str(tmp_path / "media"), max_bytes=1 << 20, max_age_s=100.0)
    at_n = store.save_sync("shot", b"a")
    past = store.save_sync("shot", b"b")
    _dated(at_n, 100)
    _dated(past, 101)
    store.trim_sync(now=NOW)
    assert os.path.exists(at_n)
    assert not os.path.exists(past)
    assert store.removed == 1


def test_the_oldest_go_only_once_the_total_passes_max_bytes(tmp_path: Path) -> None:
    store = MediaStore(str(tmp_path / "media"), max_bytes=300, max_age_s=3600.0)
    first, second, third = (store.save_sync("shot", bytes([k]) * 100) for k in range(3))
    for age, path in zip((30, 20, 10), (first, second, third), strict=True):
        _dated(path, age)
    store.trim_sync(now=NOW)  # 300 bytes: at N, all kept
    assert all(os.path.exists(p) for p in (first, second, third))
    fourth = store.save_sync("shot", b"d")  # 301 bytes: the oldest goes
    assert not os.path.exists(first)
    assert all(os.path.exists(p) for p in (second, third, fourth))


def test_the_file_just_written_stays_though_it_alone_passes_max_bytes(tmp_path: Path) -> None:
    store = MediaStore(str(tmp_path / "media"), max_bytes=10, max_age_s=3600.0)
    older = store.save_sync("clip", b"x" * 5)
    _dated(older, 10)
    big = store.save_sync("clip", b"y" * 11)
    assert not os.path.exists(older)
    assert os.path.exists(big)


def test_names_extensions_and_modes(tmp_path: Path) -> None:
    folder = str(tmp_path / "media")
    store = MediaStore(folder, max_bytes=1 << 20, max_age_s=3600.0, extensions=("jpg", "mp4"))
    path = store.save_sync("lab1-t-7", b"jpeg", extension="jpg")
    name = os.path.basename(path)
    assert name.startswith("lab1-t-7-")
    assert name.endswith(".jpg")
    assert len(name) == len("lab1-t-7-") + 24 + len(".jpg")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.stat(folder).st_mode & 0o777 == 0o700
    with pytest.raises(ValueError, match="png"):
        store.save_sync("lab1-t-8", b"png", extension="png")  # it would never trim it


def test_files_the_store_did_not_write_are_never_trimmed(tmp_path: Path) -> None:
    # nodes.media_dir may name a folder the user keeps other things in.
    folder = tmp_path / "media"
    folder.mkdir()
    theirs = [folder / "holiday.jpg", folder / "IMG-0001.jpg", folder / "notes.txt"]
    for path in theirs:
        path.write_bytes(b"z" * 1000)
        _dated(str(path), 10**6)
    (folder / "browser").mkdir()
    store = MediaStore(str(folder), max_bytes=1, max_age_s=1.0, extensions=("jpg",))
    ours = store.save_sync("lab1-t-1", b"jpeg", extension="jpg")
    assert all(path.exists() for path in theirs)
    assert (folder / "browser").is_dir()
    assert os.path.exists(ours)

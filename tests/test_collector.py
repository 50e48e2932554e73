"""The daemon's garbage collector while serving (issue 21 §5): fewer, cheaper collections
behind many busy connections (figures at ``lifecycle.COLLECTOR_THRESHOLDS``), and cyclic
garbage still freed on the collector's own schedule, so a daemon that runs for months does
not grow."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator

import pytest
import trio

from csp_web.config import Config
from csp_web.core.daemon.lifecycle import COLLECTOR_THRESHOLDS
from tests.conftest import Sink, start_daemon

CPYTHON_DEFAULT = (700, 10, 10)


@pytest.fixture
def collector() -> Iterator[None]:
    """CPython's default thresholds for the test, the process's own restored after it."""
    kept = gc.get_threshold()
    gc.set_threshold(*CPYTHON_DEFAULT)
    yield
    gc.set_threshold(*kept)


async def test_a_ready_daemon_collects_young_objects_every_50000_allocations(
    collector: None, nursery: trio.Nursery, config: Config, sink: Sink, sock_dir: str
) -> None:
    daemon = await start_daemon(nursery, config, os.path.join(sock_dir, "csp.sock"))
    assert gc.get_threshold() == COLLECTOR_THRESHOLDS == (50_000, 20, 10)
    await daemon.stop()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_a_cycle_made_while_serving_is_freed_without_an_explicit_collection(
    collector: None,
) -> None:
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    node = _Node()
    freed = weakref.ref(node)
    del node
    # Net container allocations past the young threshold: the collector runs on its own.
    alive: list[list[int]] = [[] for _ in range(COLLECTOR_THRESHOLDS[0] + 1)]
    assert freed() is None
    assert len(alive) == COLLECTOR_THRESHOLDS[0] + 1

"""The daemon's stats tables stay bounded whatever peers send (issue 21 §5: RSS over 1 M frames).

Every key of a table that lives as long as the daemon must come from a closed set: op names
from the op table, error codes from the catalogue. These drive a real dispatcher.
"""

from __future__ import annotations

from dataclasses import replace

from csp_web.app.memory_path import outbox_path
from csp_web.config import AuditConfig, Config
from csp_web.core.api.context import Peer
from csp_web.core.dispatch.stats import OTHER_CODE, Stats
from csp_web.memory.outbox import open_outbox
from protocol import ErrorCode, Status, Task
from tests.conftest import with_memory
from tests.harness import TEST_OPS, build_dispatcher


async def test_ten_thousand_unknown_op_names_leave_the_stats_tables_bounded(
    config: Config,
) -> None:
    """Unknown ``REQ`` names (and unknown domains) are counted by their code, never by name:
    after 10,000 of them, each with its own ID, the tables hold what one would leave."""
    config = replace(with_memory(config, None), audit=AuditConfig())
    async with open_outbox(config.outbox_path, config.outbox, config.memory) as outbox:
        dispatcher = build_dispatcher(config, outbox_path(config, outbox), TEST_OPS, None)
        for n in range(10_000):
            fields = (("ID", f"id{n}"),)
            task = Task(f"x{n}", "SYS" if n % 2 else f"D{n}", "X", None, fields)
            reply = await dispatcher.run(task, Peer(f"c{n % 100}"))
            assert reply.status is Status.FAIL
        dispatcher.flush_audits()
    stats = dispatcher.stats
    assert (stats.ops, set(stats.rejections)) == ({}, {"unknown_op"})


def test_error_codes_outside_the_catalogue_are_counted_under_one_name() -> None:
    """10,000 distinct codes a relayed reply might carry leave one row, with every count."""
    stats = Stats()
    for n in range(10_000):
        stats.reject(f"made_up_{n}")
        stats.record("ping", 1.0, f"also_made_up_{n}", "FAIL")
    stats.reject(ErrorCode.UNKNOWN_OP)
    assert dict(stats.rejections) == {OTHER_CODE: 20_000, "unknown_op": 1}
    assert dict(stats.ops["ping"].outcomes) == {("FAIL", OTHER_CODE): 10_000}  # the metrics' too

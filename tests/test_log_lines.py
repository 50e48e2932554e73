"""The daemon's text log lines: one per record, stamped with the second of the record."""

from __future__ import annotations

import logging

from csp_web.core.api.logs import _TextFormatter


def _record(created: float, **extra: object) -> logging.LogRecord:
    fields = {"name": "csp_web.x", "levelname": "INFO", "msg": "op done", "created": created}
    return logging.makeLogRecord({**fields, **extra})


def test_each_text_line_is_stamped_with_the_second_of_its_own_record() -> None:
    """The stamp is kept per second (issue 26): a record of a later second gets its own."""
    formatter = _TextFormatter()
    assert formatter.format(_record(0.5, op="ping", id=None)) == (
        "1970-01-01T00:00:00 info csp_web.x: op done op=ping id=None"
    )
    assert formatter.format(_record(0.9)) == "1970-01-01T00:00:00 info csp_web.x: op done"
    assert formatter.format(_record(61.25)) == "1970-01-01T00:01:01 info csp_web.x: op done"

"""Forwarding IN:MEMORY frames to the Memory Specialist (SPEC M-3).

An orchestrator needs one socket: the daemon relays its memory reads and writes and hands back
the Memory Specialist's reply under the client's own ID. The daemon itself never touches memory
storage.
"""

from __future__ import annotations

import posixpath
import secrets

import trio

from csp_web.client.trio_client import ClientClosed
from csp_web.config import MemoryConfig
from csp_web.core.api.errors import OpError
from csp_web.core.api.replies import with_id
from csp_web.memory.link import MemoryLink, socket_link
from protocol import ErrorCode, Reply, Status, Task

# What only the daemon writes: a client may not forge or pre-empt these (SPEC M-4). Each op
# writes one ``audit`` record (SPEC M-1; docs/memory.md); the others are artefacts and runs.
DAEMON_TYPES = frozenset({"audit", "exec_log", "research_job", "cron_run", "cron_due"})
DAEMON_FOLDERS = ("audit/", "exec-logs/", "research-jobs/", "cron-runs/", "cron-due/")
# What a specialist files under a folder of its own: the File Cabinet's entries, which the
# cabinet reads back as saved pages (a client's entry there would be served as one).
SPECIALIST_FOLDERS = ("cabinet/",)
# What daemons before one record per op wrote beside the audit: still refused, so a client
# cannot pass a forged record for one of the daemon's among the old ones in the store.
RETIRED_TYPES = frozenset({"web_op", "browser_op", "canvas_op"})
RETIRED_FOLDERS = ("web-ops/", "browser-ops/", "canvas-ops/")
_REFUSED_TYPES = DAEMON_TYPES | RETIRED_TYPES
_REFUSED_FOLDERS = DAEMON_FOLDERS + SPECIALIST_FOLDERS + RETIRED_FOLDERS
DAEMON_ID_PREFIX = "w-"


def client_write(task: Task) -> Task:
    """``task`` as a client's write: FROM is ``client`` whatever was sent; the daemon's record
    types, folders and ID space are refused, so audit trails cannot be forged or suppressed."""
    # Every value is judged, not the first: a Memory Specialist that kept the last of a
    # repeated field would otherwise store a forged record behind an innocent first one.
    if any(value.startswith(DAEMON_ID_PREFIX) for value in task.get_all("ID")):
        raise OpError(ErrorCode.INVALID_FIELD, "ID prefix w- is the daemon's")
    for type_ in task.get_all("TYPE"):
        if type_ in _REFUSED_TYPES:
            raise OpError(ErrorCode.INVALID_FIELD, f"TYPE {type_} is the daemon's")
    if any(_filed(path).startswith(_REFUSED_FOLDERS) for path in task.get_all("PATH")):
        raise OpError(ErrorCode.INVALID_FIELD, "PATH is under a folder the daemon writes")
    fields = (*(f for f in task.fields if f[0] != "FROM"), ("FROM", "client"))
    return Task(task.req, task.domain, task.out, task.inline, fields)


_DAEMONS_FIELDS = ("TRACEPARENT", "BUDGET", "BUDGET_ID")


def untraced(task: Task) -> Task:
    """``task`` without TRACEPARENT, BUDGET and BUDGET_ID: the trace context goes on only to
    configured APIs and the budget is the daemon's to keep (SPEC D-3), and a Memory
    Specialist older than the fields would refuse them as unknown."""
    if all(task.get(name) is None for name in _DAEMONS_FIELDS):
        return task
    fields = tuple(f for f in task.fields if f[0] not in _DAEMONS_FIELDS)
    return Task(task.req, task.domain, task.out, task.inline, fields)


def _filed(path: str) -> str:
    """``path`` as a store that resolves ``.``, ``..`` and repeated slashes would file it, so
    ``./audit/x`` or ``notes/../audit/x`` is judged as ``audit/x``."""
    filed = posixpath.normpath("/" + path).lstrip("/")
    return filed + "/" if path.endswith("/") else filed


class MemoryRelay:
    """Forwards tasks over a fresh connection each (memory calls are rare next to web ops)."""

    def __init__(self, config: MemoryConfig, link: MemoryLink | None = None) -> None:
        self._config = config
        self._link = link or socket_link(config)

    async def forward(self, task: Task) -> Reply:
        """The Memory Specialist's reply to ``task``; raises OpError(memory_unavailable), or
        invalid_field for a write that would pass for one of the daemon's own records."""
        task = untraced(client_write(task) if task.req == "write" else task)
        if self._link is None:
            raise OpError(ErrorCode.MEMORY_UNAVAILABLE, "no Memory Specialist configured")
        # The client's ID is the Memory Specialist's idempotency key: forward it unchanged.
        # A frame without one gets a prefix no other relay connection uses.
        prefix = f"r-{secrets.token_hex(8)}-"
        try:
            async with self._link.open_client(id_prefix=prefix) as client:
                reply = await client.call(task, timeout_s=self._config.relay_timeout_s)
        except (OSError, ClientClosed, trio.TooSlowError) as exc:
            raise OpError(
                ErrorCode.MEMORY_UNAVAILABLE, f"{type(exc).__name__} at {self._link.name}"
            ) from exc
        if _refused_as_unknown(reply):
            # As relayed, it would read as the daemon's own refusal: say whose it is (an
            # external Memory Specialist older than REQ:list answers so, SPEC M-9).
            detail = f"{task.req} is not offered by the Memory Specialist at {self._link.name}"
            raise OpError(ErrorCode.UNKNOWN_OP, detail, scope=("memory",))
        return with_id(reply, task.id)


def _refused_as_unknown(reply: Reply) -> bool:
    """Whether the Memory Specialist answered ``FAIL unknown_op``."""
    error = reply.get("ERROR") or ""
    return reply.status is Status.FAIL and error.partition(":")[0] == ErrorCode.UNKNOWN_OP

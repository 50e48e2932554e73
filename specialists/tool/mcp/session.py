"""One MCP server's connection, from its first use until the pool closes.

    idle ──first call──▶ starting ──handshake──▶ running ──stream end / failed probe──┐
                            │                                                        ▼
                            └───failure or start deadline───▶ backoff ◀──────── stopping
                                                                │ delay        │
                                                                └──▶ starting  │ max_failures
                                                                               ▼ in a row
                                                                             failed

A run that ends before ``backoff_reset_after_s`` (a failed start included) is a failure;
after ``max_failures`` of them in a row the session stops retrying (state ``failed``, as
systemd's StartLimitBurst) and every request fails at once with the last cause in REASON,
until the daemon restarts or reloads its MCP servers.

A reload that removes or changes the server ``retire``s its session: the requests already
made finish within their own deadlines, then the session closes as at the pool's close.

``ServerSession.serve`` is the only task that enters and exits the SDK's context managers
(anyio requires both in one task). Callers in other tasks borrow its live client: the SDK
multiplexes concurrent requests by JSON-RPC id. Each caller's deadline bounds both its wait
for a session and its request. A request that runs out of time, or loses its connection,
asks the serve task to probe the server; a server that cannot answer one tools/list within
``probe_timeout_s`` is restarted, so a wedged server never wedges the calls after it.

Each line the server writes to stderr is one log record, at most ``STDERR_LINES_PER_S`` a
second past a burst of ``STDERR_BURST`` (``LineBudget``); the lines left out are counted
and the count is logged with the next line that is.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import trio
from mcp import Client, MCPError
from mcp.types import Implementation

from specialists.tool.mcp.config import McpConfig, ServerConfig

from .backoff import Backoff
from .errors import (
    BACKING_OFF,
    CALL_TIMEOUT,
    CONNECTION_LOST,
    START_FAILED,
    START_TIMEOUT,
    cap,
    describe,
    is_connection_error,
    shutting_down,
    unavailable,
)
from .transport import open_transport

T = TypeVar("T")
State = Literal["idle", "starting", "running", "stopping", "backoff", "failed", "closed"]

logger = logging.getLogger(__name__)

_CLIENT_INFO = Implementation(name="csp-web", version="0.1.0")
# A server's stderr reaches the daemon's log at most this fast, past a first burst: a server
# printing without end (a review's 100,000 lines made 11 MB of daemon log) must not fill the
# daemon's disk. The lines left out are counted and told with the next line logged.
STDERR_LINES_PER_S = 20.0
STDERR_BURST = 200


class LineBudget:
    """A token bucket of log lines: ``take`` says whether one more line may be logged now."""

    def __init__(
        self,
        per_s: float = STDERR_LINES_PER_S,
        burst: int = STDERR_BURST,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_s, self._burst, self._clock = per_s, burst, clock
        self._tokens, self._at = float(burst), clock()
        self.skipped = 0  # lines refused since the last one taken

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._at) * self._per_s)
        self._at = now
        if self._tokens < 1:
            self.skipped += 1
            return False
        self._tokens -= 1
        return True


@dataclass(frozen=True, slots=True)
class ServerStats:
    """A snapshot of one server: its state, requests started, restarts, requests running,
    failed runs in a row (see the module's diagram) and the last failure's cause."""

    state: State
    calls: int
    restarts: int
    in_flight: int
    last_error: str
    failures: int = 0


@dataclass(eq=False)
class _Attempt:
    """One start of the server. Callers wait until it settles, then borrow ``client`` or fail.

    It settles when the start succeeds or fails, and again after each probe of a live
    connection; it ends, for good, when its connection does.
    """

    done: trio.Event = field(default_factory=trio.Event)
    client: Client | None = None
    reason: str = ""  # why the attempt is unusable: a REASON of errors.unavailable
    ended: bool = False
    probe: trio.Event | None = None  # a probe is pending; set when its verdict is in
    wakeup: trio.Event = field(default_factory=trio.Event)  # the serve task has news

    async def wait_settled(self) -> None:
        await self.done.wait()
        while self.probe is not None:
            await self.probe.wait()

    def fail(self, reason: str) -> None:
        if not self.done.is_set():
            self.reason = reason
            self.done.set()

    def end(self, reason: str) -> None:
        self.fail(reason)
        self.reason = self.reason or reason
        self.ended = True
        self.settle_probe()
        self.wakeup.set()

    def want_probe(self) -> None:
        if not self.ended and self.probe is None:
            self.probe = trio.Event()
            self.wakeup.set()

    def settle_probe(self) -> None:
        if self.probe is not None:
            probe, self.probe = self.probe, None
            probe.set()


class ServerSession:
    """The connection to one configured server; ``serve`` runs it, callers use ``request``."""

    def __init__(self, name: str, server: ServerConfig, config: McpConfig) -> None:
        self.name = name
        self._server = server
        self._config = config
        self._backoff = Backoff(
            initial_s=config.backoff_initial_s,
            max_s=config.backoff_max_s,
            reset_after_s=config.backoff_reset_after_s,
        )
        self._wanted = trio.Event()
        self._attempt = _Attempt()
        self._state: State = "idle"
        self._closed = False
        self._retry_at = -math.inf
        self._calls = 0
        self._restarts = 0
        self._in_flight = 0
        self._last_error = ""
        self._failures = 0
        self._stderr_tail = ""  # the server's last stderr line: often why it failed
        self._stderr_budget = LineBudget()
        self._stopped = trio.Event()  # set by close: wakes a backoff or a given-up session
        self._active = 0  # requests made and not yet answered, waits for a start included
        self._drained: trio.Event | None = None  # set when _active falls to 0 (retire)

    def stats(self) -> ServerStats:
        """This server's counters and state, as of now."""
        return ServerStats(
            self._state,
            self._calls,
            self._restarts,
            self._in_flight,
            self._last_error,
            self._failures,
        )

    def close(self) -> None:
        """Refuse new requests, wake waiting ones, and let ``serve`` stop the server."""
        self._closed = True
        self._state = "closed"
        self._attempt.end(CONNECTION_LOST)
        self._wanted.set()
        self._stopped.set()

    async def retire(self) -> None:
        """Leave the pool (a reload removed or changed the server): let the requests already
        made finish, each within its own deadline, then close; ``serve`` then stops the
        server and returns."""
        while self._active:
            self._drained = trio.Event()
            await self._drained.wait()
        logger.info("MCP server %s: retired by a reload", self.name)
        self.close()

    def set_budgets(self, config: McpConfig) -> None:
        """Reloaded budgets (timeouts, caps, backoff) for a server whose own entry is unchanged."""
        if (config.backoff_initial_s, config.backoff_max_s, config.backoff_reset_after_s) != (
            self._config.backoff_initial_s,
            self._config.backoff_max_s,
            self._config.backoff_reset_after_s,
        ):
            self._backoff = Backoff(
                initial_s=config.backoff_initial_s,
                max_s=config.backoff_max_s,
                reset_after_s=config.backoff_reset_after_s,
            )
        self._config = config

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until cancelled: start the server when first wanted, restart it after each end.

        Owns every process and connection it opens; cancellation closes them (the SDK
        reaps a stdio server within its bounded shutdown). Never raises but Cancelled.
        """
        task_status.started()
        try:
            await self._wanted.wait()
            while not self._closed:
                began = trio.current_time()
                attempt = self._attempt
                await self._run_attempt(attempt)
                ran_s = trio.current_time() - began
                if self._count_failure(ran_s) >= self._config.max_failures:
                    await self._give_up(self._with_cause(attempt.reason.partition(":")[0]))
                await self._back_off(ran_s)
        finally:
            self.close()

    async def request(self, send: Callable[[Client], Awaitable[T]], *, deadline: float) -> T:
        """Run ``send`` on a live client by ``deadline`` (trio clock); starts the server if idle.

        Raises OpError(MCP_UNAVAILABLE) when no session is ready in time, the request runs
        out of time or its connection drops; OpError(SHUTTING_DOWN) once the pool closed.
        The server's answer errors (MCPError, ValidationError...) propagate untranslated.
        """
        self._active += 1
        try:
            attempt = await self._wait_ready(deadline)
            assert attempt.client is not None
            self._in_flight += 1
            try:
                return await self._send(attempt, attempt.client, send, deadline)
            finally:
                self._in_flight -= 1
        finally:
            self._active -= 1
            if not self._active and self._drained is not None:
                self._drained.set()

    async def _wait_ready(self, deadline: float) -> _Attempt:
        self._calls += 1
        self._wanted.set()
        while not self._closed:
            attempt = self._attempt
            if self._state == "backoff" and self._retry_at >= deadline:
                # Fail now, not at the deadline, and say what the last start died of.
                raise unavailable(self.name, self._with_cause(BACKING_OFF))
            with trio.move_on_at(deadline):
                await attempt.wait_settled()
            if self._closed:
                break
            if not attempt.done.is_set():
                raise unavailable(self.name, START_TIMEOUT)
            if attempt.probe is not None:
                raise unavailable(self.name, CALL_TIMEOUT)  # still being checked
            if attempt.client is None:
                raise unavailable(self.name, attempt.reason)
            if not attempt.ended:
                return attempt
            # The connection ended while we waited: the next start is ours to wait for.
        raise shutting_down(self.name)

    async def _send(
        self,
        attempt: _Attempt,
        client: Client,
        send: Callable[[Client], Awaitable[T]],
        deadline: float,
    ) -> T:
        try:
            with trio.move_on_at(deadline):
                return await send(client)
        except Exception as exc:
            if not is_connection_error(exc):
                raise
            attempt.want_probe()
            raise unavailable(self.name, CONNECTION_LOST) from exc
        # Out of time: the tool may just be slow, or the whole server wedged; a probe tells.
        attempt.want_probe()
        raise unavailable(self.name, CALL_TIMEOUT)

    async def _run_attempt(self, attempt: _Attempt) -> None:
        """Start the server and hold its connection until it ends; any failure is logged,
        and a failed start's cause becomes its REASON (``start_failed:<cause>``)."""
        self._set_state("starting")
        self._stderr_tail = ""
        try:
            await self._connect(attempt)
        except* Exception as group:
            self._last_error = describe(group)
            if self._stderr_tail:
                self._last_error += f" (stderr: {self._stderr_tail})"
            logger.warning("MCP server %s stopped: %s", self.name, self._last_error)
        self._retire(attempt, CONNECTION_LOST if attempt.client else self._with_cause(START_FAILED))

    def _with_cause(self, reason: str) -> str:
        """``reason:<last error>``, capped as error text is, or ``reason`` when none is known."""
        if not self._last_error:
            return reason
        return f"{reason}:{cap(self._last_error, self._config.max_error_chars)}"

    def _on_stderr(self, line: str) -> None:
        # One log record per line, so the server's words never break --log-json; at most
        # STDERR_LINES_PER_S of them past a burst (LineBudget).
        if line.strip():
            self._stderr_tail = cap(line.strip(), self._config.max_error_chars)
        budget = self._stderr_budget
        if not budget.take():
            return
        if budget.skipped:
            logger.warning(
                "MCP server %s stderr: %d lines not logged (over %g a second)",
                self.name,
                budget.skipped,
                STDERR_LINES_PER_S,
                extra={"server": self.name},
            )
            budget.skipped = 0
        logger.info("MCP server %s stderr: %s", self.name, line, extra={"server": self.name})

    async def _connect(self, attempt: _Attempt) -> None:
        def on_end() -> None:
            # Before the start completes, the SDK's own error tells the failure; after our own
            # retirement the end is expected. Otherwise the server went away while in use.
            if attempt.client is not None and not attempt.ended:
                self._last_error = "the server closed the connection"
                logger.warning("MCP server %s: %s", self.name, self._last_error)
                self._retire(attempt, CONNECTION_LOST)

        transport = open_transport(self._server, on_end=on_end, on_stderr=self._on_stderr)
        deadline = trio.current_time() + self._config.start_timeout_s
        with trio.CancelScope(deadline=deadline) as start:
            async with Client(transport, client_info=_CLIENT_INFO, cache=None) as client:
                await self._warm(client)
                start.deadline = math.inf  # started: only the start had that deadline
                self._publish(attempt, client)
                await self._hold(attempt, client)
        if start.cancelled_caught:
            self._last_error = f"not ready within {self._config.start_timeout_s} s"
            if self._stderr_tail:
                self._last_error += f" (stderr: {self._stderr_tail})"
            self._retire(attempt, self._with_cause(START_TIMEOUT))

    async def _warm(self, client: Client) -> None:
        # The SDK lists tools before a tool's first call to learn its output schema; doing it
        # here keeps that round trip out of the first caller's time.
        capabilities = client.server_capabilities
        if capabilities.tools is not None:
            await client.list_tools()

    def _publish(self, attempt: _Attempt, client: Client) -> None:
        attempt.client = client
        attempt.done.set()
        self._set_state("running")
        logger.info("MCP server %s is running", self.name)

    async def _hold(self, attempt: _Attempt, client: Client) -> None:
        """Keep the connection until its stream ends or the server fails a probe."""
        while not attempt.ended:
            await attempt.wakeup.wait()
            attempt.wakeup = trio.Event()
            if attempt.probe is not None and not attempt.ended:
                if not await self._answers_probe(client):
                    timeout_s = self._config.probe_timeout_s
                    self._last_error = f"no answer to a probe within {timeout_s} s"
                    logger.warning("MCP server %s: %s; restarting", self.name, self._last_error)
                    self._retire(attempt, CONNECTION_LOST)
                attempt.settle_probe()
        self._set_state("stopping")

    async def _answers_probe(self, client: Client) -> bool:
        with trio.move_on_after(self._config.probe_timeout_s):
            try:
                await client.list_tools(cache_mode="refresh")
            except MCPError as exc:
                return not is_connection_error(exc)  # any answer proves the server alive
            return True
        return False

    def _retire(self, attempt: _Attempt, reason: str) -> None:
        """Mark ``attempt`` dead and give callers a fresh one to wait on from now on."""
        attempt.end(reason)
        if self._attempt is attempt and not self._closed:
            self._attempt = _Attempt()
            self._set_state("stopping")

    def _set_state(self, state: State) -> None:
        if not self._closed:
            self._state = state

    def _count_failure(self, ran_s: float) -> int:
        """Failed runs in a row, this one included; a healthy run resets the count."""
        if self._closed:
            return 0
        self._failures = 0 if ran_s >= self._config.backoff_reset_after_s else self._failures + 1
        return self._failures

    async def _give_up(self, reason: str) -> None:
        """Stop retrying: fail every waiting and later request with ``reason``, until closed."""
        self._set_state("failed")
        self._attempt.fail(reason)
        logger.error(
            "MCP server %s: giving up after %d failed runs in a row: %s",
            self.name,
            self._failures,
            self._last_error,
            extra={"server": self.name},
        )
        await self._stopped.wait()  # until the pool closes or a reload retires the session

    async def _back_off(self, ran_s: float) -> None:
        if self._closed:
            return
        delay = self._backoff.next_delay(ran_s)
        self._restarts += 1
        self._set_state("backoff")
        self._retry_at = trio.current_time() + delay
        with trio.move_on_after(delay):
            await self._stopped.wait()

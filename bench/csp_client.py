"""The benches' CSP/1 client: one connection, one task at a time, and the figures they share."""

from __future__ import annotations

import statistics

import trio

from protocol import CLOSED, NEED_DATA, Connection, Reply, Status, Task

PING = Task("ping", "SYS", "PONG", None, ())


class Client:
    """One CSP/1 connection to the daemon: send a task, wait for its reply."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.codec = Connection()

    async def call(self, task: Task) -> Reply:
        await self.stream.send_all(self.codec.send(task))
        while True:
            event = self.codec.next_event()
            if isinstance(event, Reply):
                return event
            if event is CLOSED:
                raise SystemExit("daemon closed the connection")
            assert event is NEED_DATA
            self.codec.receive_data(await self.stream.receive_some(1 << 20))


async def connect(socket_path: str) -> Client:
    """A client on the daemon's Unix socket; the caller closes ``client.stream``."""
    return Client(await trio.open_unix_socket(socket_path))


def fetch_task(url: str, *fields: tuple[str, str]) -> Task:
    return Task("fetch", "WEB", "CONTENT", url, fields)


def check(reply: Reply, what: str) -> None:
    """Exit the bench on a FAIL reply: a figure over failed ops would measure nothing."""
    if reply.status is Status.FAIL:
        raise SystemExit(f"{what}: {reply.get('ERROR')}")


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and nearest-rank p99 of ``samples``."""
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

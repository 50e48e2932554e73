"""Resolvers with fixed, changing or absent answers: the DNS the guard's tests control."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

import trio


class FixedResolver:
    """Answers each known name with the same addresses; unknown names do not resolve."""

    def __init__(self, answers: Mapping[str, Sequence[str]]) -> None:
        self.answers = dict(answers)
        self.calls: list[str] = []

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        await trio.lowlevel.checkpoint()
        self.calls.append(host)
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.answers[host]


class RebindingResolver:
    """Gives each successive lookup of a name the next answer in line, the last one repeating:
    the classic rebinding attacker, public for the check and private for the connect."""

    def __init__(self, answers: Sequence[Sequence[str]]) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]


class HangingResolver:
    """Never answers, like a resolver behind a dropped UDP packet."""

    async def resolve(self, host: str, port: int) -> Sequence[str]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

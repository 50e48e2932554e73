"""``csp-web send``: stream frames to a daemon and print each reply as it arrives.

Frames come from ``-e`` arguments or stdin. Each frame is sent as soon as its closing blank
line is read, and each reply is printed when it arrives (like redis-cli), so the command can be
used interactively. Frames without ``ID`` get one that is unique across runs (a random
per-run prefix). ``--wait`` sends a frame only after the previous frame's reply arrived: the
way to order frames that depend on each other (SPEC C-3 runs one connection's frames
concurrently).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import trio

from csp_web.client.trio_client import Client, ClientClosed, PendingCall, open_client
from protocol import CLOSED, NEED_DATA, Connection, Limits, ProtocolError, Reply, Status, Task
from protocol import serialize as serialize_frame

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
_LIMITS = Limits(max_line_bytes=64 << 20, max_frame_bytes=64 << 20, max_fields=100_000)


class SendUsageError(Exception):
    """What was given to send is not a frame; the message says why."""


@dataclass(frozen=True)
class SendOptions:
    path: str
    frames: tuple[str, ...] | None  # -e arguments, else stdin
    as_json: bool = False
    wait: bool = False
    timeout_s: float = 600.0


def expand_frame_argument(text: str) -> str:
    r"""A ``-e`` frame as wire text: ``\n`` between lines becomes a newline, but a JSON-quoted
    value (``DATA "a\nb"``) is kept as written, its escapes being the value's own."""
    out: list[str] = []
    index = 0
    decoder = json.JSONDecoder()
    while index < len(text):
        if text[index] == '"' and (index == 0 or text[index - 1] == " "):
            try:
                _, end = decoder.raw_decode(text, index)
            except ValueError:
                end = index + 1
            out.append(text[index:end])
            index = end
        elif text.startswith("\\n", index):
            out.append("\n")
            index += 2
        else:
            out.append(text[index])
            index += 1
    return "".join(out).rstrip("\n") + "\n\n"


def reply_as_json(reply: Reply) -> str:
    """One JSON object per reply: STATUS, then each field; a repeated field is a list."""
    record: dict[str, object] = {"STATUS": reply.status.value}
    for key, value in reply.fields:
        if key not in record:
            record[key] = value
            continue
        previous = record[key]
        record[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
    return json.dumps(record, ensure_ascii=False)


class _Printer:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.failed = False

    def show(self, reply: Reply) -> None:
        self.failed |= reply.status is Status.FAIL
        if self.as_json:
            sys.stdout.write(reply_as_json(reply) + "\n")
            sys.stdout.flush()
        else:
            sys.stdout.buffer.write(serialize_frame(reply))
            sys.stdout.buffer.flush()


async def _read_stdin() -> bytes:
    return await trio.to_thread.run_sync(os.read, 0, 65536, abandon_on_cancel=True)


class _Session:
    """Parses the input as it arrives, sends each whole frame, prints each reply."""

    def __init__(self, client: Client, options: SendOptions, nursery: trio.Nursery) -> None:
        self.client = client
        self.options = options
        self.nursery = nursery
        self.codec = Connection(_LIMITS)
        self.printer = _Printer(options.as_json)
        self.closed = False
        self.unanswered = False  # a reply did not come within --timeout

    async def feed(self, data: bytes) -> None:
        """Hand input to the parser (b"" is the end) and send every frame now complete."""
        self.codec.receive_data(data)
        while (event := self.codec.next_event()) not in (NEED_DATA, CLOSED):
            if not isinstance(event, Task):
                raise SendUsageError("send takes TASK frames, not replies")
            await self._send(event)

    async def _send(self, task: Task) -> None:
        try:
            call = await self.client.start_call(task)
        except ValueError as exc:
            raise SendUsageError(str(exc)) from None
        if self.options.wait:
            await self._print(call)
        else:
            self.nursery.start_soon(self._print, call)

    async def _print(self, call: PendingCall) -> None:
        try:
            reply = await call.reply(timeout_s=self.options.timeout_s)
        except trio.TooSlowError:
            print(
                f"csp-web: no reply to {call.id} within {self.options.timeout_s:g} s",
                file=sys.stderr,
            )
            self.unanswered = True
            return
        except ClientClosed:
            self.closed = True
            self.nursery.cancel_scope.cancel()
            return
        self.printer.show(reply)


async def run_send(options: SendOptions) -> int:
    """Stream the frames and print the replies; the command's exit code."""
    bad_input = False
    async with open_client(options.path, limits=_LIMITS) as client, trio.open_nursery() as nursery:
        session = _Session(client, options, nursery)
        try:
            await _feed_input(session, options)
        except (ProtocolError, SendUsageError) as exc:
            # Nothing more is sent; frames already sent still get their replies printed.
            print(f"csp-web: send: not a valid frame: {exc}", file=sys.stderr)
            bad_input = True
        except ClientClosed:  # the daemon hung up while a frame was being sent
            session.closed = True
            nursery.cancel_scope.cancel()
    if session.closed:
        print(f"csp-web: {options.path} closed the connection before replying", file=sys.stderr)
        return EXIT_UNREACHABLE
    if bad_input:
        return EXIT_USAGE
    if session.unanswered:
        return EXIT_UNREACHABLE
    return EXIT_FAIL if session.printer.failed else EXIT_OK


async def _feed_input(session: _Session, options: SendOptions) -> None:
    if options.frames is not None:
        for frame in options.frames:
            await session.feed(expand_frame_argument(frame).encode("utf-8"))
    else:
        while data := await _read_stdin():
            await session.feed(data)
    await session.feed(b"")


def send_main(options: SendOptions) -> int:
    try:
        return trio.run(run_send, options)
    except BaseException as exc:
        causes = leaves(exc)
        if not all(isinstance(c, OSError | ClientClosed | trio.TooSlowError) for c in causes):
            raise
        detail = causes[0]
        print(
            f"csp-web: cannot reach {options.path}: {detail or type(detail).__name__}",
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``exc`` itself."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]

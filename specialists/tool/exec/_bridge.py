"""The network bridge, run inside the sandbox as ``python3 -I -S _bridge.py PORT SOCKET -- CMD...``.

It listens on 127.0.0.1:PORT in the command's own network namespace, leaves a forwarder
(twice forked, so it is no child of the command and outlives no one: the namespace's init kills
it when the command ends) that copies each connection to the Unix socket SOCKET, the lane of
the guard proxy, and then becomes the command (``execv``): its exit status, rusage and limits
are the command's own. It uses the standard library only and runs under ``-I -S``: nothing of
the environment or the workspace steers this interpreter.

The command may kill or replace it (it runs as the same uid); that costs the command its own
network and nothing else, since the lane behind the socket enforces the allow list.
"""

import _socket  # the C modules: the socket and selectors modules would double the start-up
import os
import select
import sys

_CHUNK = 65536


def main(argv: list[str]) -> None:
    port, path, command = int(argv[1]), argv[2], argv[4:]
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    _hello(path)
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            _detach(listener.fileno())
            _forward(listener, path)
        os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    os.execv(command[0], command)


def _hello(path: str) -> None:
    """Connect to the lane once and hang up, before the command exists: the lane pins the
    network namespace of its first peer (this one), so nothing outside it can use the lane."""
    lane = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    lane.connect_ex(path)  # a failure: the command's connections fail the same way
    lane.close()


def _detach(keep: int) -> None:
    """Let go of the command's pipes (stdout, stderr, GNU time's report): the engine reads
    them to their end, which must come when the command ends, not when the forwarder does."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)


def _forward(listener: _socket.socket, path: str) -> None:
    """Copy each accepted connection to and from a new connection to ``path``, forever.

    In one batch of events, the listener is served last: a connection accepted earlier in the
    batch could be given the descriptor number of a pair closed earlier in it, whose later
    events are stale; so an event whose descriptor is no longer in ``ends`` is skipped."""
    poll = select.epoll()
    listening = listener.fileno()
    poll.register(listening, select.EPOLLIN)
    ends: dict[int, _socket.socket] = {}  # by descriptor: each end of every pair
    peers: dict[int, _socket.socket] = {}  # by descriptor: the other end
    while True:
        events = poll.poll()
        for fd, _events in events:
            if fd in ends:
                _pump(fd, ends, peers, poll)
        if any(fd == listening for fd, _events in events):
            _accept(listener, path, poll, ends, peers)


def _accept(
    listener: _socket.socket,
    path: str,
    poll: select.epoll,
    ends: dict[int, _socket.socket],
    peers: dict[int, _socket.socket],
) -> None:
    # The socket module's own accept: _socket.socket._accept() gives the new descriptor.
    client = _socket.socket(fileno=listener._accept()[0])  # type: ignore[attr-defined]
    lane = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        lane.connect(path)
    except OSError:
        client.close()
        lane.close()
        return
    for one, other in ((client, lane), (lane, client)):
        one.setblocking(False)
        ends[one.fileno()], peers[one.fileno()] = one, other
        poll.register(one.fileno(), select.EPOLLIN)


def _pump(
    fd: int, ends: dict[int, _socket.socket], peers: dict[int, _socket.socket], poll: select.epoll
) -> None:
    """One read from ``fd`` written whole to its peer; at EOF or an error both close.

    Both ends are non-blocking, so a stale event can never block the forwarder in a read.
    The write waits for its peer (``_send_all``): the other end is the guard proxy (which
    always reads) or an HTTP client, which sends its request before it reads the answer. A
    client that stops reading stalls only its own command's network."""
    other = peers[fd]
    try:
        data = ends[fd].recv(_CHUNK)
        if data:
            _send_all(other, data)
            return
    except BlockingIOError:
        return  # nothing to read after all
    except OSError:
        pass
    for end in (ends[fd], other):
        number = end.fileno()
        poll.unregister(number)
        del ends[number], peers[number]
        end.close()


def _send_all(sock: _socket.socket, data: bytes) -> None:
    """``data`` written whole to the non-blocking ``sock``, waiting while its buffer is full."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            wait = select.poll()
            wait.register(sock.fileno(), select.POLLOUT)
            wait.poll()


if __name__ == "__main__":
    main(sys.argv)

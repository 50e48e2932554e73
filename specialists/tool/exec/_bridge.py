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

import os
import selectors
import socket
import sys

_CHUNK = 65536


def main(argv: list[str]) -> None:
    port, path, command = int(argv[1]), argv[2], argv[4:]
    listener = socket.create_server(("127.0.0.1", port), backlog=64)
    child = os.fork()
    if child == 0:
        if os.fork() == 0:
            _detach(listener.fileno())
            _forward(listener, path)
        os._exit(0)
    os.waitpid(child, 0)
    listener.close()
    os.execv(command[0], command)


def _detach(keep: int) -> None:
    """Let go of the command's pipes (stdout, stderr, GNU time's report): the engine reads
    them to their end, which must come when the command ends, not when the forwarder does."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)


def _forward(listener: socket.socket, path: str) -> None:
    """Copy each accepted connection to and from a new connection to ``path``, forever."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    peers: dict[socket.socket, socket.socket] = {}
    while True:
        for key, _events in selector.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            if sock is listener:
                _accept(listener, path, selector, peers)
            elif sock in peers:
                _pump(sock, peers, selector)


def _accept(
    listener: socket.socket,
    path: str,
    selector: selectors.BaseSelector,
    peers: dict[socket.socket, socket.socket],
) -> None:
    client, _address = listener.accept()
    lane = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lane.connect(path)
    except OSError:
        client.close()
        lane.close()
        return
    peers[client], peers[lane] = lane, client
    for sock in (client, lane):
        selector.register(sock, selectors.EVENT_READ)


def _pump(
    sock: socket.socket, peers: dict[socket.socket, socket.socket], selector: selectors.BaseSelector
) -> None:
    """One read from ``sock`` written whole to its peer; at EOF or an error both close.

    The write blocks: the other end is the guard proxy (which always reads) or an HTTP
    client, which sends its request before it reads the answer. A client that stops
    reading stalls only its own command's network."""
    other = peers[sock]
    try:
        data = sock.recv(_CHUNK)
        if data:
            other.sendall(data)
            return
    except OSError:
        pass
    for end in (sock, other):
        selector.unregister(end)
        del peers[end]
        end.close()


if __name__ == "__main__":
    main(sys.argv)

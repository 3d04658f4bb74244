"""Ports on the loopback address, for tests that start real servers."""

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def listening_socket() -> Iterator[socket.socket]:
    """A socket already listening on a port the OS chose, to hand to a server as `fd://N`.

    The server accepts on this very socket, so no other process can take its port between
    the test choosing it and the server binding it. Pass `fileno()` in `pass_fds`.
    """
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.set_inheritable(True)
        yield listener


def port_of(listener: socket.socket) -> int:
    """The port a socket is bound to."""
    port: int = listener.getsockname()[1]
    return port


def free_port() -> int:
    """A port nothing listens on now; another process may take it before a server binds it.

    Only for servers that must be given a number (`shoebox run`): their tests retry on a new
    port when the server reports the port in use. Prefer `listening_socket`.
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

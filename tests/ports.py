"""Ports on the loopback address, for tests that start real servers."""

import fcntl
import random
import socket
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

# Ranges of fixed ports (a cluster's layout) are taken below the kernel's ephemeral range, so
# that no client socket of a parallel test, nor a server on port 0, is ever given one of them
# between the check and the bind. Linux's default ephemeral range starts at 32768.
_BLOCK = 50
_BLOCKS_FROM = 15_000
_CLAIMS = Path(tempfile.gettempdir()) / "shoebox-test-port-blocks"


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


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


@contextmanager
def port_block(size: int) -> Iterator[int]:
    """A base port with `size` ports after it, free and claimed for this test's whole life.

    For servers given a layout of fixed ports (a Patroni cluster, `deploy/hosts`). The block
    is below the ephemeral range, and an advisory file lock claims it against every other
    test process on this machine, so two parallel tests never pick overlapping ranges.
    """
    if size > _BLOCK:
        raise ValueError(f"a block holds {_BLOCK} ports, not {size}")
    blocks = list(range(_BLOCKS_FROM, _ephemeral_low() - _BLOCK, _BLOCK))
    random.shuffle(blocks)
    _CLAIMS.mkdir(mode=0o777, exist_ok=True)
    for base in blocks:
        with ExitStack() as claim:
            handle = claim.enter_context((_CLAIMS / str(base)).open("a"))
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            if not _all_free(base, size):
                continue
            yield base
            return
    raise AssertionError("no free block of loopback ports")


def _all_free(base: int, size: int) -> bool:
    with ExitStack() as sockets:
        for port in range(base, base + size):
            probe = sockets.enter_context(socket.socket())
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True

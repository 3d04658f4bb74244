"""A free TCP port on the loopback address, for tests that start real servers."""

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; a race with another process is unlikely)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port

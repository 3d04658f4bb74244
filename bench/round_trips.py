"""A TCP proxy in front of PostgreSQL that counts round trips, for the benchmarks.

A round trip is one exchange on a connection: the client sends (one message or a pipeline of
several), then the server answers. The proxy counts each change of direction from the client
talking to the server answering, while counting is switched on; a pipelined append (its
timeouts, the call, their resets) is one round trip however many statements it holds, as it
is on the wire. Only for measuring: every byte crosses two more sockets and a Python thread.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from psycopg.conninfo import conninfo_to_dict, make_conninfo

_CHUNK = 65536


class RoundTripCounter:
    """Listens on a free loopback port and relays every connection to the real server."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._counting = False
        self.round_trips = 0
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @contextmanager
    def counting(self) -> Iterator[None]:
        """Count the round trips that start inside the block."""
        self._counting = True
        try:
            yield
        finally:
            self._counting = False

    def reset(self) -> None:
        """Forget what was counted."""
        with self._lock:
            self.round_trips = 0

    def close(self) -> None:
        """Stop accepting connections (those open keep relaying until their ends close)."""
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The side that spoke last on this connection: "client" or "server".
            last = ["server"]
            threading.Thread(
                target=self._pump, args=(client, server, last, "client"), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(server, client, last, "server"), daemon=True
            ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, last: list[str], side: str) -> None:
        try:
            while True:
                data = source.recv(_CHUNK)
                if not data:
                    break
                with self._lock:
                    if side == "server" and last[0] == "client" and self._counting:
                        self.round_trips += 1
                    last[0] = side
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@contextmanager
def counted(database_url: str) -> Iterator[tuple[str, RoundTripCounter]]:
    """The same database's URL through a counting proxy, and the proxy."""
    params = conninfo_to_dict(database_url)
    host = str(params.get("host") or "127.0.0.1")
    port = int(params.get("port") or 5432)
    counter = RoundTripCounter(host, port)
    params["host"], params["port"] = "127.0.0.1", str(counter.port)
    try:
        yield make_conninfo(**params), counter  # type: ignore[arg-type]
    finally:
        counter.close()

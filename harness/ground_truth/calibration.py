"""What a toxic really injects, measured on raw TCP through the same proxy, with one clock.

toxiproxy's latency toxic overshoots its nominal value (by ~0.3-0.5 ms here:
Go wakes timers on the network poller, whose timeouts are not exact), so the
nominal millisecond is not the truth. The truth is measured instead, without
gRPC and without the analyzer: a probe client and an echo server run in this
process, so both ends read one monotonic clock and each direction is timed
one way:

    client: t1 send request  ...  server: t2 whole request read, t3 reply starts
    client: t4 whole reply read
    upstream = t2 - t1        downstream = t4 - t3

The injected amount of a toxic is the median with it minus the median without
it (interleaved probes through the same proxy), which also removes the
proxy's own forwarding cost, as the gRPC comparison does.
"""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass

_HEADER = struct.Struct("!QQ")  # request: payload bytes, reply bytes wanted
_STAMPS = struct.Struct("!qq")  # reply header: t2, t3 (perf_counter_ns)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            raise ConnectionError("probe peer closed the connection")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


class EchoServer:
    """A loopback server answering each probe with its timestamps and the bytes asked for."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._stopped = threading.Event()
        self._connections: list[socket.socket] = []

    def __enter__(self) -> EchoServer:
        threading.Thread(target=self._accept, daemon=True, name="probe-accept").start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stopped.set()
        self._listener.close()
        for connection in self._connections:
            connection.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._connections.append(connection)
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    @staticmethod
    def _serve(connection: socket.socket) -> None:
        try:
            while True:
                size, wanted = _HEADER.unpack(_read_exactly(connection, _HEADER.size))
                _read_exactly(connection, size)
                received = time.perf_counter_ns()
                reply = b"\0" * wanted
                connection.sendall(_STAMPS.pack(received, time.perf_counter_ns()) + reply)
        except OSError:  # ConnectionError included: the probe client went away
            return


@dataclass(frozen=True)
class OneWay:
    """Median one-way times of a probe series, µs."""

    upstream_us: float
    downstream_us: float


def probe(address: str, probes: int, request_bytes: int = 64, reply_bytes: int = 64) -> OneWay:
    """``probes`` request/reply exchanges over one connection to ``address``."""
    host, port = address.rsplit(":", 1)
    up, down = [], []
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        payload = b"\1" * request_bytes
        for _ in range(probes):
            sent = time.perf_counter_ns()
            sock.sendall(_HEADER.pack(request_bytes, reply_bytes) + payload)
            received, replied = _STAMPS.unpack(_read_exactly(sock, _STAMPS.size))
            _read_exactly(sock, reply_bytes)
            done = time.perf_counter_ns()
            up.append((received - sent) / 1e3)
            down.append((done - replied) / 1e3)
    return OneWay(statistics.median(up), statistics.median(down))

"""Ports: a free one to listen on, whether one is free, and who holds one that is not.

Two commands meet on OpenTelemetry's standard OTLP port (4317): ``serve``
takes it when it is free, and ``collector run`` wants it by default. Whichever
comes second has to say which process holds the port and what to do, so
``holder`` reads the listening sockets from ``/proc/net/tcp{,6}`` and finds their
owner through ``/proc/PID/fd`` (Linux; elsewhere, or without permission to look,
the holder is simply unknown and the message says less).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import random
import socket
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


#: Where ``free_port`` looks: from here up to the kernel's ephemeral range.
LOWEST_PICKED_PORT = 10000
#: Linux's default ephemeral range, for when ``/proc`` does not say.
_EPHEMERAL_DEFAULT = (32768, 60999)
_PICK_ATTEMPTS = 200
#: Ports this process handed out, newest last: never handed out twice in a row.
_handed_out: collections.deque[int] = collections.deque(maxlen=4096)
#: The OS's randomness: processes (test workers) that seed ``random`` alike still differ.
_random = random.SystemRandom()


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback TCP port nothing uses (at the time of asking), for a child to listen on.

    Picked at random below the kernel's ephemeral range, not by binding port 0: a port
    from the ephemeral range can be taken as the local port of any outgoing connection
    in the seconds before the child binds it (a busy test run lost a collector's OTLP
    port that way), while ports below the range only go to whoever binds them by
    number. A port still in TIME_WAIT counts as used, and one process never gets the
    same port twice from here while it may still be in use."""
    low, high = LOWEST_PICKED_PORT, ephemeral_range()[0] - 1
    if high - low < 1000:  # a machine whose ephemeral range starts low: let the kernel pick
        return _kernel_picked(host)
    for _ in range(_PICK_ATTEMPTS):
        port = _random.randint(low, high)
        if port not in _handed_out and _bind_error(host, port, reuse_address=False) is None:
            _handed_out.append(port)
            return port
    return _kernel_picked(host)


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux; else its default)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _EPHEMERAL_DEFAULT


def _family(host: str) -> socket.AddressFamily:
    """IPv6 for an address with a colon (``::1``), else IPv4: a socket binds its own kind."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def _bind_error(host: str, port: int, *, reuse_address: bool) -> OSError | None:
    """Why a listener could not bind ``host:port`` now, or None if it could.

    With ``reuse_address`` a port whose only users are connections in TIME_WAIT binds
    (a listener started now would get it); without, those leftovers count as used."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        if reuse_address:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error
    return None


def _kernel_picked(host: str) -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a listener could bind ``host:port`` now (TIME_WAIT leftovers do not count)."""
    error = _bind_error(host, port, reuse_address=True)
    return error is None or error.errno != errno.EADDRINUSE


def holder(port: int) -> str | None:
    """``pid N (command line)`` of the process listening on ``port``, or None if unknown."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    proc = Path("/proc")
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:[") and target[8:-1] in inodes:
                        return f"pid {entry.name} ({_command(entry)})"
    return None


def _listening_inodes(port: int) -> set[str]:
    wanted = f"{port:04X}"
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as lines:
            next(lines, None)  # the header
            for line in lines:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _LISTEN and fields[1].endswith(":" + wanted):
                    inodes.add(fields[9])
    return inodes


def _command(process: Path) -> str:
    try:
        raw = (process / "cmdline").read_bytes()
    except OSError:
        return "?"
    words = [word.decode(errors="replace") for word in raw.split(b"\0") if word]
    text = " ".join([os.path.basename(words[0]), *words[1:]]) if words else "?"
    text = " ".join(text.split())  # a ``python -c`` script's newlines
    return text if len(text) <= 120 else text[:117] + "..."

"""Ports: a free one to listen on, whether one is free, and who holds one that is not.

Two commands meet on OpenTelemetry's standard OTLP port (4317): ``serve``
takes it when it is free, and ``collector run`` wants it by default. Whichever
comes second has to say which process holds the port and what to do, so
``holder`` reads the listening sockets from ``/proc/net/tcp{,6}`` and finds their
owner through ``/proc/PID/fd`` (Linux; elsewhere, or without permission to look,
the holder is simply unknown and the message says less).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback TCP port nothing listens on (at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when a listener could bind ``host:port`` now (TIME_WAIT leftovers do not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            return error.errno != errno.EADDRINUSE
    return True


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

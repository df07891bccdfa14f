"""What the collector's child process needs from the OS: ports, and dying with its parent."""

from __future__ import annotations

import ctypes
import signal
import socket


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Like the collector (Go sets SO_REUSEADDR): a port left in TIME_WAIT
        # by a previous run is free, only a listener makes it busy.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


_PR_SET_PDEATHSIG = 1


def terminate_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the process that started it dies.

    Linux only (``prctl``); elsewhere a no-op. Covers the one case a parent
    cannot handle itself, its own SIGKILL: the collector then shuts down
    instead of living on as an orphan that holds the OTLP and health ports.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass

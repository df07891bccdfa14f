"""What the collector's child process needs from the OS: dying with its parent."""

from __future__ import annotations

import ctypes
import signal

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

"""Wrong passwords slow their source down: the HTTP interface's and the app's.

A password a person chose can be guessed where nothing limits the guesses: the HTTP
interface answered each wrong one at once, and the app's one-second wait was per browser
session (a guesser opens many). Here, per source address and shared by every
connection: ``FREE_FAILURES`` wrong passwords within ``WINDOW_S`` are free (a person's
typos), each further one locks the source out for twice as long as the last (5 s up to
``MAX_LOCKOUT_S``), and while locked out its attempts are refused without being checked,
so a guess then tells nothing. A success clears the source. Memory is bounded: the
oldest sources are forgotten first. The intake's tokens are not throttled: they are
random (``openssl rand``), and a flood of wrong ones must not lock out the senders that
share its address.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

FREE_FAILURES = 5
WINDOW_S = 300.0
FIRST_LOCKOUT_S = 5.0
MAX_LOCKOUT_S = 60.0
MAX_SOURCES = 10_000


@dataclass
class _Source:
    failures: int = 0
    first_failure: float = 0.0
    locked_until: float = 0.0


class FailedLogins:
    """The lockouts of every source; thread-safe."""

    def __init__(
        self,
        *,
        free_failures: int = FREE_FAILURES,
        max_lockout_s: float = MAX_LOCKOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.free_failures = free_failures
        self.max_lockout_s = max_lockout_s
        self._clock = clock
        self._sources: OrderedDict[str, _Source] = OrderedDict()
        self._lock = threading.Lock()

    def locked_for(self, source: str) -> float:
        """Seconds ``source`` must wait before its next attempt is checked (0: now)."""
        with self._lock:
            entry = self._sources.get(source)
            return 0.0 if entry is None else max(0.0, entry.locked_until - self._clock())

    def failed(self, source: str) -> float:
        """Count a wrong password; the lockout it earns (0: still free)."""
        now = self._clock()
        with self._lock:
            entry = self._sources.pop(source, None)
            if entry is None or now - entry.first_failure > WINDOW_S:
                entry = _Source(first_failure=now)
            entry.failures += 1
            over = entry.failures - self.free_failures
            lockout = 0.0
            if over > 0:
                lockout = min(self.max_lockout_s, FIRST_LOCKOUT_S * 2 ** min(over - 1, 30))
            entry.locked_until = now + lockout
            self._sources[source] = entry
            while len(self._sources) > MAX_SOURCES:
                self._sources.popitem(last=False)
            return lockout

    def succeeded(self, source: str) -> None:
        if source not in self._sources:  # the common case, every query: no lock taken
            return
        with self._lock:
            self._sources.pop(source, None)


def lockout_message(source: str, seconds: float) -> str:
    return (
        f"too many wrong passwords from {source}: refused without a check for "
        f"{max(1, round(seconds))} s more; wait, then use the right password"
    )

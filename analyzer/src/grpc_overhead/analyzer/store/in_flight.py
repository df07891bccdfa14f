"""The span inserts a process has running, so that a snapshot of the store stops before them.

Each half row of ``grpc_calls`` is stamped with the engine's clock when the INSERT that
stores its span runs (the materialized view's ``now64()``), but becomes visible only when
that INSERT commits. A snapshot (``Snapshot``) must stop before the oldest one still
running, or a report read while spans arrive counts a batch in some of its tables and not
in others. The engine's list of running queries tells it only roughly (an INSERT's stamps
can precede the start its ``elapsed`` gives: ``analyzer.snapshot.MARGIN_NS``, a margin
found by trial, by which live views lag). The process that sends the INSERTs knows
exactly: it notes each one's start before sending it (so every stamp it gives is later)
and forgets it once the statement returned (its rows are visible).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator

from grpc_overhead.analyzer.store.base import Snapshot


class InsertsInFlight:
    """Span inserts this process is running on one engine; thread-safe.

    ``clock`` must be the engine's (an embedded engine shares this process's wall clock).
    """

    def __init__(self, clock: Callable[[], int] = time.time_ns) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: dict[int, int] = {}
        self._tokens = itertools.count()

    @contextlib.contextmanager
    def inserting(self) -> Iterator[None]:
        """Held around one statement that stores spans."""
        token = next(self._tokens)
        with self._lock:
            self._started[token] = self._clock()
        try:
            yield
        finally:
            with self._lock:
                del self._started[token]

    def snapshot(self) -> Snapshot:
        """Now, or just before the oldest insert still running."""
        with self._lock:
            now = self._clock()
            oldest = min(self._started.values(), default=None)
        return Snapshot(now if oldest is None else min(now, oldest - 1), now)

"""Timestamps for the hot path: integers from the monotonic clock, anchored once to wall time.

Every event is recorded as ``time.perf_counter_ns()``: precise, ordered and cheap.
Exported spans need wall-clock nanoseconds, so the export worker converts with
one (wall, monotonic) anchor pair. The worker re-anchors periodically, so the
converted times follow NTP slewing of the wall clock without ever making two
events of one call disagree in order (both use the same anchor).
"""

from __future__ import annotations

import threading
import time

now = time.perf_counter_ns
"""The hot path's clock: monotonic integer nanoseconds."""

_anchor_lock = threading.Lock()
_wall_anchor_ns = time.time_ns()
_monotonic_anchor_ns = time.perf_counter_ns()


def reanchor() -> None:
    """Take a fresh (wall, monotonic) pair; called off the hot path by the export worker."""
    global _wall_anchor_ns, _monotonic_anchor_ns
    with _anchor_lock:
        monotonic_before = time.perf_counter_ns()
        wall = time.time_ns()
        monotonic_after = time.perf_counter_ns()
        _wall_anchor_ns = wall
        _monotonic_anchor_ns = (monotonic_before + monotonic_after) // 2


def wall_offset_ns() -> int:
    """Add this to a monotonic reading to get wall-clock nanoseconds since the epoch."""
    return _wall_anchor_ns - _monotonic_anchor_ns


def to_wall_ns(monotonic_ns: int) -> int:
    return monotonic_ns + _wall_anchor_ns - _monotonic_anchor_ns

"""Timestamps for the hot path: integers from the monotonic clock, anchored once to wall time.

Every event is recorded as ``time.perf_counter_ns()``: precise, ordered and cheap.
Exported spans need wall-clock nanoseconds, so the export worker converts with
one (wall, monotonic) anchor pair. The worker re-anchors periodically, so the
converted times follow the wall clock without ever making two
events of one call disagree in order (both use the same anchor). A wall clock that
is stepped (a virtual machine resumed, NTP or an operator setting it) is followed
at the worker's next wake (``stepped``): until then, every span would carry times
off by the step, and phases between processes (network) would read it as latency.
"""

from __future__ import annotations

import threading
import time

now = time.perf_counter_ns
"""The hot path's clock: monotonic integer nanoseconds."""

#: Bracketed readings taken per anchor: the tightest bracket wins. A thread preempted
#: between its two monotonic reads would otherwise put its wait into the anchor, and two
#: processes on one host would disagree by it: under load (the suite beside two CPU hogs)
#: a stream's message read that way 1.1 and 7.5 us before it was sent.
ANCHOR_TRIES = 8


def tightest_anchor(readings: list[tuple[int, int, int]]) -> tuple[int, int]:
    """(wall, monotonic) from (monotonic before, wall, monotonic after) readings: the
    one with the shortest bracket, its monotonic taken at the bracket's middle. Its error
    is at most half that bracket (tens of nanoseconds when nothing interrupted it)."""
    before, wall, after = min(readings, key=lambda reading: reading[2] - reading[0])
    return wall, (before + after) // 2


def _anchored_offset() -> int:
    """wall - monotonic (ns) from the tightest of ``ANCHOR_TRIES`` bracketed readings."""
    readings = []
    for _ in range(ANCHOR_TRIES):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        readings.append((before, wall, time.perf_counter_ns()))
    wall, monotonic = tightest_anchor(readings)
    return wall - monotonic


_anchor_lock = threading.Lock()
#: The anchor as one value, so a reader never mixes two anchors' halves.
_offset_ns = _anchored_offset()


def reanchor() -> None:
    """Take a fresh (wall, monotonic) pair; called off the hot path by the export worker."""
    global _offset_ns
    with _anchor_lock:
        _offset_ns = _anchored_offset()


#: How far the wall clock may move from where the anchor puts it before the worker
#: re-anchors at once instead of at its interval. On Linux a slew (adjtime, NTP) changes
#: the monotonic clock's rate too, so only a step moves one against the other. 2 ms is
#: far below a step worth seeing; a reading preempted longer than that costs a needless
#: re-anchor (a few microseconds), no more.
STEP_NS = 2_000_000


def stepped() -> bool:
    """Whether the wall clock moved ``STEP_NS`` or more from where the anchor puts it.

    One unbracketed reading (about 100 ns): cheap enough for every wake of the worker."""
    return abs(time.time_ns() - time.perf_counter_ns() - _offset_ns) >= STEP_NS


def wall_offset_ns() -> int:
    """Add this to a monotonic reading to get wall-clock nanoseconds since the epoch."""
    return _offset_ns


def to_wall_ns(monotonic_ns: int) -> int:
    return monotonic_ns + _offset_ns

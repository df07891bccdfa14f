"""The wall-clock anchor: two processes on one host must agree on when things happened.

Every exported timestamp is a monotonic reading plus one (wall, monotonic) anchor, and
phases between processes (a stream's message transfer) subtract one process's times
from another's. An anchor read across a preemption moves all of a process's times.
"""

from __future__ import annotations

import time

import pytest

from grpc_overhead.instrumentation import clock

pytestmark = pytest.mark.unit


def test_the_tightest_bracket_sets_the_anchor():
    readings = [
        (100, 5_000, 900),  # preempted between its reads: an 800 ns bracket
        (1_000, 6_000, 1_010),
        (2_000, 7_000, 2_500),
    ]
    assert clock.tightest_anchor(readings) == (6_000, 1_005)


def test_an_interrupted_reading_does_not_move_the_anchor():
    """Had the first reading been taken alone (as before), the anchor would be off by
    its half bracket (here 400 ns); the tightest is off by 5 ns at most."""
    interrupted = (100, 5_000, 900)
    tight = (1_000, 5_900, 1_010)
    wall, monotonic = clock.tightest_anchor([interrupted, tight])
    assert wall - monotonic == 4_895
    assert clock.tightest_anchor([interrupted]) == (5_000, 500)


def test_a_fresh_anchor_puts_a_reading_on_the_wall_clock():
    clock.reanchor()
    before = clock.now()
    wall = time.time_ns()
    after = clock.now()
    # Within a millisecond: the anchor's error is half its tightest bracket (nanoseconds
    # on an idle machine); the bound only catches a conversion that is wrong.
    assert clock.to_wall_ns(before) - 1_000_000 <= wall <= clock.to_wall_ns(after) + 1_000_000
    assert clock.wall_offset_ns() == clock.to_wall_ns(0)

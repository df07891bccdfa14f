"""client_dispatch: what a waking caller waits before Python runs again (GIL, event loop).

A busy client process sees its responses late: gRPC core has the response (its
completion queue wakes the calling thread, GIL-free), but the thread must then
win the GIL back from the process's busy threads (up to a switch interval,
5 ms, per thread ahead of it) before the response deserializer, our first
timestamp, runs. grpcio exposes no GIL-free timestamp of the arrival, so that
wait cannot be timed per call. It can be sampled: a probe that sleeps a short,
known time and measures how late it runs again waits for the GIL exactly as
a thread woken by core does (and, sleeping as long as the calls' round trip in
core, at the same point of a busy thread's switch interval: ``LagProbe``). Its
lateness, less the timer's own (the smallest lateness seen recently, the
kernel's timer slack), is a draw from the same
distribution as the caller's wait; a call records the latest draw when its
response deserializer starts (one attribute read on the hot path): the median
of the last ``_RECENT`` samples.

aio: the caller waits for the event loop (the loop's own GIL wait plus the
callbacks queued before it), so an aio client samples the loop's lag with a
task on that loop instead.

What this gives is an estimate per call that is right on average (p50 and
mean, over calls), not per call: see docs/reference.md, client_dispatch. The
probe runs only while calls are made (it stops ``_IDLE_STOP_NS`` after the
last one); it wakes twice per ``INTERVAL_S`` (plus its measured sleep), a few
microseconds of CPU each.
"""

from __future__ import annotations

import _thread
import asyncio
import threading
import time
import weakref
from typing import Any

from grpc_overhead.instrumentation.clock import now

#: The probe's rest between samples: short enough to follow a changing load, long
#: enough to cost little.
INTERVAL_S = 0.02
#: Samples the estimate is the median of.
_RECENT = 15
#: Bounds of the measured sleep (ns): the calls' time in core, within reason.
_SHORTEST_NS = 100_000
_LONGEST_NS = 20_000_000
_DEFAULT_IN_CORE_NS = 1_000_000
#: The most a sleep oversleeps on an idle machine (the kernel's timer slack, 50 us by
#: default, plus a wake-up): the floor subtracted from every lateness.
_TIMER_SLACK_MAX_NS = 150_000


def _short(in_core: int) -> int:
    return min(max(in_core, _SHORTEST_NS), _LONGEST_NS)


#: Stop probing this long after the last call (ns); the next call starts it again.
_IDLE_STOP_NS = 10 * 1_000_000_000
#: Samples per window of the timer-slack floor (the minimum lateness over the last
#: one or two windows: follows a change of timer behaviour within seconds).
_WINDOW = 200


class LagProbe:
    """The latest lag sample (``lag``, ns; -1 before the first) of one probe.

    A caller's wait is not a random draw: it gave the GIL up when it entered gRPC core
    with its request, a busy thread took it with a fresh switch interval, and the
    response came back ``in_core`` later, into the rest of that interval. So each
    sample mimics that: the probe wakes (holding the GIL, as a caller does after
    its work), gives the GIL up for as long as the calls' latest round trip in core
    (``in_core``, written by each call's response: one store), and measures how late
    it runs again; then it rests ``INTERVAL_S``.
    """

    __slots__ = (
        "_count",
        "_floor",
        "_previous_floor",
        "_recent",
        "in_core",
        "lag",
        "last_use",
        "running",
    )

    def __init__(self) -> None:
        self.in_core = _DEFAULT_IN_CORE_NS
        self._recent: list[int] = []
        self.lag = -1
        self.last_use = 0
        self.running = False
        self._floor = 1 << 62
        self._previous_floor = 1 << 62
        self._count = 0

    def _sample(self, late: int) -> None:
        """One lateness (ns past the intended wake-up) -> ``lag``, timer slack removed."""
        if late < self._floor:
            self._floor = late
        self._count += 1
        if self._count >= _WINDOW:
            self._previous_floor, self._floor, self._count = self._floor, 1 << 62, 0
        # A busy process's smallest lateness is a GIL wait itself, not the timer's: the
        # floor never exceeds what a timer's slack can be.
        floor = min(self._floor, self._previous_floor, _TIMER_SLACK_MAX_NS)
        recent = self._recent
        recent.append(max(0, late - floor))
        if len(recent) > _RECENT:
            del recent[0]
        # The median of the recent samples: a single sample of waits spread over 0-40 ms
        # (two busy threads) made each call's estimate, and so the p50 of
        # response_network, swing by milliseconds from run to run.
        self.lag = sorted(recent)[len(recent) // 2]

    def idle(self) -> bool:
        return now() - self.last_use > _IDLE_STOP_NS


class _ThreadProbe(LagProbe):
    __slots__ = ("_lock",)

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def use(self) -> None:
        self.last_use = now()
        if not self.running:
            with self._lock:
                if not self.running:
                    self.running = True
                    if self.lag < 0:  # no evidence of a lag until the first sample
                        self.lag = 0
                    # Not threading.Thread.start: it waits for the thread to run, on the
                    # caller's time (see connect._Watchers).
                    _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        sleep = time.sleep
        try:
            while not self.idle():
                sleep(INTERVAL_S)
                short = _short(self.in_core)
                before = now()
                sleep(short / 1e9)
                self._sample(now() - before - short)
        finally:
            self.running = False


class _LoopProbe(LagProbe):
    __slots__ = ("__weakref__",)

    def use(self) -> None:
        self.last_use = now()
        if not self.running:
            self.running = True
            if self.lag < 0:
                self.lag = 0
            asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            while not self.idle():
                await asyncio.sleep(INTERVAL_S)
                short = _short(self.in_core)
                before = now()
                await asyncio.sleep(short / 1e9)
                self._sample(now() - before - short)
        finally:
            self.running = False


#: The process's GIL probe (sync clients).
THREAD_PROBE = _ThreadProbe()
_LOOP_PROBES: weakref.WeakKeyDictionary[Any, _LoopProbe] = weakref.WeakKeyDictionary()


def thread_probe() -> LagProbe:
    """The GIL probe, started if it was not running: for a sync call about to be made."""
    THREAD_PROBE.use()
    return THREAD_PROBE


def loop_probe() -> LagProbe:
    """The running event loop's probe, started if needed: for an aio call about to be made."""
    loop = asyncio.get_running_loop()
    probe = _LOOP_PROBES.get(loop)
    if probe is None:
        probe = _LOOP_PROBES[loop] = _LoopProbe()
    probe.use()
    return probe

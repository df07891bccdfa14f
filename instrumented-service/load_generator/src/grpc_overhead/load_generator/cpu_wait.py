"""The load generator's own wait for a CPU: what a busy host adds to the latency it reports.

A load generator whose host has no CPU free (other processes, or the service it calls
running on the same host) waits in the kernel's run queue: a thread woken by a response
waits for a CPU before it can read it. That wait is inside every latency the load
generator reports and, since grpcio gives the client no timestamp of a response's
arrival, inside ``response_network`` too: no phase can tell it from the wire. Linux
counts each thread's run-queue wait (``schedstat``'s second field, ns), so the summary
can say how much of the latency was the load generator's own wait:

* the callers: each calling thread's wait during its calls (two ``pread`` of its own
  ``schedstat``, 0.4 us each, outside the timed call);
* gRPC's reading threads (``event_engine``, named by gRPC core): their wait over the run.
  They read the responses from the socket and wake the callers.

The process's other threads (the span exporter, the lag probe, the main thread) are
left out: their waits are not on a call's path, unless one waits holding the GIL, and
then the callers wait for the GIL, which no run-queue count holds. So the count says
the host starved the load generator; it is not an exact share of the latency. A gRPC
thread that ended during the run is left out too (its count goes with it). Where the
kernel keeps no ``schedstat`` (not Linux, or no ``CONFIG_SCHED_INFO``) the summary's
``cpu_wait_ms`` is null.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

_TASKS = Path("/proc/self/task")
#: The names gRPC core gives the threads that read the sockets (``pthread_setname_np``).
GRPC_READER_NAME = "event_engine"
_UNAVAILABLE = -1


def _run_delay(schedstat: bytes) -> int:
    """The second of ``schedstat``'s numbers (time on a CPU, time waiting for one, time
    slices): the wait, in ns."""
    try:
        return int(schedstat.split()[1])
    except (IndexError, ValueError):
        return _UNAVAILABLE


class _OwnSchedstat:
    """The calling thread's ``schedstat``, opened once per thread (``/proc/thread-self``
    resolves at open) and closed with the thread's locals."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        try:
            self.fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self.fd = _UNAVAILABLE

    def run_delay_ns(self) -> int:
        if self.fd == _UNAVAILABLE:
            return _UNAVAILABLE
        try:
            return _run_delay(os.pread(self.fd, 128, 0))
        except OSError:
            return _UNAVAILABLE

    def __del__(self) -> None:
        if self.fd != _UNAVAILABLE:
            os.close(self.fd)


_local = threading.local()


def own_run_delay_ns() -> int:
    """The calling thread's run-queue wait so far (ns); -1 where the kernel does not say."""
    own = getattr(_local, "schedstat", None)
    if own is None:
        own = _local.schedstat = _OwnSchedstat()
    return own.run_delay_ns()


def grpc_reader_waits(tasks_dir: Path = _TASKS) -> dict[int, int]:
    """The run-queue wait so far (ns) of each live thread gRPC core named a reader, in
    this process or the one whose ``/proc/<pid>/task`` is ``tasks_dir``."""
    found: dict[int, int] = {}
    try:
        tasks = list(tasks_dir.iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # ended meanwhile
        if name.startswith(GRPC_READER_NAME):
            try:
                delay = _run_delay((task / "schedstat").read_bytes())
            except OSError:
                continue  # ended meanwhile
            if delay >= 0:
                found[int(task.name)] = delay
    return found


class ReaderWaits:
    """gRPC's reading threads' wait between ``start`` and ``total_ns``."""

    def __init__(self) -> None:
        self._before: dict[int, int] = {}

    def start(self) -> None:
        self._before = grpc_reader_waits()

    def total_ns(self) -> int:
        """Their wait since ``start`` (a thread started since counts whole: its life is
        within the run)."""
        after = grpc_reader_waits()
        return sum(max(0, delay - self._before.get(tid, 0)) for tid, delay in after.items())


def summary(callers_ns: int | None, readers_ns: int, calls: int) -> dict[str, float] | None:
    """``cpu_wait_ms`` of the run summary: ``{per_call, callers, grpc_readers}`` (ms; the
    two parts are totals over the run), or None where the callers' wait is unknown."""
    if callers_ns is None:
        return None
    per_call = (callers_ns + readers_ns) / calls / 1e6 if calls else 0.0
    return {
        "per_call": round(per_call, 4),
        "callers": round(callers_ns / 1e6, 3),
        "grpc_readers": round(readers_ns / 1e6, 3),
    }

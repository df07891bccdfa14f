"""Helpers the benchmarks share: machine facts, CPU clocks, statistics, result files and
worker processes driven over a pipe.

The machine benchmarks run on is small, shared and noisy, so benchmarks measure
alternatives side by side in one run, in interleaved blocks, and report medians
over blocks. CPU is read from the kernel's per-process and per-thread clocks
(nanosecond resolution, unlike /proc's 10 ms ticks).
"""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


# -- machine ----------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def machine_info(distributions: Iterable[str] = ("grpcio", "protobuf")) -> dict[str, Any]:
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "load_average_1m_at_start": os.getloadavg()[0],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {name: _version(name) for name in distributions},
    }


# -- CPU clocks -------------------------------------------------------------------------------
def process_cpu_ns() -> int:
    """CPU time of every thread of this process (user + system)."""
    return time.process_time_ns()


def thread_cpu_ns() -> int:
    """CPU time of the calling thread."""
    return time.thread_time_ns()


def _thread_clock(native_id: int) -> int:
    """Linux's per-thread CPU clock id for any thread of this process (MAKE_THREAD_CPUCLOCK
    with CPUCLOCK_SCHED), so threads Python did not start (gRPC core's) can be read too."""
    return ((~native_id) << 3) | 6


def cpu_by_thread() -> dict[int, int]:
    """CPU ns so far of every live thread of this process, by native thread id (Linux)."""
    times = {}
    for entry in os.scandir("/proc/self/task"):
        native_id = int(entry.name)
        try:
            times[native_id] = time.clock_gettime_ns(_thread_clock(native_id))
        except OSError:  # the thread exited meanwhile
            continue
    return times


# -- statistics -------------------------------------------------------------------------------
def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


# -- results ----------------------------------------------------------------------------------
def write_results(name: str, data: dict[str, Any], markdown: str) -> list[Path]:
    """bench/results/<name>.json and .md, each written whole (tmp file, then rename)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for suffix, text in ((".json", json.dumps(data, indent=2) + "\n"), (".md", markdown)):
        path = RESULTS_DIR / f"{name}{suffix}"
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
        written.append(path)
    return written


def publish(name: str, data: dict[str, Any], markdown: str, *, quick: bool) -> int:
    """A bench's last step: a quick (smoke) run prints its tables and keeps the committed
    results; a full run writes bench/results/<name>.json and .md. Returns the exit code."""
    if quick:
        print(markdown)
        return 0
    for path in write_results(name, data, markdown):
        log(f"wrote {os.path.relpath(path)}")
    return 0


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
        return str(value)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# -- worker processes -------------------------------------------------------------------------
class WorkerError(RuntimeError):
    """A worker process failed a command, died, or did not answer in time."""


def serve_commands(connection: Connection, commands: dict[str, Callable[..., Any]]) -> None:
    """A worker's main loop: run ``commands[name](*args)`` for each request until "stop"."""
    while True:
        try:
            name, args = connection.recv()
        except EOFError:
            return
        if name == "stop":
            connection.send(("ok", None))
            return
        try:
            connection.send(("ok", commands[name](*args)))
        except Exception:
            connection.send(("error", traceback.format_exc()))


class Worker:
    """A spawned process running ``target(connection, *args)``, which must first send one
    ready value (e.g. its port), then call ``serve_commands``."""

    def __init__(self, name: str, target: Callable[..., None], *args: Any) -> None:
        self.name = name
        context = multiprocessing.get_context("spawn")
        self._connection, child = context.Pipe()
        self._process = context.Process(target=target, args=(child, *args), name=name, daemon=True)
        self._process.start()
        child.close()
        self.ready: Any = None

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def wait_ready(self, timeout_s: float = 60.0) -> Any:
        self.ready = self._receive(timeout_s, "start")
        return self.ready

    def call(self, name: str, *args: Any, timeout_s: float = 120.0) -> Any:
        try:
            self._connection.send((name, args))
        except (BrokenPipeError, OSError) as error:
            raise WorkerError(f"{self.name} is gone: {error}") from error
        status, value = self._receive(timeout_s, name)
        if status != "ok":
            raise WorkerError(f"{self.name} failed {name!r}:\n{value}")
        return value

    def _receive(self, timeout_s: float, what: str) -> Any:
        if not self._connection.poll(timeout_s):
            raise WorkerError(f"{self.name} did not answer {what!r} within {timeout_s:.0f} s")
        try:
            return self._connection.recv()
        except EOFError as error:
            raise WorkerError(f"{self.name} exited (code {self._process.exitcode})") from error

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._process.is_alive():
            try:
                self.call("stop", timeout_s=timeout_s)
            except WorkerError:
                pass
            self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5.0)
        self._connection.close()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

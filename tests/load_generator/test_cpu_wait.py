"""The load generator's own wait for a CPU (``cpu_wait_ms``): the kernel's count, summed
the way the summary says, and a warning where it is a visible part of the latency."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grpc_overhead.load_generator import cpu_wait
from grpc_overhead.load_generator.runner import LoadConfig, run_blocking
from grpc_overhead.load_generator.stats import Outcome, cpu_wait_lines, summarize
from grpc_overhead.load_generator.workload import WorkloadSpec
from grpc_overhead.processes import offline_env

HOG = "while True: pass"
LOAD = ("--calls", "30", "--entities", "50", "--quiet")


def _one_cpu() -> int:
    """A CPU this process may run on (a container may offer fewer than the host has)."""
    return min(os.sched_getaffinity(0))


@contextmanager
def _hogs(cpu: int, count: int, *, held: bool = False) -> Iterator[list[subprocess.Popen]]:
    """``count`` processes spinning on ``cpu``: anything else there waits for them.
    ``held``: stopped (``SIGSTOP``) until the caller lets them go."""

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})

    hogs = [subprocess.Popen([sys.executable, "-c", HOG], preexec_fn=pinned) for _ in range(count)]
    try:
        if held:
            for hog in hogs:
                hog.send_signal(signal.SIGSTOP)
        else:
            time.sleep(0.1)  # running before the measured part starts
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


@pytest.mark.unit
def test_a_thread_sharing_its_cpu_with_busy_processes_is_counted_waiting() -> None:
    """Two processes spinning on the thread's only CPU: a thread that spins too gets about
    a third of it, so it waits for most of the time it wants to run."""
    if cpu_wait.own_run_delay_ns() < 0:
        pytest.fail("this kernel keeps no schedstat: cpu_wait_ms would be null everywhere")
    cpu = _one_cpu()
    waited: list[int] = []

    def spin() -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
        before = cpu_wait.own_run_delay_ns()
        deadline = time.perf_counter() + 0.6
        while time.perf_counter() < deadline:
            pass
        waited.append(cpu_wait.own_run_delay_ns() - before)

    with _hogs(cpu, 2):
        thread = threading.Thread(target=spin)
        thread.start()
        thread.join()
    # A fair share is 0.2 s of 0.6; anything else on that CPU only adds to the wait.
    assert waited[0] >= 0.2e9, f"waited {waited[0] / 1e6:.1f} ms of 600"


@pytest.mark.unit
def test_readers_are_the_threads_grpc_core_names() -> None:
    import grpc

    channel = grpc.insecure_channel("127.0.0.1:1")  # gRPC core starts its threads
    try:
        # Each names itself once running: a first look can find them still called python.
        deadline = time.monotonic() + 5
        while not (readers := cpu_wait.grpc_reader_waits()) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        channel.close()
    assert readers, "no thread named event_engine: gRPC renamed its readers?"
    assert threading.get_native_id() not in readers
    assert all(delay >= 0 for delay in readers.values())


@pytest.mark.unit
def test_the_summary_adds_the_parts_per_call() -> None:
    outcome = Outcome(cpu_wait_ns=3_000_000)
    outcome.status_codes["OK"] = 4
    summary = summarize(
        outcome,
        run_id="r",
        duration_s=1.0,
        config={},
        payload={},
        grpc_readers_wait_ns=1_000_000,
    )
    assert summary["cpu_wait_ms"] == {"per_call": 1.0, "callers": 3.0, "grpc_readers": 1.0}
    unknown = Outcome(cpu_wait_unknown=True)
    unknown.merge(outcome)  # one worker that could not read it makes the sum unknown
    assert (
        summarize(unknown, run_id="r", duration_s=1.0, config={}, payload={})["cpu_wait_ms"] is None
    )


@pytest.mark.unit
@pytest.mark.parametrize("per_call, warned", [(0.04, False), (0.06, True), (None, False)])
def test_a_visible_wait_is_called_out(per_call: float | None, warned: bool) -> None:
    waited = None if per_call is None else {"per_call": per_call, "callers": 1, "grpc_readers": 1}
    lines = cpu_wait_lines({"cpu_wait_ms": waited, "latency_ms": {"mean": 1.0}})
    assert bool(lines) == (per_call is not None)
    assert any("give it a cpu of its own" in line.lower() for line in lines) == warned


@pytest.mark.unit
def test_an_in_process_run_reports_its_callers_and_readers(target, pipeline) -> None:
    spec = WorkloadSpec(entities=30, features=8)
    summary = run_blocking(
        LoadConfig(targets=[target], run_id="cpu-wait", workload=spec, pipeline=pipeline, calls=20)
    )
    waited = summary["cpu_wait_ms"]
    assert waited is not None and waited["callers"] >= 0 and waited["grpc_readers"] >= 0
    expected = (waited["callers"] + waited["grpc_readers"]) / summary["calls"]
    assert waited["per_call"] == pytest.approx(expected, abs=2e-3)


def _load(target: str, cpu: int, *flags: str, hog: subprocess.Popen | None = None) -> dict:
    """``grpc-overhead load`` on ``cpu`` at niceness 15: behind anything else there. A
    ``hog`` is let go once the load generator has started gRPC, so it starves the calls,
    not the start-up (at 3% of a CPU, importing took 15 s)."""

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})
        os.nice(15)

    command = [sys.executable, "-m", "grpc_overhead", "load", "--target", target, *LOAD, *flags]
    load = subprocess.Popen(
        command,
        env=offline_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        preexec_fn=pinned,
    )
    try:
        if hog is not None:
            tasks = Path(f"/proc/{load.pid}/task")
            while load.poll() is None and not cpu_wait.grpc_reader_waits(tasks):
                time.sleep(0.002)
            hog.send_signal(signal.SIGCONT)
        out, err = load.communicate(timeout=120)
    finally:
        load.kill()
    assert load.returncode == 0, err
    return json.loads(out) if "--json" in flags else {"text": out}


@pytest.mark.e2e
def test_a_starved_load_generator_says_so(target) -> None:
    """The load generator behind a busy process on its CPU reports the wait and warns that
    its latency includes it; beside it, the same load with the CPU to itself (interleaved:
    whatever else the machine does hits both). Not how much of the latency's growth it
    explains: a thread that waits for the CPU holding the GIL keeps the callers waiting
    for the GIL, which no run-queue count holds (at load 5-6, with the workers' tests
    beside it, latency grew 78 ms a call and the count 18 ms)."""
    cpu = _one_cpu()
    quiet = _load(target, cpu, "--json")
    with _hogs(cpu, 1, held=True) as (hog,):
        text = _load(target, cpu, hog=hog)["text"]
    assert "CPU wait:" in text and "its latency and response_network include" in text
    per_call = re.search(r"CPU wait:\s+([0-9.]+) ms per call", text)
    assert per_call, text
    # 3.6-18 ms a call measured, at load 2-6
    assert float(per_call.group(1)) - quiet["cpu_wait_ms"]["per_call"] > 1.0, text
    quiet = _load(target, cpu, "--json")
    with _hogs(cpu, 1, held=True) as (hog,):
        starved = _load(target, cpu, "--json", hog=hog)
    waited = starved["cpu_wait_ms"]["per_call"] - quiet["cpu_wait_ms"]["per_call"]
    assert waited > 1.0, (quiet["cpu_wait_ms"], starved["cpu_wait_ms"])

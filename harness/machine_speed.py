"""``python -m harness.machine_speed``: one line that says how fast this machine is right now.

``make test`` prints it before each of its two parts. The suite's wall time follows the
machine more than the code: quiet runs of nearly the same code took 18 to 25 minutes on
these shared machines, hour by hour (``docs/testing.md``). Two fixed pieces of work, the
kinds the suite spends its CPU on, make two runs comparable: a pure-Python loop (the
test workers, the services, the load generators) and the engine's analysis of the
breakdown's statement (every report, page and panel analyzes one like it; it does not
depend on the data, so an empty store serves). Medians of a few, with the load average
of that moment: a run whose figures are 20 % slower ran on a machine 20 % slower.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

#: Repetitions of each piece (the median is printed): few, since make test pays for them.
REPEATS = 3
#: Iterations of the Python loop (about 0.1 s on one of these cores, quiet).
LOOP_ITERATIONS = 2_000_000


def python_loop() -> None:
    total = 0
    for number in range(LOOP_ITERATIONS):
        total += number * number % 7


def median_cpu_ms(work: Callable[[], object]) -> float:
    """The median thread CPU time of ``work`` in ms (CPU, not wall: a busy machine that
    takes the core away between slices does not count, a slower core does)."""
    times = []
    for _ in range(REPEATS):
        started = time.thread_time()
        work()
        times.append((time.thread_time() - started) * 1000)
    return statistics.median(times)


def analysis_ms(directory: str) -> float:
    """The median CPU time of the engine's EXPLAIN of the breakdown statement."""
    from grpc_overhead.analyzer.calls import create_calls
    from grpc_overhead.analyzer.clock_offsets import query_parameters
    from grpc_overhead.analyzer.options import CallsOptions
    from grpc_overhead.analyzer.phases import breakdown_sql
    from grpc_overhead.analyzer.schema import create_schema
    from grpc_overhead.analyzer.store import open_store

    options = CallsOptions()
    statement = "EXPLAIN " + breakdown_sql(options)
    parameters = query_parameters(None, None)
    with open_store(directory) as store:
        create_schema(store)
        create_calls(store, options)
        store.query(statement, parameters, readonly=True)  # the engine's first-use costs
        return median_cpu_ms(lambda: store.query(statement, parameters, readonly=True))


def main() -> int:
    loop = median_cpu_ms(python_loop)
    try:
        with tempfile.TemporaryDirectory(prefix="grpc-overhead-machine-speed-") as directory:
            analysis = analysis_ms(directory)
    except Exception as error:  # a line about the machine must not read as a failed test
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        print(f"machine speed: the engine's part failed ({first}); Python loop {loop:.0f} ms")
        return 1
    load = os.getloadavg()[0]
    print(
        f"machine speed: Python loop {loop:.0f} ms, engine analysis {analysis:.0f} ms"
        f" (CPU, medians of {REPEATS}); load average {load:.2f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Findings whose cause is a process's own CPU: a busy client, a busy server, encoding.

* ``client_busy``: a client process with two threads burning CPU (``load
  --busy-threads 2``); cure: the same client without them. The service and the
  client run on separate CPUs (``saturation.split_cpus``), so the busy threads
  take the GIL from the client's calling thread (the cause) and never CPU from
  the server. The estimate is a lower bound: ``CLIENT_DISPATCH_LIMIT``. Two
  threads, not one: with one (a single 5 ms switch interval to wait) the probe
  read 0.4-0.9 ms of a 6 ms saving at p50 (under client_busy's 500 µs) and
  network_latency ranked first in 3 runs of 3. With two, client_busy is found,
  and a network_latency of the same calls gives way to it (the wait it misses
  spills into response_network).
* ``server_cpu_saturated``: a server process with two threads burning CPU
  outside its handlers (``service --busy-threads 2``); cure: the same service
  without them. Every thread of the call's path then waits for the GIL, not
  only the serving thread (server_dispatch): the estimate is a lower bound
  (``SERVER_DISPATCH_LIMIT``), and the handler thread's wait reads as pool_wait
  (server_pool_saturated may rank above).
* ``serialization_cost``: requests of one message per entity (``--encoding
  repeated``, 500 entities x 16 features) on protobuf's pure-Python runtime,
  on both sides; cure: the same matrix as one packed float32 blob (``--encoding
  packed``), the action the kind recommends, on the same runtime. With the
  default upb runtime parsing is lazy: the repeated encoding's cost is paid
  where the handler reads the entities (processing, 17 ms of 19 ms with 2,000
  x 32), and the four (de)serialization phases stay under the kind's 10 %.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from harness.ground_truth.findings.common import SMALL, calls, cause_and_cure
from harness.ground_truth.findings.result import Plan
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile
from harness.ground_truth.saturation import on_cpus, split_cpus

BUSY_THREADS = "2"
#: A runtime whose (de)serialization is eager, so the encoding's cost is in its phases.
PURE_PYTHON_PROTOBUF = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
MANY_MESSAGES = ("--entities", "500", "--features", "16")  # ~36 KB, 500 Entity messages

CLIENT_DISPATCH_LIMIT = (
    "client_dispatch is the client's lag probe's estimate of the typical GIL wait, not each "
    "call's; the rest of the busy client's wait stays in response_network (docs/reference.md, "
    "client_dispatch): 8 reduced runs estimated 22-49 % of the measured saving (2.7-6.6 ms of "
    "10.2-15.2 ms)"
)
SERVER_DISPATCH_LIMIT = (
    "the busy threads hold the GIL against every thread of the call's path: server_dispatch "
    "is the serving thread's wait only; the handler thread's wait for the GIL (server_queue, "
    "read as pool_wait) and the handler's own re-acquisitions (processing) go too when the "
    "threads do: 7 reduced runs estimated 19-38 % of the measured saving (5.1-24.3 ms of "
    "26-76 ms); one run's p50s grew by 17.0 ms in server_dispatch, 19.4 ms in server_queue "
    "and 15.8 ms in processing"
)


def client_busy(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    count = str(calls(profile))
    server_cpus, client_cpus = split_cpus()
    with contextlib.ExitStack() as stack:
        with on_cpus(server_cpus):
            service = stack.enter_context(pipeline.service("--workers", "4"))
        with on_cpus(client_cpus):
            measured = cause_and_cure(
                pipeline,
                profile,
                {
                    run: (
                        service.target,
                        "--calls",
                        count,
                        "--concurrency",
                        "1",
                        "--busy-threads",
                        threads,
                        *SMALL,
                    )
                    for run, threads in (
                        ("busy-client-cause", BUSY_THREADS),
                        ("busy-client-cure", "0"),
                    )
                },
            )
    return Plan(
        "client_busy",
        "client_busy",
        "busy-client-cause",
        f"{BUSY_THREADS} threads burning CPU in the client process (its own CPU)",
        measured,
        cure="the same client without them",
        limit=CLIENT_DISPATCH_LIMIT,
    )


def server_cpu_saturated(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    count = str(calls(profile, 30, 80))
    with (
        pipeline.service("--workers", "4", "--busy-threads", BUSY_THREADS) as busy,
        pipeline.service("--workers", "4") as idle,
    ):
        measured = cause_and_cure(
            pipeline,
            profile,
            {
                run: (service.target, "--calls", count, "--concurrency", "1", *SMALL)
                for run, service in (("busy-server-cause", busy), ("busy-server-cure", idle))
            },
        )
    return Plan(
        "server_cpu_saturated",
        "server_cpu_saturated",
        "busy-server-cause",
        f"{BUSY_THREADS} threads burning CPU in the server process outside its handlers",
        measured,
        cure="the same service without them",
        limit=SERVER_DISPATCH_LIMIT,
        ranks_below=("server_pool_saturated",),
    )


def serialization_cost(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    count = str(calls(profile, 20, 50))
    # Three rounds even reduced: the pure-Python runtime's calls are CPU-bound, and a round
    # on a busier machine (other processes of the suite) moves their p50 by tens of percent.
    profile = dataclasses.replace(profile, rounds=max(profile.rounds, 3))
    with pipeline.service("--workers", "4", env=PURE_PYTHON_PROTOBUF) as service:
        measured = cause_and_cure(
            pipeline,
            profile,
            {
                run: (
                    service.target,
                    "--calls",
                    count,
                    "--concurrency",
                    "1",
                    *MANY_MESSAGES,
                    "--encoding",
                    encoding,
                )
                for run, encoding in (("encoding-cause", "repeated"), ("encoding-cure", "packed"))
            },
            env=PURE_PYTHON_PROTOBUF,
        )
    return Plan(
        "serialization_cost",
        "serialization_cost",
        "encoding-cause",
        "500 Entity messages per request (--encoding repeated), pure-Python protobuf",
        measured,
        cure="the same matrix as one packed float32 blob (--encoding packed), same runtime",
    )


SCENARIOS = {
    "client_busy": client_busy,
    "server_cpu_saturated": server_cpu_saturated,
    "serialization_cost": serialization_cost,
}

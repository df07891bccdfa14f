"""Findings whose cause is a wait inside a process: a pool, work after the answer, a connection.

* ``server_pool_saturated``: the prediction service with one handler thread and
  a 4 ms model wait, four closed-loop callers; cure: eight threads (the action's
  ``max_workers``), same callers.
* ``post_processing``: a handler that calls ``mark_predictions_made()`` and then
  sleeps 6 ms (DoorDash's slow logging call); cure: the same server without it.
* ``server_interceptors``: a user's interceptor sleeping 6 ms after the handler
  returned; cure: no interceptor.
* ``connection_setup``: a client opening a new TLS channel per call; cure: the
  warm channel, each warm call interleaved with a cold one (``connect_client``).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from harness.ground_truth.connect import run_connect_client
from harness.ground_truth.findings.common import SMALL, calls, cause_and_cure, rounds
from harness.ground_truth.findings.result import Plan
from harness.ground_truth.interceptors import Case, InterceptorServer
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile

SLEEP_MS = 6.0


def server_pool_saturated(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    model = ("--model-wait-ms", "4")
    count = str(calls(profile))
    with (
        pipeline.service("--workers", "1", *model) as starved,
        pipeline.service("--workers", "8", *model) as cured,
    ):
        measured = cause_and_cure(
            pipeline,
            profile,
            {
                run: (service.target, "--calls", count, "--concurrency", "4", *SMALL)
                for run, service in (("pool-cause", starved), ("pool-cure", cured))
            },
        )
    return Plan(
        "server_pool_saturated",
        "server_pool_saturated",
        "pool-cause",
        "1 handler thread, a 4 ms model wait, 4 closed-loop callers",
        measured,
        cure="8 handler threads (grpc.server(ThreadPoolExecutor(max_workers=8)))",
    )


def _around_handler(
    pipeline: Pipeline, workdir: Path, profile: Profile, kind: str, name: str
) -> tuple[float, dict]:
    """The measured saving of a ``kind`` sleep next to the handler, against a baseline server."""
    env = pipeline.service_env() | {
        "PYTHONPATH": str(Path(__file__).resolve().parents[3]),
        "OTEL_EXPORTER_OTLP_TIMEOUT": "10",
    }
    count = str(calls(profile))
    with (
        InterceptorServer(Case(kind, SLEEP_MS, False), workdir / "cause.json", env) as cause,
        InterceptorServer(Case("baseline", 0.0, False), workdir / "cure.json", env) as cure,
    ):
        measured = cause_and_cure(
            pipeline,
            profile,
            {
                run: (server.target, "--calls", count, "--concurrency", "1", *SMALL)
                for run, server in ((f"{name}-cause", cause), (f"{name}-cure", cure))
            },
        )
    slept = statistics.median(cause.slept_us())
    return measured, {"slept_p50_us": round(slept, 1)}


def post_processing(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    measured, observed = _around_handler(pipeline, workdir, profile, "mark", "post")
    return Plan(
        "post_processing",
        "post_processing",
        "post-cause",
        f"the handler sleeps {SLEEP_MS:g} ms after mark_predictions_made()",
        measured,
        cure="the same server without the sleep",
        observations=observed,
    )


def server_interceptors(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    measured, observed = _around_handler(pipeline, workdir, profile, "after", "intercept")
    return Plan(
        "server_interceptors",
        "server_interceptors",
        "intercept-cause",
        f"a user's ServerInterceptor sleeps {SLEEP_MS:g} ms after the handler",
        measured,
        cure="the same server without the interceptor",
        observations=observed,
    )


def connection_setup(pipeline: Pipeline, workdir: Path, profile: Profile) -> Plan:
    with pipeline.service("--workers", "4", "--tls") as tls:
        spec = {
            "targets": {"tls": [tls.target, str(tls.tls_ca)]},
            "rounds": rounds(profile),
            "calls": calls(profile, 25, 60),
            "late_calls": 0,
            "delay_s": 0,
        }
        timings = run_connect_client(pipeline, spec)
    # Each cold call against the warm call made just before it (client clock).
    paired = [c - w for c, w in zip(timings["cold"]["tls"], timings["warm"]["tls"], strict=True)]
    return Plan(
        "connection_setup",
        "connection_setup",
        "connect-cold-tls",
        "a new TLS channel for every call",
        statistics.median(paired),
        cure="one channel, connected and reused (each warm call interleaved with a cold one)",
    )


SCENARIOS = {
    "server_pool_saturated": server_pool_saturated,
    "post_processing": post_processing,
    "server_interceptors": server_interceptors,
    "connection_setup": connection_setup,
}

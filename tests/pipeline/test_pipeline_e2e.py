"""The whole path as users run it: service + load -> real collector -> intake -> chDB -> report.

Every process is real and started the way the README says; the store is read
only after ``serve`` stopped, since a chDB directory belongs to one process.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpc_overhead.analyzer.result_columns import OPTIONAL_PHASES
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness.ground_truth.pipeline import ServeProcess, report, through_collector

pytestmark = pytest.mark.e2e

PHASES = [
    "client_serialize",
    "request_network",
    "server_queue",
    "request_deserialize",
    "processing",
    "response_serialize",
    "response_network",
    "client_deserialize",
    "total",
    "server_residence",
    "network_overhead",
    "unattributed",
]
CALLS = 40
#: The narrowest request gap in which both of a budget's candidates can fit. The right one
#: lies inside the gap and the other 10 ms from it, and a candidate may lie 1.5 ms outside
#: the gap (5 ms more below it after a connection wait): 10 - 1.5 - 5 ms.
AMBIGUOUS_GAP_US = 3_500


def sql(store, statement: str) -> list[dict]:
    """Rows of ``grpc-overhead sql`` on a stopped store."""
    command = [sys.executable, "-m", "grpc_overhead", "sql", "--store", str(store)]
    done = subprocess.run(
        [*command, "--format", "json", statement],
        capture_output=True,
        text=True,
        timeout=60,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_service_to_report_through_the_real_collector(tmp_path):
    store = tmp_path / "store"
    with through_collector(store) as collector_port:
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}
        service_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
        with ServiceProcess(["--workers", "2", "--model-cost-ms", "2"], env=service_env) as svc:
            result = run_load(
                "--target",
                svc.target,
                "--calls",
                str(CALLS),
                "--concurrency",
                "2",
                "--entities",
                "50",
                "--features",
                "8",
                "--run-id",
                "pipeline-e2e",
                "--json",
                env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
            )
            assert result.returncode == 0, result.stderr
    # Leaving the block stopped the collector with SIGTERM (it flushed to the intake), then serve.

    body = report(store, "--run", "pipeline-e2e")
    assert body["calls"] == CALLS
    [method] = [m for m in body["methods"] if m["method"] == "Predict"]
    assert method["calls"] == CALLS
    for phase in PHASES:
        assert phase in method["phases"], phase
        assert set(method["phases"][phase]) >= {"p50_us", "p90_us", "p99_us", "mean_us"}
    phases = {name: values["mean_us"] for name, values in method["phases"].items()}
    consecutive = [
        "client_serialize",
        "client_connect",
        "request_network",
        "server_dispatch",
        "server_queue",
        "request_deserialize",
        "server_interceptors",
        "processing",
        "post_processing",
        "response_serialize",
        "response_network",
        "client_dispatch",
        "client_deserialize",
    ]
    # The load generator's calls carry deadlines: the dispatch wait is measured for each;
    # our client records its own waits (connection, wake-up lag) for each too; the
    # service's servicer methods are timed innermost (the interceptor chain around them is
    # measured) and Predict marks when its model scored (post_processing).
    for optional in OPTIONAL_PHASES:
        if optional != "server_dispatch":
            assert method["phases"][optional]["calls"] == CALLS, optional
    # server_dispatch comes from the deadline budgets. The load's 10 s deadline travels in
    # 10 ms steps, so a budget near a step gives two candidates 10 ms apart, and a call
    # whose request stalled long enough for both to fit has no estimate, by design
    # (analyzer/dispatch.py): a busy machine stalled one 256 ms. Every other call has one.
    stalled = sql(
        store,
        "SELECT request_network_us FROM grpc_call_phases"
        " WHERE run_id = 'pipeline-e2e' AND server_dispatch_us IS NULL",
    )
    assert method["phases"]["server_dispatch"]["calls"] == CALLS - len(stalled)
    assert all(row["request_network_us"] >= AMBIGUOUS_GAP_US for row in stalled), stalled
    # Means are linear: the phases add up to the total, with unattributed shown.
    assert sum(phases[p] for p in consecutive) + phases["unattributed"] == pytest.approx(
        phases["total"], abs=1.0
    )
    assert phases["processing"] >= 2_000  # --model-cost-ms 2
    # One host: one clock domain, offset exactly zero.
    for offset in body["clock_offsets"]:
        if offset["client_host"] == offset["server_host"]:
            assert offset["offset_us"] == 0 and offset["uncertainty_us"] == 0


def test_serve_assembles_calls_as_spans_arrive(tmp_path):
    """While serve runs, its view assembles calls: the store has grpc_calls rows without any
    report having backfilled them (what the app's freshness relies on)."""
    store, intake_port = tmp_path / "store", free_port()
    serve = ServeProcess(store, intake_port)
    try:
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{intake_port}"}
        env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
        with ServiceProcess(["--workers", "2"], env=env) as service:
            result = run_load(
                "--target",
                service.target,
                "--calls",
                "10",
                "--run-id",
                "live",
                env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
            )
            assert result.returncode == 0, result.stderr
    finally:
        serve.stop()
    assert sql(
        store,
        "SELECT count() AS calls FROM (SELECT max(client_start_ns) AS c, max(server_start_ns) "
        "AS s FROM grpc_calls GROUP BY TraceId, ClientSpanId) WHERE c > 0 AND s > 0",
    ) == [{"calls": 10}]

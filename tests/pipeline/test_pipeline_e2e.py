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
        assert method["phases"][optional]["calls"] == CALLS, optional
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
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "sql",
            "--store",
            str(store),
            "--format",
            "json",
            "SELECT count() AS calls FROM (SELECT max(client_start_ns) AS c, max(server_start_ns) "
            "AS s FROM grpc_calls GROUP BY TraceId, ClientSpanId) WHERE c > 0 AND s > 0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"calls": 10}]

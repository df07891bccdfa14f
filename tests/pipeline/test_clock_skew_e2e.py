"""A server whose clock is skewed (libfaketime), declaring itself another host, as a real
remote server would: the analyzer estimates the offset within its uncertainty and the
corrected one-way phases match an unskewed server's; their sum is exact either way."""

from __future__ import annotations

import socket

import pytest

from grpc_overhead.collector.runner import CollectorProcess
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness.ground_truth.pipeline import ServeProcess, libfaketime, report

pytestmark = pytest.mark.e2e
ROUNDS, CALLS_PER_ROUND = 3, 20
CALLS = ROUNDS * CALLS_PER_ROUND


def run_calls(target: str, run_id: str, endpoint: dict) -> None:
    result = run_load(
        "--target",
        target,
        "--calls",
        str(CALLS_PER_ROUND),
        "--concurrency",
        "1",
        "--entities",
        "20",
        "--features",
        "8",
        "--run-id",
        run_id,
        "--json",
        env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
    )
    assert result.returncode == 0, result.stderr


def phase(body: dict, name: str) -> float:
    [method] = [m for m in body["methods"] if m["method"] == "Predict"]
    return method["phases"][name]["p50_us"]


@pytest.mark.parametrize("skew_s", [0.040, -0.030], ids=["server-ahead-40ms", "server-behind-30ms"])
def test_skewed_server_clock_is_estimated_and_corrected(tmp_path, skew_s):
    store = tmp_path / "store"
    intake_port, collector_port = free_port(), free_port()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}
    serve = ServeProcess(store, intake_port)
    try:
        intake = f"127.0.0.1:{intake_port}"
        with CollectorProcess(
            "embedded", otlp_port=collector_port, intake=intake, health_port=free_port()
        ):
            plain_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
            skewed_env = offline_env(
                OTEL_SERVICE_NAME="predictor",
                OTEL_RESOURCE_ATTRIBUTES="host.name=skewed-host",
                LD_PRELOAD=libfaketime(),
                FAKETIME=f"{skew_s:+.3f}",
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                FAKETIME_NO_CACHE="1",
                **endpoint,
            )
            with (
                ServiceProcess(["--workers", "2"], env=plain_env) as plain,
                ServiceProcess(["--workers", "2"], env=skewed_env) as skewed,
            ):
                # Interleaved rounds: machine noise hits both servers alike.
                for _ in range(ROUNDS):
                    run_calls(plain.target, "plain", endpoint)
                    run_calls(skewed.target, "skewed", endpoint)
    finally:
        serve.stop()

    plain_body, skewed_body = report(store, "--run", "plain"), report(store, "--run", "skewed")
    assert plain_body["calls"] == skewed_body["calls"] == CALLS
    [offset] = [o for o in skewed_body["clock_offsets"] if o["server_host"] == "skewed-host"]
    assert offset["calls"] == CALLS  # every call has both halves and causal timestamps
    assert offset["client_host"] == socket.gethostname()
    truth_us = skew_s * 1e6
    print(f"skew {truth_us:+.0f} us: estimated {offset}; calls {skewed_body['calls']}")  # -s
    assert abs(offset["offset_us"] - truth_us) <= offset["uncertainty_us"] + 50, offset
    assert 0 < offset["uncertainty_us"] < 5_000  # half a loopback round trip

    # Raw one-way phases carry the skew; corrected ones match the unskewed server's.
    raw_request = phase(skewed_body, "request_network_raw")
    assert abs(raw_request - phase(plain_body, "request_network_raw") - truth_us) < 5_000
    # Plus what p50s of two interleaved runs differ by on a shared machine; an uncorrected
    # value would be off by the whole skew (tens of milliseconds).
    tolerance = offset["uncertainty_us"] + 1_500
    for name in ("request_network", "response_network"):
        corrected = phase(skewed_body, f"{name}_corrected")
        assert abs(corrected - phase(plain_body, name)) <= tolerance, name
        # The headline is the best estimate: the corrected value, not the raw one.
        assert phase(skewed_body, name) == corrected, name

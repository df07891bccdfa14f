"""All four call shapes through the real path (service + load -> collector -> serve -> chDB):
no phase of any call is negative, in ``grpc_call_phases``, in ``report --format json`` and
in ``grpc_message_phases``. One host, so one clock: a negative value would be an
event-order bug, not a measurement (issue 21).

The prediction service has every shape: Predict (unary), PredictUpload (client
streaming), PredictChunks (server streaming), PredictStream (bidi).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grpc_overhead.analyzer.result_columns import STREAM_PHASES
from grpc_overhead.analyzer.shapes import NULL_FOR_STREAMS
from grpc_overhead.processes import ServiceProcess, offline_env, run_load
from harness.ground_truth.pipeline import report, through_collector

pytestmark = pytest.mark.e2e

CALLS = 16
#: (load mode, method, shape, extra load arguments): 8 requests / 8 responses per stream.
SHAPES = (
    ("unary", "Predict", "unary", ()),
    ("upload", "PredictUpload", "client_streaming", ("--chunk-entities", "8")),
    ("chunks", "PredictChunks", "server_streaming", ("--chunk-entities", "8")),
    ("stream", "PredictStream", "bidi_streaming", ("--stream-messages", "8")),
)


def sql_rows(store, query: str) -> list[dict]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "sql",
            "--store",
            str(store),
            f"{query} FORMAT JSONEachRow",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def negatives(row: dict, skip: tuple[str, ...] = ("clock_offset_us",)) -> dict:
    return {
        key: value
        for key, value in row.items()
        if key.endswith("_us") and key not in skip and value is not None and value < 0
    }


@pytest.fixture(scope="module", params=["sync", "aio"])
def store(request, tmp_path_factory):
    """One store per server kind: the sync ``grpc.server`` and ``grpc.aio`` (``--aio``)."""
    server = ["--aio"] if request.param == "aio" else []
    store = tmp_path_factory.mktemp(f"shapes-{request.param}") / "store"
    with through_collector(store) as collector_port:
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}
        service_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
        arguments = ["--workers", "4", "--model-cost-ms", "1", *server]
        with ServiceProcess(arguments, env=service_env) as svc:
            for mode, _, _, extra in SHAPES:
                result = run_load(
                    "--target",
                    svc.target,
                    "--calls",
                    str(CALLS),
                    "--concurrency",
                    "2",
                    "--mode",
                    mode,
                    "--entities",
                    "64",
                    "--features",
                    "8",
                    *extra,
                    "--run-id",
                    f"shape-{mode}",
                    "--json",
                    env=offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint),
                )
                assert result.returncode == 0, result.stderr
    return store


def test_no_call_of_any_shape_has_a_negative_phase(store):
    rows = sql_rows(store, "SELECT * FROM grpc_call_phases")
    by_method = {
        method: [r for r in rows if r["rpc_method"] == method] for _, method, _, _ in SHAPES
    }
    for _, method, shape, _ in SHAPES:
        calls = by_method[method]
        assert len(calls) == CALLS, method
        assert {r["call_shape"] for r in calls} == {shape}
        for row in calls:
            assert not negatives(row), (method, negatives(row))
            if shape == "unary":
                assert all(row[f"{p}_us"] is None for p in STREAM_PHASES)
            else:
                # What a stream is described by is there; what assumes one message each
                # way is NULL, never a misleading figure.
                assert all(row[f"{p}_us"] is not None for p in STREAM_PHASES), row
                assert all(row[f"{p}_us"] is None for p in NULL_FOR_STREAMS), row
                assert row["request_messages"] > 1 or row["response_messages"] > 1


def test_no_message_has_a_negative_phase(store):
    rows = sql_rows(store, "SELECT * FROM grpc_message_phases")
    for _, method, shape, _ in SHAPES:
        messages = [r for r in rows if r["rpc_method"] == method]
        calls = {(r["trace_id"], r["client_span_id"]) for r in messages}
        assert len(calls) == CALLS, method
        for row in messages:
            assert row["call_shape"] == shape
            assert not negatives(row), (method, negatives(row))
            assert None not in (row["serialize_us"], row["transfer_us"], row["deserialize_us"])
        requests = [r for r in messages if r["direction"] == "request"]
        responses = [r for r in messages if r["direction"] == "response"]
        per_call = {"requests": len(requests) / CALLS, "responses": len(responses) / CALLS}
        expected = {
            "unary": (1, 1),
            "client_streaming": (8, 1),
            "server_streaming": (1, 8),
            "bidi_streaming": (8, 8),
        }[shape]
        assert (per_call["requests"], per_call["responses"]) == expected, method


def test_report_says_each_shape_and_shows_no_negative_phase(store):
    body = report(store)
    methods = {m["method"]: m for m in body["methods"]}
    for _, method, shape, _ in SHAPES:
        found = methods[method]
        assert found["shape"] == shape
        for phase, values in found["phases"].items():
            for statistic in ("p50_us", "p90_us", "p99_us", "mean_us"):
                value = values[statistic]
                assert value is None or value >= 0, (method, phase, statistic, value)
        undefined = set(found["undefined_for_shape"])
        assert all(found["phases"][p]["calls"] == 0 for p in undefined), method
        if shape != "unary":
            assert set(NULL_FOR_STREAMS) <= undefined
            assert found["phases"]["stream_duration"]["calls"] == CALLS


def test_the_report_table_says_what_a_stream_leaves_undefined(store):
    done = subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "report", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the table wraps long titles and notes
    for _, method, shape, _ in SHAPES[1:]:
        assert f"{method}: {CALLS} calls ({shape}," in text
    assert text.count("a stream: the phases that assume one message each way") == 3

"""The load generator's engine against an in-process server (no subprocesses)."""

from __future__ import annotations

import pytest

from grpc_overhead.load_generator.runner import ConnectError, LoadConfig, Run, run_blocking
from grpc_overhead.load_generator.workload import MODES, Workload, WorkloadSpec
from grpc_overhead.processes import free_port

pytestmark = pytest.mark.unit


def _config(target: str, pipeline, **kw) -> LoadConfig:
    workload = kw.pop(
        "workload",
        WorkloadSpec(entities=30, features=8, stream_messages=2, batch_size=2, chunk_entities=16),
    )
    return LoadConfig(
        targets=[target], run_id="unit-run", workload=workload, pipeline=pipeline, **kw
    )


@pytest.mark.parametrize("mode", MODES)
def test_closed_loop_exact_call_count(target, pipeline, mode: str) -> None:
    spec = WorkloadSpec(
        mode=mode, entities=30, features=8, stream_messages=2, batch_size=2, chunk_entities=16
    )
    summary = run_blocking(
        _config(target, pipeline, calls=13, concurrency=3, channels=2, workload=spec)
    )
    assert summary["calls"] == 13 and summary["ok"] == 13, summary["error_messages"]
    assert summary["predictions"] == 13 * Workload(spec).predictions_per_call
    assert summary["server_instances"] == {"load-tests": 13}
    assert (
        summary["config"]["method"]
        == {
            "unary": "Predict",
            "stream": "PredictStream",
            "batch": "PredictBatch",
            "chunks": "PredictChunks",
            "upload": "PredictUpload",
        }[mode]
    )


def test_client_spans_carry_call_attributes(target, pipeline, exporter) -> None:
    assert pipeline.force_flush()  # earlier tests' spans
    exporter.clear()
    spec = WorkloadSpec(mode="unary", entities=5, features=4, encoding="packed", codec="lz4")
    run_blocking(_config(target, pipeline, calls=4, concurrency=2, workload=spec))
    assert pipeline.force_flush()
    clients = [s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"]
    assert len(clients) == 4
    for span in clients:
        assert span.attributes["grpc_overhead.run_id"] == "unit-run"
        assert span.attributes["grpc_overhead.payload.codec"] == "lz4"
        assert span.attributes["grpc_overhead.load.mode"] == "unary"


def test_open_loop_by_calls(target, pipeline) -> None:
    summary = run_blocking(_config(target, pipeline, calls=15, rps=200.0, concurrency=4))
    assert summary["calls"] == 15 and summary["ok"] == 15
    assert summary["open_loop"]["rps_target"] == 200.0
    assert 0 <= summary["open_loop"]["late_calls"] <= 15


def test_duration_bound(target, pipeline) -> None:
    summary = run_blocking(_config(target, pipeline, calls=None, duration_s=0.5, concurrency=2))
    assert summary["calls"] > 0 and 0.45 <= summary["duration_s"] < 3


def test_errors_are_data(target, pipeline) -> None:
    spec = WorkloadSpec(entities=400, features=1024)  # 1.6 MB requests over a 1 MB limit
    summary = run_blocking(
        _config(target, pipeline, calls=3, concurrency=1, max_message_mb=1, workload=spec)
    )
    assert summary["calls"] == 3 and summary["errors"] == 3
    assert list(summary["status_codes"]) == ["RESOURCE_EXHAUSTED"]


def test_unreachable_target(pipeline) -> None:
    run = Run(_config(f"127.0.0.1:{free_port()}", pipeline, connect_timeout_s=0.5))
    try:
        with pytest.raises(ConnectError, match=r"cannot connect to 127\.0\.0\.1:\d+ within 0\.5 s"):
            run.connect()
    finally:
        run.close()

"""The shipped configs' on-disk sending queue: what the collector acknowledged survives kill -9."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

from grpc_overhead.collector import CollectorProcess
from grpc_overhead.collector.runner import ENV_STORAGE, default_storage_dir

REQUESTS, SPANS_PER_REQUEST = 40, 50


def _request(number: int) -> trace_service_pb2.ExportTraceServiceRequest:
    spans = [
        trace_pb2.Span(
            trace_id=number.to_bytes(8, "big") * 2,
            span_id=(number * SPANS_PER_REQUEST + index + 1).to_bytes(8, "big"),
            name="prediction.Predictor/Predict",
            kind=trace_pb2.Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=1_700_000_000_000_000_000 + index,
            end_time_unix_nano=1_700_000_000_000_100_000 + index,
        )
        for index in range(SPANS_PER_REQUEST)
    ]
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[trace_pb2.ResourceSpans(scope_spans=[trace_pb2.ScopeSpans(spans=spans)])]
    )


@pytest.mark.e2e
def test_spans_acknowledged_before_kill_9_are_sent_after_restart(
    collector_bin: Path, free_port: Callable[[], int], start_otlp_sink, tmp_path: Path
) -> None:
    """The intake is down, the collector acknowledges 2,000 spans and is killed with SIGKILL:
    restarted on the same queue directory (created here by the runner), it sends them all."""
    intake_port, otlp_port = free_port(), free_port()
    storage = tmp_path / "not" / "yet" / "there"
    settings = dict(
        binary=collector_bin,
        otlp_port=otlp_port,
        intake=f"127.0.0.1:{intake_port}",
        env={ENV_STORAGE: str(storage)},
    )
    first = CollectorProcess("embedded", health_port=free_port(), **settings)  # type: ignore[arg-type]
    with first:
        assert storage.is_dir()
        with grpc.insecure_channel(first.otlp_endpoint) as channel:
            stub = trace_service_pb2_grpc.TraceServiceStub(channel)
            for number in range(REQUESTS):
                stub.Export(_request(number), timeout=10)  # acknowledged: OK
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)

    sink = start_otlp_sink(intake_port)
    with CollectorProcess("embedded", health_port=free_port(), **settings):  # type: ignore[arg-type]
        received = sink.spans(REQUESTS * SPANS_PER_REQUEST, timeout=60)
    span_ids = {span.span_id for _, span in received}  # type: ignore[attr-defined]
    assert len(span_ids) == REQUESTS * SPANS_PER_REQUEST


@pytest.mark.unit
def test_default_queue_directory_is_per_config_and_port(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv(ENV_STORAGE, raising=False)
    collector = CollectorProcess("clickhouse", otlp_port=4400)
    assert collector.storage_dir == tmp_path / "grpc-overhead" / "collector-clickhouse-4400"
    assert collector.storage_dir == default_storage_dir(collector.config, 4400)
    assert collector.env_overrides[ENV_STORAGE] == str(collector.storage_dir)

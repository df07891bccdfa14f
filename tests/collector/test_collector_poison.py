"""Poison sent through the collector: the intake rejects the span, the collector moves on.

Issue 10: a poison batch was answered UNAVAILABLE, retried by the collector
for 120 s and dropped, taking the innocent spans batched with it along.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.collector import CollectorProcess
from tests.analyzer.otlp_raw import key_value, nested_array, raw_request, raw_span

pytestmark = pytest.mark.e2e

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def test_a_poison_span_does_not_hold_up_its_batch(
    tmp_path: Path, collector_bin: Path, free_port: Callable[[], int]
) -> None:
    with (
        open_store(tmp_path / "store") as store,
        Intake(store, IntakeConfig(port=0)) as intake,
        CollectorProcess(
            "embedded",
            binary=collector_bin,
            otlp_port=free_port(),
            health_port=free_port(),
            intake=f"127.0.0.1:{intake.port}",
        ) as collector,
    ):
        with grpc.insecure_channel(collector.otlp_endpoint) as channel:
            export = channel.unary_unary(
                EXPORT,
                request_serializer=None,
                response_deserializer=ExportTraceServiceResponse.FromString,
            )
            poison = raw_span(1, key_value(b"deep", nested_array(40)))
            export(raw_request(poison, raw_span(2)), timeout=10)
            export(raw_request(raw_span(3)), timeout=10)  # another sender's, same batch
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and intake.stats().spans_inserted < 2:
            time.sleep(0.1)
        stats = intake.stats()
        logs = collector.logs()
    assert stats.spans_inserted == 2 and stats.spans_rejected == 1
    assert stats.requests_refused == 0 and stats.failed_batches == 0
    assert "retry" not in logs.lower(), logs[-2000:]

"""The embedded config for real: SDK -> collector -> OTLP/gRPC intake stand-in."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from grpc_overhead.collector import CollectorProcess, CollectorStartError

SPAN_NAME = "prediction.Predictor/Predict"


def _send_one_span(otlp_endpoint: str) -> str:
    """Export one client span the way the instrumented service does; return its trace id."""
    provider = TracerProvider(
        resource=Resource.create({"service.name": "collector-e2e", "host.name": "test-host"})
    )
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True, timeout=10))
    )
    tracer = provider.get_tracer("grpc_overhead.tests.collector")
    with tracer.start_as_current_span(
        SPAN_NAME,
        kind=SpanKind.CLIENT,
        attributes={
            "rpc.system": "grpc",
            "rpc.service": "prediction.Predictor",
            "rpc.method": "Predict",
            "rpc.grpc.status_code": 0,
            "message.uncompressed_size": 123456,
        },
    ) as span:
        span.add_event("outboundMessage", {"message.id": 1})
        span.add_event("outboundMessageSent", {"message.size": 123456})
        trace_id = format(span.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


def _attributes(key_values: object) -> dict[str, object]:
    result: dict[str, object] = {}
    for kv in key_values:  # type: ignore[attr-defined]
        kind = kv.value.WhichOneof("value")
        result[kv.key] = getattr(kv.value, kind) if kind else None
    return result


@pytest.mark.e2e
def test_span_travels_through_embedded_collector(
    collector_bin: Path, free_port: Callable[[], int], otlp_sink
) -> None:
    with CollectorProcess(
        "embedded",
        binary=collector_bin,
        otlp_port=free_port(),
        health_port=free_port(),
        intake=otlp_sink.endpoint,
    ) as collector:
        trace_id = _send_one_span(collector.otlp_endpoint)
        [(resource_spans, span)] = otlp_sink.spans(1, timeout=30)

    assert span.name == SPAN_NAME
    assert span.trace_id.hex() == trace_id
    assert span.kind == span.SPAN_KIND_CLIENT
    attributes = _attributes(span.attributes)
    assert attributes["rpc.system"] == "grpc"
    assert attributes["rpc.method"] == "Predict"
    assert attributes["rpc.grpc.status_code"] == 0
    assert attributes["message.uncompressed_size"] == 123456
    assert [event.name for event in span.events] == ["outboundMessage", "outboundMessageSent"]
    assert _attributes(span.events[1].attributes) == {"message.size": 123456}
    resource = _attributes(resource_spans.resource.attributes)
    assert resource["service.name"] == "collector-e2e"
    assert resource["host.name"] == "test-host"
    assert collector.returncode is not None  # stopped on exit


@pytest.mark.e2e
def test_spans_sent_before_intake_is_up_are_retried(
    collector_bin: Path, free_port: Callable[[], int], start_otlp_sink
) -> None:
    """sending_queue + retry_on_failure: a collector started before the intake loses nothing."""
    intake_port = free_port()
    with CollectorProcess(
        "embedded",
        binary=collector_bin,
        otlp_port=free_port(),
        health_port=free_port(),
        intake=f"127.0.0.1:{intake_port}",
    ) as collector:
        trace_id = _send_one_span(collector.otlp_endpoint)
        # The first export attempt fails (nothing listens yet) and is to be retried.
        deadline = time.monotonic() + 60
        while "Exporting failed" not in collector.logs() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "Will retry" in collector.logs(), collector.logs()
        sink = start_otlp_sink(intake_port)
        [(_, span)] = sink.spans(1, timeout=60)
    assert span.trace_id.hex() == trace_id


@pytest.mark.e2e
def test_two_collectors_run_side_by_side(
    collector_bin: Path, free_port: Callable[[], int], otlp_sink
) -> None:
    """Distinct ports per collector and no fixed telemetry port: no clash."""
    with (
        CollectorProcess(
            "embedded",
            binary=collector_bin,
            otlp_port=free_port(),
            health_port=free_port(),
            intake=otlp_sink.endpoint,
        ) as first,
        CollectorProcess(
            "embedded",
            binary=collector_bin,
            otlp_port=free_port(),
            health_port=free_port(),
            intake=otlp_sink.endpoint,
        ) as second,
    ):
        assert first.returncode is None and second.returncode is None


@pytest.mark.e2e
def test_collector_dying_at_startup_reports_its_stderr(
    collector_bin: Path, free_port: Callable[[], int], otlp_sink
) -> None:
    busy = otlp_sink.port  # the receiver cannot bind a port the sink holds
    collector = CollectorProcess(
        "embedded",
        binary=collector_bin,
        otlp_port=busy,
        health_port=free_port(),
        intake=otlp_sink.endpoint,
        startup_timeout=30,
    )
    with pytest.raises(CollectorStartError) as caught:
        collector.start()
    message = str(caught.value)
    assert "exited with code" in message
    assert "address already in use" in message
    assert collector.returncode is not None


@pytest.mark.e2e
def test_busy_health_port_is_refused_up_front(
    collector_bin: Path, free_port: Callable[[], int], otlp_sink
) -> None:
    with pytest.raises(CollectorStartError, match=r"health port \d+ is already in use"):
        CollectorProcess(
            "embedded",
            binary=collector_bin,
            otlp_port=free_port(),
            health_port=otlp_sink.port,
            intake=otlp_sink.endpoint,
        ).start()


@pytest.mark.unit
def test_sink_queue_is_empty_without_traffic(otlp_sink) -> None:
    with pytest.raises(queue.Empty):
        otlp_sink.spans(1, timeout=0.2)

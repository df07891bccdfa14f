"""Spans from plain opentelemetry-instrumentation-grpc (no transport events), sent by the SDK
straight to our intake, still give total, server duration and the client-server gap."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.grpc import client_interceptor, server_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from grpc_overhead.processes import free_port
from tests.instrumentation import echo_service
from tests.pipeline.test_pipeline_e2e import ServeProcess, report

pytestmark = pytest.mark.e2e
CALLS = 25


def provider(service: str, intake_port: int) -> TracerProvider:
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{intake_port}", insecure=True)
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": service}))
    tracer_provider.add_span_processor(BatchSpanProcessor(exporter))
    return tracer_provider


def test_official_spans_give_total_server_duration_and_gap(tmp_path):
    store, intake_port = tmp_path / "store", free_port()
    serve = ServeProcess(store, intake_port)
    try:
        server_provider = provider("official-server", intake_port)
        client_provider = provider("official-client", intake_port)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2),
            handlers=[echo_service.sync_handlers()],
            interceptors=[server_interceptor(tracer_provider=server_provider)],
        )
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = intercept_channel(
            grpc.insecure_channel(f"127.0.0.1:{port}"),
            client_interceptor(tracer_provider=client_provider),
        )
        echo = echo_service.multicallables(channel)["Echo"]
        for index in range(CALLS):
            echo(BytesValue(value=b"sleep:2" if index % 2 else b"x"))
        channel.close()
        server.stop(1).wait()
        for tracer_provider in (client_provider, server_provider):
            tracer_provider.force_flush()
            tracer_provider.shutdown()
    finally:
        serve.stop()

    body = report(store)
    [method] = [m for m in body["methods"] if m["method"] == "Echo"]
    assert method["calls"] == CALLS
    phases = method["phases"]
    for name in ("total", "server_duration", "client_server_gap"):
        assert phases[name]["p50_us"] is not None and phases[name]["p50_us"] > 0, name
    # The gap is what the client saw minus what the server span covered.
    assert phases["client_server_gap"]["mean_us"] == pytest.approx(
        phases["total"]["mean_us"] - phases["server_duration"]["mean_us"], abs=1.0
    )
    assert phases["server_duration"]["p90_us"] >= 1_500  # half the calls slept 2 ms
    # Without transport events the one-way split is unknown: shown as missing, not as zero.
    assert phases["request_network"]["p50_us"] is None
    assert phases["processing"]["p50_us"] is None

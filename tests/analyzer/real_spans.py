"""Spans from a real instrumented gRPC server and client: ours, and those of
opentelemetry-instrumentation-grpc, for the analyzer tests that must see what the
instrumentation really emits. ``seed`` re-exports both."""

from __future__ import annotations

import time
from typing import Any

# -- real spans from real gRPC calls ------------------------------------------------------------


def real_spans(
    calls: int = 3, *, streams: bool = True, bidi: bool = False, payload: bytes = b"x" * 100
) -> list[Any]:
    """ReadableSpans of real calls: an instrumented echo server and client (ours) on loopback.

    ``calls`` unary calls, plus (``streams``) one server-streaming and one
    client-streaming call, plus (``bidi``) one bidi call of 4 messages each way;
    returns once every span of them was exported.
    """
    from concurrent import futures

    import grpc
    from google.protobuf.wrappers_pb2 import BytesValue
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from grpc_overhead.instrumentation import (
        SpanPipeline,
        instrument_channel,
        instrumented_server,
    )
    from tests.instrumentation import echo_service

    exporter = InMemorySpanExporter()
    pipeline = SpanPipeline(exporter=exporter, export_interval_ms=20)
    server = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=2),
        handlers=[echo_service.sync_handlers()],
        pipeline=pipeline,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"127.0.0.1:{port}"
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    try:
        stubs = echo_service.multicallables(channel)
        # Deadlines as real clients set them: the server's dispatch wait is timed from them.
        for _ in range(calls):
            stubs["Echo"](BytesValue(value=payload), timeout=10)
        expected = 2 * calls
        if streams:
            list(stubs["Split"](BytesValue(value=payload), timeout=10))
            stubs["Join"](iter([BytesValue(value=payload)] * 3), timeout=10)
            expected += 4
        if bidi:
            list(stubs["Chat"](iter([BytesValue(value=payload)] * 4), timeout=10))
            expected += 2
        return _wait_for_spans(pipeline, exporter, expected)
    finally:
        channel.close()
        server.stop(0)
        pipeline.shutdown()


def official_spans(calls: int = 3, payload: bytes = b"x" * 100) -> list[Any]:
    """ReadableSpans from opentelemetry-instrumentation-grpc alone (no events) for real calls."""
    from concurrent import futures

    import grpc
    from google.protobuf.wrappers_pb2 import BytesValue
    from opentelemetry.instrumentation.grpc import client_interceptor, server_interceptor
    from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.instrumentation import echo_service

    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "official", "host.name": "host-o"})
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=2),
        handlers=[echo_service.sync_handlers()],
        interceptors=[server_interceptor(tracer_provider=provider)],
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = intercept_channel(
        grpc.insecure_channel(f"127.0.0.1:{port}"), client_interceptor(tracer_provider=provider)
    )
    try:
        stubs = echo_service.multicallables(channel)
        for _ in range(calls):
            stubs["Echo"](BytesValue(value=payload))
        deadline = time.monotonic() + 10
        while len(exporter.get_finished_spans()) < 2 * calls and time.monotonic() < deadline:
            time.sleep(0.01)
        return list(exporter.get_finished_spans())
    finally:
        channel.close()
        server.stop(0)
        provider.shutdown()


def _wait_for_spans(pipeline: Any, exporter: Any, count: int, timeout_s: float = 10.0) -> list:
    deadline = time.monotonic() + timeout_s
    while True:
        pipeline.force_flush()
        spans = list(exporter.get_finished_spans())
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.01)

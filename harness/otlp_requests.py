"""Realistic OTLP requests (spans shaped like the instrumentation's), made unique cheaply.

What load against an intake sends: ``bench.intake`` (throughput), ``bench.intake_stages``
and ``harness.memory_flood`` (a flood against ``serve``). Each request sent must carry
spans of its own, or the intake rightly stores nothing new: ``unique`` patches the trace
ids of one encoded request in place instead of encoding thousands of spans again."""

from __future__ import annotations

import random
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

EVENTS = (
    "requestCreated",
    "outboundMessage",
    "outboundMessageSent",
    "serverCallStarted",
    "callScheduled",
    "inboundMessage",
    "inboundMessageRead",
    "predictionsMade",
    "clientReceivedResponse",
)


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def realistic_request(spans: int, seed: int) -> bytes:
    rng = random.Random(seed)
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        [
            _kv("service.name", "prediction-client"),
            _kv("host.name", "bench-host"),
            _kv("service.instance.id", "bench-1"),
            _kv("telemetry.sdk.language", "python"),
            _kv("telemetry.sdk.name", "opentelemetry"),
            _kv("telemetry.sdk.version", "1.45.2"),
        ]
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name, scope_spans.scope.version = "grpc_overhead.instrumentation", "0.1.0"
    start = time.time_ns()
    for index in range(spans):
        span = scope_spans.spans.add()
        span.trace_id, span.span_id = rng.randbytes(16), rng.randbytes(8)
        span.parent_span_id = rng.randbytes(8) if index % 2 else b""
        span.name, span.kind = "/prediction.PredictionService/Predict", 3 if index % 2 else 2
        span.start_time_unix_nano = start + index * 1_000
        span.end_time_unix_nano = span.start_time_unix_nano + 11_000_000
        span.attributes.extend(
            [
                _kv("rpc.system", "grpc"),
                _kv("rpc.service", "prediction.PredictionService"),
                _kv("rpc.method", "Predict"),
                _kv("rpc.grpc.status_code", 0),
                _kv("server.address", "127.0.0.1"),
                _kv("server.port", 50051),
                _kv("network.peer.address", "127.0.0.1"),
                _kv("grpc.compression", "gzip"),
                _kv("grpc_overhead.run_id", "bench"),
                _kv("rpc.request.size", 123_456),
                _kv("rpc.response.size", 2_345),
                _kv("grpc_overhead.compression_ratio", 0.25),
            ]
        )
        for offset, name in enumerate(EVENTS):
            event = span.events.add()
            event.time_unix_nano, event.name = span.start_time_unix_nano + offset * 100_000, name
            if name in ("outboundMessageSent", "inboundMessageRead"):
                event.attributes.extend(
                    [
                        _kv("message.uncompressed_size", 123_456),
                        _kv("message.compressed_size", 3_456),
                    ]
                )
    return request.SerializeToString()


def trace_id_offsets(payload: bytes) -> list[int]:
    """Where each span's trace id sits in ``payload`` (for ``unique``)."""
    request = ExportTraceServiceRequest.FromString(payload)
    offsets, position = [], 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                position = payload.find(span.trace_id, position)
                offsets.append(position)
                position += len(span.trace_id)
    return offsets


def unique(payload: bytes, index: int, offsets: list[int]) -> bytes:
    """``payload`` with new spans: each trace id starts with ``index`` (``offsets`` from
    ``trace_id_offsets``), plus a span-less ResourceSpans naming ``index``.

    The intake stores every span once: spans it has already are retries, not new
    rows, so every request sent must carry spans of its own (new trace ids), and
    distinct bytes (the digest of a request it stored already answers a copy).
    Protobuf concatenation merges the extra ResourceSpans into the request.
    """
    patched = bytearray(payload)
    prefix = index.to_bytes(4, "big")
    for offset in offsets:
        patched[offset : offset + 4] = prefix
    resource = Resource(attributes=[_kv("bench.request", index)])
    return (
        bytes(patched)
        + ExportTraceServiceRequest(
            resource_spans=[ResourceSpans(resource=resource)]
        ).SerializeToString()
    )

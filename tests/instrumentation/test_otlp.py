"""Our direct OTLP encoding says exactly what the SDK encoder says for the same spans."""

from __future__ import annotations

import pytest
from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.instrumentation import SpanPipeline
from grpc_overhead.instrumentation.otlp import encode_request, encode_resource
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.spans import SpanBuilder

pytestmark = pytest.mark.unit

RESOURCE = Resource({"service.name": "svc", "host.name": "h1", "process.pid": 42, "x.ratio": 0.5})


@pytest.fixture(scope="module")
def recorder():
    pipeline = SpanPipeline(exporter=InMemorySpanExporter(), resource=RESOURCE)
    yield Recorder(pipeline)
    pipeline.shutdown()


def client_record(recorder) -> CallRecord:
    record = CallRecord(recorder, True, "/pkg.Svc/Get", "unary_unary", 2**127 + 5, 77, 0, 1_000)
    record.event("requestCreated", 1_000)
    record.outbound(1_100, 1_900, b"x" * 300)
    record.received(5_000, 5_600, 120)
    record.peer = "dns:///predictor.internal:50051"
    record.residence_ns = 2_500
    record.run_id = "run-1"
    record.attributes = {
        "grpc_overhead.entities": 200,
        "ratio": 0.25,
        "flag": True,
        "tags": ["a", "b"],
    }
    record.end = 6_000
    return record


def failed_server_record(recorder) -> CallRecord:
    record = CallRecord(recorder, False, "/pkg.Svc/Get", "unary_stream", 9, 78, 77, 2_000)
    record.event("serverCallStarted", 2_000)
    record.event("callScheduled", 2_100)
    record.inbound(2_200, 2_300, 300)
    record.event("predictionsMade", 2_900)
    record.peer = "ipv6:[::1]:41234"
    record.fail(2, "ValueError: bad input", ValueError("bad input"))
    record.compression = "gzip"
    record.end = 3_000
    return record


def normalized(request: ExportTraceServiceRequest) -> dict:
    as_dict = MessageToDict(request)
    for resource_spans in as_dict["resourceSpans"]:
        resource_spans["resource"]["attributes"].sort(key=lambda a: a["key"])
        for scope_spans in resource_spans["scopeSpans"]:
            for span in scope_spans["spans"]:
                span["attributes"].sort(key=lambda a: a["key"])
    return as_dict


def test_direct_encoding_equals_the_sdk_encoder(recorder):
    records = [client_record(recorder), failed_server_record(recorder)]
    for record in records:
        record.finished = True  # not submitted: compared directly
    builder = SpanBuilder(RESOURCE)
    ours = ExportTraceServiceRequest.FromString(encode_request(records, encode_resource(RESOURCE)))
    sdk = encode_spans([builder.build(record) for record in records])
    assert normalized(ours) == normalized(sdk)
    spans = ours.resource_spans[0].scope_spans[0].spans
    assert [event.name for event in spans[0].events][-1] == "inboundMessageRead"
    assert spans[1].status.code == 2 and "bad input" in spans[1].status.message


def ok_records(recorder) -> list[CallRecord]:
    """Successful calls (the encoder's cached fast path), in the shapes it caches apart."""
    client = CallRecord(recorder, True, "/pkg.Svc/Get", "unary_unary", 2**100 + 1, 11, 0, 5_000)
    client.event("requestCreated", 5_000)
    client.outbound(5_100, 5_200, b"y" * 40)
    client.received(9_000, 9_100, 70)
    client.peer = "127.0.0.1:50051"
    client.deadline = 1_000_000_000_000  # a far deadline: a large budget attribute
    client.residence_ns = 3_000
    client.end = 9_200
    server = CallRecord(recorder, False, "/pkg.Svc/Get", "unary_unary", 2**100 + 1, 12, 11, 6_000)
    server.event("serverCallStarted", 6_000)
    server.event("callScheduled", 6_050)
    server.inbound(6_100, 6_200, 40)
    server.event("predictionsMade", 6_300)
    server.compression = "gzip"
    server.outbound(6_400, 6_500, b"z" * 70)  # kept for its exact compressed size
    server.peer = "ipv4:127.0.0.1:41234"
    server.deadline = 5_000  # already past when the call started: a negative budget
    server.residence_ns = 500
    server.run_id = "run-2"
    server.attributes = {"grpc_overhead.entities": 3}
    server.end = 6_500
    return [client, server, client]  # the third reuses what the first cached


def test_the_fast_path_says_what_the_sdk_encoder_says(recorder):
    records = ok_records(recorder)
    for record in records:
        record.finished = True
    builder = SpanBuilder(RESOURCE)
    ours = ExportTraceServiceRequest.FromString(encode_request(records, encode_resource(RESOURCE)))
    sdk = encode_spans([builder.build(record) for record in records])
    assert normalized(ours) == normalized(sdk)
    server = ours.resource_spans[0].scope_spans[0].spans[1]
    budget = {a.key: a.value.int_value for a in server.attributes}
    assert budget["grpc_overhead.deadline_budget_ns"] == -1_000


def test_the_exporter_sends_the_encoded_bytes_to_a_real_receiver(otlp_sink):
    from opentelemetry.sdk.trace.export import SpanExportResult

    from grpc_overhead.instrumentation.otlp import CallRecordOTLPExporter

    sink, port = otlp_sink
    exporter = CallRecordOTLPExporter(endpoint=f"http://127.0.0.1:{port}", insecure=True)
    exporter.set_resource(RESOURCE)
    pipeline = SpanPipeline(exporter=InMemorySpanExporter(), resource=RESOURCE)
    records = ok_records(Recorder(pipeline))
    for record in records:
        record.finished = True
    assert exporter.export(records) is SpanExportResult.SUCCESS
    exporter.shutdown()
    pipeline.shutdown()
    spans = sink.spans()
    assert [span.span_id for _resource, span in spans] == [
        bytes(7) + b"\x0b",
        bytes(7) + b"\x0c",
        bytes(7) + b"\x0b",
    ]
    assert {a.key for a in spans[0][0].attributes} == set(RESOURCE.attributes)


@pytest.mark.parametrize("failed", [False, True], ids=["fast_path", "full_path"])
def test_a_span_never_ends_before_its_last_event(recorder, failed):
    """A handler's thread may record an event just after another thread ended the call
    (grpc.aio with sync handlers): the span ends at that event, in both encoders."""
    record = CallRecord(recorder, False, "/pkg.Svc/Get", "unary_unary", 2**90 + 3, 21, 20, 1_000)
    record.event("serverCallStarted", 1_000)
    record.inbound(1_100, 1_200, 40)
    record.end = 1_500
    record.outbound(1_450, 1_555, b"w" * 30)  # after the end: the late event
    if failed:
        record.fail(13, "late", RuntimeError("late"))
    record.finished = True
    builder = SpanBuilder(RESOURCE)
    ours = ExportTraceServiceRequest.FromString(encode_request([record], encode_resource(RESOURCE)))
    sdk = encode_spans([builder.build(record)])
    assert normalized(ours) == normalized(sdk)
    span = ours.resource_spans[0].scope_spans[0].spans[0]
    offset = span.start_time_unix_nano - 1_000
    assert span.end_time_unix_nano - offset == 1_555
    assert max(event.time_unix_nano for event in span.events) <= span.end_time_unix_nano

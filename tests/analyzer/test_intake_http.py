"""The intake's OTLP/HTTP receiver: real senders in, rows in a real chDB store out.

The same rows whichever way a request comes (gRPC, HTTP protobuf, HTTP JSON, gzip'd or
not), OTLP/JSON as the specification spells it, and every bad body answered the way
the OTLP/HTTP specification says, with nothing stored.
"""

from __future__ import annotations

import gzip
import json

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from grpc_overhead.analyzer.intake import Intake
from grpc_overhead.analyzer.store.base import Store
from harness.fault_load_http import encode
from tests.analyzer.otlp_http import (  # noqa: F401
    JSON,
    PROTOBUF,
    SPAN_ID,
    TRACE_ID,
    count,
    fresh_span_id,
    intake_fixture,
    post,
    running_fixture,
    store_fixture,
)
from tests.analyzer.otlp_requests import (
    python_rows,
    request,
    span,
    stored_rows,
    tricky_request,
)

pytestmark = pytest.mark.e2e


def test_the_sdk_http_exporter_arrives_gzipped_and_acknowledged_means_stored(
    intake: Intake, store: Store
) -> None:
    """The Python SDK's own OTLP/HTTP exporter (protobuf, gzip), as services use it."""
    provider = TracerProvider(resource=Resource.create({"service.name": "http-sdk"}))
    exporter = OTLPSpanExporter(endpoint=intake.http_url, compression=Compression.Gzip)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.intake_http")
    for number in range(5):
        with tracer.start_as_current_span(f"pkg.Svc/M{number}", kind=SpanKind.CLIENT) as current:
            current.set_attribute("rpc.system", "grpc")
            current.add_event("outboundMessageSent", {"message-size": 10 * number})
    provider.shutdown()
    # SimpleSpanProcessor waits for each answer: a 200 means the rows are there now.
    rows = store.query(
        "SELECT SpanName, ServiceName, SpanKind, length(`Events.Name`) AS events "
        "FROM otel_traces ORDER BY SpanName"
    )
    assert rows["SpanName"].tolist() == [f"pkg.Svc/M{n}" for n in range(5)]
    assert set(rows["ServiceName"]) == {"http-sdk"} and set(rows["SpanKind"]) == {"Client"}
    assert rows["events"].tolist() == [1] * 5
    assert intake.stats().spans_accepted == 5


@pytest.mark.parametrize(
    ("json_body", "gzipped"), [(False, False), (False, True), (True, False), (True, True)]
)
def test_every_encoding_stores_the_rows_grpc_would(
    intake: Intake, store: Store, json_body: bool, gzipped: bool
) -> None:
    """Every value type and edge (``tricky_request``): the same rows as the Python mapping,
    which the gRPC path is checked against in test_intake."""
    message = ExportTraceServiceRequest.FromString(tricky_request())
    message.resource_spans[0].resource.attributes[0].value.string_value = f"{json_body}-{gzipped}"
    data = message.SerializeToString()  # not the bytes of another case: that is a resend
    body, headers = encode(data, json_body)  # protobuf comes gzip'd from ``encode``
    if json_body and gzipped:
        body, headers = gzip.compress(body), {**headers, "Content-Encoding": "gzip"}
    if not json_body and not gzipped:
        body, headers = data, PROTOBUF
    status, answer_headers, answer = post(intake.http_url, body, headers)
    assert status == 200, answer
    assert answer_headers["Content-Type"] == headers["Content-Type"]
    assert stored_rows(store) == python_rows(data)


def test_otlp_json_as_the_specification_spells_it(intake: Intake, store: Store) -> None:
    """Written by hand after opentelemetry-proto's examples/trace.json: hex ids, int64 as
    strings (and as numbers), enums as integers and as names, camelCase names, an
    unknown field (ignored, as receivers must)."""
    document = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "service.name", "value": {"stringValue": "json-service"}}
                    ]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "my.library", "version": "1.0.0"},
                        "spans": [
                            {
                                "traceId": TRACE_ID.upper(),
                                "spanId": SPAN_ID,
                                "parentSpanId": "eee19b7ec3c1b173",
                                "name": "pkg.Echo/Say",
                                "kind": 2,
                                "startTimeUnixNano": "1544712660000000000",
                                "endTimeUnixNano": 1544712661000000000,
                                "attributes": [
                                    {"key": "rpc.system", "value": {"stringValue": "grpc"}},
                                    {"key": "my.count", "value": {"intValue": "9007199254740993"}},
                                    {"key": "my.ratio", "value": {"doubleValue": 0.5}},
                                    {
                                        "key": "my.list",
                                        "value": {
                                            "arrayValue": {
                                                "values": [
                                                    {"stringValue": "a"},
                                                    {"boolValue": True},
                                                ]
                                            }
                                        },
                                    },
                                ],
                                "events": [
                                    {
                                        "timeUnixNano": "1544712660300000000",
                                        "name": "inboundMessageRead",
                                        "attributes": [
                                            {"key": "message-size", "value": {"intValue": 42}}
                                        ],
                                    }
                                ],
                                "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
                                "futureField": {"ignored": True},
                            },
                            {
                                "traceId": TRACE_ID,
                                "spanId": "00000000000000aa",
                                "name": "pkg.Echo/Say",
                                "kind": "SPAN_KIND_CLIENT",
                                "startTimeUnixNano": "1544712659900000000",
                                "endTimeUnixNano": "1544712661100000000",
                            },
                        ],
                    }
                ],
            }
        ]
    }
    status, _, answer = post(intake.http_url, json.dumps(document).encode(), JSON)
    assert (status, json.loads(answer)) == (200, {}), answer
    frame = store.query(
        "SELECT TraceId, SpanId, ParentSpanId, SpanKind, ServiceName, ScopeName, "
        "toUnixTimestamp64Nano(Timestamp) AS start, Duration, StatusCode, StatusMessage, "
        "SpanAttributes['my.count'] AS big, SpanAttributes['my.list'] AS list, "
        "`Events.Name`[1] AS event, `Events.Attributes`[1]['message-size'] AS size "
        "FROM otel_traces ORDER BY SpanKind"
    )
    client, server = frame.to_dict(orient="records")
    assert (server["TraceId"], server["SpanId"]) == (TRACE_ID, SPAN_ID)
    assert server["ParentSpanId"] == "eee19b7ec3c1b173"
    assert (server["SpanKind"], client["SpanKind"]) == ("Server", "Client")
    assert (server["ServiceName"], server["ScopeName"]) == ("json-service", "my.library")
    assert (server["start"], server["Duration"]) == (1544712660000000000, 1_000_000_000)
    assert (server["StatusCode"], server["StatusMessage"]) == ("Error", "boom")
    assert server["big"] == "9007199254740993"  # not rounded through a float
    assert server["list"] == '["a",true]'
    assert (server["event"], server["size"]) == ("inboundMessageRead", "42")
    assert client["Duration"] == 1_200_000_000


def test_a_span_with_a_wrong_id_is_rejected_alone(intake: Intake, store: Store) -> None:
    """As on gRPC: partial success names the rejected span, the others are stored."""
    good = {
        "traceId": TRACE_ID,
        "spanId": SPAN_ID,
        "name": "ok",
        "startTimeUnixNano": "1",
        "endTimeUnixNano": "2",
    }
    short = {**good, "traceId": "abcd", "spanId": "00000000000000bb"}  # 2 bytes, not 16
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [good, short]}]}]}
    status, _, answer = post(intake.http_url, json.dumps(document).encode(), JSON)
    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and partial["errorMessage"]
    assert count(store) == 1
    # The same in protobuf: the answer is an ExportTraceServiceResponse.
    store.command("TRUNCATE TABLE otel_traces")
    data = request(span(fresh_span_id()), span(fresh_span_id(), trace_id=b"\x01\x02"))
    status, _, answer = post(intake.http_url, data, PROTOBUF)
    assert status == 200
    assert ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans == 1
    assert count(store) == 1

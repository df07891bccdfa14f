"""The intake end to end: real OTLP exporters in, rows in a real chDB store out."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from grpc_overhead.analyzer.intake import Intake
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.otlp_requests import (
    attributes,
    python_rows,
    request,
    running_intake,
    span,
    stored_rows,
    stub,
    tricky_request,
    with_invalid_utf8,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Intake]]:
    yield from running_intake(tmp_path_factory.mktemp("intake"))


@pytest.fixture
def store(running: tuple[Store, Intake]) -> Store:
    running[0].command("TRUNCATE TABLE otel_traces")
    return running[0]


@pytest.fixture
def intake(running: tuple[Store, Intake], store: Store) -> Intake:
    return running[1]


@pytest.fixture
def export(intake: Intake) -> Iterator[Any]:
    channel, call = stub(intake.port)
    yield call
    channel.close()


def test_sdk_spans_arrive_as_the_exporter_would_write_them(intake: Intake, store: Store) -> None:
    provider = TracerProvider(
        resource=Resource.create({"service.name": "checkout", "host.name": "h"})
    )
    otlp = OTLPSpanExporter(endpoint=f"127.0.0.1:{intake.port}", insecure=True)
    provider.add_span_processor(SimpleSpanProcessor(otlp))
    tracer = provider.get_tracer("tests.intake", "9.9")
    linked = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    kinds = [SpanKind.SERVER, SpanKind.CLIENT, SpanKind.INTERNAL, SpanKind.PRODUCER]
    for number, kind in enumerate(kinds):
        start = 1_790_000_000_000_000_000 + number * 1_000_000
        current = tracer.start_span(
            f"op-{number}",
            kind=kind,
            start_time=start,
            links=[Link(linked, {"link.n": number})] if number == 0 else None,
            attributes={
                "rpc.system": "grpc",
                "count": 7,
                "ratio": 0.5,
                "ok": True,
                "names": ["a", "b"],
                "sizes": [1, 2],
            },
        )
        current.add_event("outboundMessage", {"size": 100}, timestamp=start + 1_000)
        current.add_event("outboundMessageSent", timestamp=start + 2_500)
        if number == 1:
            current.set_status(Status(StatusCode.ERROR, "deadline exceeded"))
        elif number == 2:
            current.set_status(Status(StatusCode.OK))
        current.end(end_time=start + 11_000_000)
    provider.shutdown()

    rows = {row["SpanName"]: row for row in stored_rows(store)}
    assert sorted(rows) == ["op-0", "op-1", "op-2", "op-3"]
    assert [rows[f"op-{n}"]["SpanKind"] for n in range(4)] == [
        "Server",
        "Client",
        "Internal",
        "Producer",
    ]
    assert [rows[f"op-{n}"]["StatusCode"] for n in range(4)] == ["Unset", "Error", "Ok", "Unset"]
    first = rows["op-0"]
    assert rows["op-1"]["StatusMessage"] == "deadline exceeded"
    assert first["ServiceName"] == "checkout"
    assert first["ResourceAttributes"]["host.name"] == "h"
    assert (first["ScopeName"], first["ScopeVersion"]) == ("tests.intake", "9.9")
    assert first["Duration"] == 11_000_000
    assert first["Timestamp"] == 1_790_000_000_000_000_000
    assert first["SpanAttributes"] == {
        "count": "7",
        "names": '["a","b"]',
        "ok": "true",
        "ratio": "0.5",
        "rpc.system": "grpc",
        "sizes": "[1,2]",
    }
    assert first["span_keys"] == sorted(first["span_keys"])
    assert first["Events.Name"] == ["outboundMessage", "outboundMessageSent"]
    assert first["Events.Timestamp"] == [first["Timestamp"] + 1_000, first["Timestamp"] + 2_500]
    assert first["Events.Attributes"] == [{"size": "100"}, {}]
    assert first["Links.TraceId"] == [f"{0xABC:032x}"]
    assert first["Links.SpanId"] == [f"{0xDEF:016x}"]
    assert first["Links.Attributes"] == [{"link.n": "0"}]
    assert len(first["TraceId"]) == 32 and first["TraceId"] == first["TraceId"].lower()
    assert first["ParentSpanId"] == ""


def test_engine_mapping_equals_the_python_mapping(export: Any, store: Store) -> None:
    """The chDB path (protobuf parsed by the engine) and rows.py agree on every column."""
    data = tricky_request()
    export(data, timeout=10)
    stored = stored_rows(store)
    expected = python_rows(data)
    assert len(stored) == len(expected) == 3
    for ours, reference in zip(stored, expected, strict=True):
        assert ours == reference
    first = stored[0]
    attrs = first["SpanAttributes"]
    assert attrs["array"] == (
        '["a\\u2028<&>\\"\\\\\\n\\u0001",5,1e+21,true,"/w==",null,[1,[2]],{"k":"v"}]'
    )
    assert attrs["map"] == '{"a":{"nested":[1.5,"é"]},"m":null,"z":1}'
    assert attrs["nan_in_array"] == ""
    assert [attrs[f"double{i}"] for i in range(10)] == [
        "0.1",
        "1e+21",
        "1.5e-7",
        "-0",
        "3",
        "123456789.125",
        "0.000001",
        "5e-324",
        "Infinity",
        "NaN",
    ]
    assert attrs["raw"] == base64.b64encode(b"\x00\xff\xfe").decode()
    assert (attrs["empty"], attrs["big"], attrs["flag"]) == ("", str(2**63 - 1), "true")
    assert first["Events.Attributes"][0] == {"aa": "first", "size": "1234", "zz": "last"}
    assert first["event_keys"][0] == ["aa", "size", "zz"]
    second, third = stored[1], stored[2]
    assert (second["SpanKind"], second["StatusCode"]) == ("", "")
    assert second["Duration"] == 2**64 - 1
    assert second["ParentSpanId"] == ""
    assert third["TraceId"] == "" and third["SpanKind"] == "Consumer"


def test_invalid_spans_are_rejected_alone_and_counted(
    export: Any, intake: Intake, store: Store
) -> None:
    before = intake.stats()
    bad_trace = span(10)
    bad_trace.trace_id = b"\x01\x02\x03"
    bad_parent = span(11)
    bad_parent.parent_span_id = b"\x01" * 9
    response = export(request(span(12), bad_trace, bad_parent), timeout=10)
    assert response.partial_success.rejected_spans == 2
    assert "trace_id must be 0 or 16 bytes" in response.partial_success.error_message
    assert [row["SpanName"] for row in stored_rows(store)] == ["span-12"]
    after = intake.stats()
    assert after.spans_rejected - before.spans_rejected == 2
    assert after.spans_accepted - before.spans_accepted == 1


def test_undecodable_request_is_invalid_argument_and_the_intake_keeps_serving(
    export: Any, intake: Intake, store: Store
) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        export(b"\x0a\x05\x01", timeout=10)  # a field announcing 5 bytes, then 1
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cannot decode request" in raised.value.details()
    assert intake.stats().requests_rejected >= 1
    response = export(request(span(20)), timeout=10)
    assert not response.HasField("partial_success")
    assert [row["SpanName"] for row in stored_rows(store)] == ["span-20"]


def test_a_bad_request_in_a_batch_does_not_sink_the_others(intake: Intake, store: Store) -> None:
    channel, call = stub(intake.port)
    good = [call.future(request(span(30 + n)), timeout=10) for n in range(3)]
    bad = call.future(b"\xff\xff\xff", timeout=10)
    for future in good:
        future.result()
    with pytest.raises(grpc.RpcError):
        bad.result()
    channel.close()
    assert len(stored_rows(store)) == 3


def test_huge_attribute_values_are_kept_whole(export: Any, store: Store) -> None:
    huge = "x" * (3 << 20)  # no truncation: the request size limit is the only cap
    export(request(span(40, attributes=attributes(payload=huge))), timeout=30)
    found = store.query("SELECT length(SpanAttributes['payload']) AS n FROM otel_traces")
    assert int(found["n"][0]) == len(huge)


def test_bytes_that_are_not_utf8(export: Any, store: Store) -> None:
    """Bytes attributes become base64; raw non-UTF-8 strings are stored as sent, like Go."""
    data = request(
        span(
            50,
            attributes=attributes(blob=b"\xff\xfe\x00", blobs=[b"\x80", "ok"], text="PLACEHOLDER"),
        )
    )
    data = with_invalid_utf8(data, "PLACEHOLDER", b"caf\xe9-\xff\xfe\x80abc")
    export(data, timeout=10)
    found = store.query(
        "SELECT SpanAttributes['blob'] AS blob, SpanAttributes['blobs'] AS blobs, "
        "hex(SpanAttributes['text']) AS text FROM otel_traces"
    )
    assert found["blob"][0] == "//4A"
    assert found["blobs"][0] == '["gA==","ok"]'
    assert found["text"][0] == "636166E92DFFFE80616263"


def test_stats_count_what_happened(export: Any, intake: Intake) -> None:
    before = intake.stats()
    export(request(span(60), span(61)), timeout=10)
    after = intake.stats()
    assert after.requests_received - before.requests_received == 1
    assert after.spans_received - before.spans_received == 2
    assert after.spans_inserted - before.spans_inserted == 2
    assert after.batches > before.batches


def test_concurrent_requests_are_all_stored(intake: Intake, store: Store) -> None:
    channel, call = stub(intake.port)
    futures = [call.future(request(span(70 + n)), timeout=10) for n in range(8)]
    for future in futures:
        future.result()
    channel.close()
    assert len(stored_rows(store)) == 8


def test_several_resources_and_scopes_keep_their_own_names(export: Any, store: Store) -> None:
    message = ExportTraceServiceRequest()
    for resource_number in range(2):
        resource_spans = message.resource_spans.add()
        resource_spans.resource.attributes.extend(
            attributes(service__name=f"svc-{resource_number}", zone="z")
        )
        for scope_number in range(2):
            scope_spans = resource_spans.scope_spans.add()
            scope_spans.scope.name = f"scope-{resource_number}-{scope_number}"
            number = 100 + resource_number * 10 + scope_number
            scope_spans.spans.extend([span(number), span(number + 5)])
    message.resource_spans.add()  # a resource without spans
    data = message.SerializeToString()
    export(data, timeout=10)
    stored = stored_rows(store)
    assert stored == python_rows(data)
    assert {(row["ServiceName"], row["ScopeName"]) for row in stored} == {
        (f"svc-{r}", f"scope-{r}-{s}") for r in range(2) for s in range(2)
    }

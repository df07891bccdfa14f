"""OTLP requests for the intake's tests, and ``otel_traces`` rows read back comparably."""

from __future__ import annotations

import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.intake.rows import COLUMNS, request_rows
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
START = 1_790_000_000_123_456_789


def value(raw: Any) -> AnyValue:
    if raw is None:
        return AnyValue()
    if isinstance(raw, bool):
        return AnyValue(bool_value=raw)
    if isinstance(raw, int):
        return AnyValue(int_value=raw)
    if isinstance(raw, float):
        return AnyValue(double_value=raw)
    if isinstance(raw, bytes):
        return AnyValue(bytes_value=raw)
    if isinstance(raw, list):
        result = AnyValue()
        result.array_value.values.extend(value(item) for item in raw)
        return result
    if isinstance(raw, dict):
        result = AnyValue()
        result.kvlist_value.values.extend(
            KeyValue(key=key, value=value(item)) for key, item in raw.items()
        )
        return result
    return AnyValue(string_value=str(raw))


def attributes(**values: Any) -> list[KeyValue]:
    return [KeyValue(key=key.replace("__", "."), value=value(raw)) for key, raw in values.items()]


def request(*spans: Span, service: str = "svc", scope: str = "test-scope") -> bytes:
    message = ExportTraceServiceRequest()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.extend(attributes(service__name=service, host__name="h1"))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name, scope_spans.scope.version = scope, "1.2.3"
    scope_spans.spans.extend(spans)
    return message.SerializeToString()


def span(number: int, **fields: Any) -> Span:
    result = Span(
        trace_id=number.to_bytes(16, "big"),
        span_id=(number + 1000).to_bytes(8, "big"),
        name=f"span-{number}",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=START + number,
        end_time_unix_nano=START + number + 5_000,
    )
    for key, item in fields.items():
        if key == "attributes":
            result.attributes.extend(item)
        else:
            setattr(result, key, item)
    return result


def tricky_request() -> bytes:
    """Every value type and edge the exporter's mapping has a rule for."""
    doubles = [0.1, 1e21, 1.5e-7, -0.0, 3.0, 123456789.125, 1e-6, 5e-324, math.inf, math.nan]
    first = span(
        1,
        attributes=attributes(
            text="x",
            integer=-42,
            big=2**63 - 1,
            flag=True,
            off=False,
            ratio=0.25,
            **{f"double{i}": d for i, d in enumerate(doubles)},
            raw=b"\x00\xff\xfe",
            empty=None,
            array=['a\u2028<&>"\\\n\x01', 5, 1e21, True, b"\xff", None, [1, [2]], {"k": "v"}],
            map={"z": 1, "a": {"nested": [1.5, "é"]}, "m": None},
            nan_in_array=[1.0, math.nan],
            unicode="héllo ✓",
        ),
        parent_span_id=(77).to_bytes(8, "big"),
        trace_state="k=v",
        kind=Span.SPAN_KIND_CLIENT,
    )
    first.status.code, first.status.message = 2, "boom"
    event = first.events.add()
    event.time_unix_nano, event.name = START + 10, "outboundMessageSent"
    event.attributes.extend(attributes(size=1234, zz="last", aa="first"))
    first.events.add(time_unix_nano=START + 20, name="inboundMessageRead")
    link = first.links.add(trace_id=(9).to_bytes(16, "big"), span_id=(8).to_bytes(8, "big"))
    link.trace_state = "a=b"
    link.attributes.extend(attributes(linked=True))
    second = span(2, kind=9)  # outside the enum: pdata names it ''
    second.status.code = 7
    second.end_time_unix_nano = second.start_time_unix_nano - 1  # Duration wraps (uint64)
    second.parent_span_id = bytes(8)  # all zero: no parent
    third = span(3, kind=Span.SPAN_KIND_CONSUMER)
    third.trace_id = bytes(16)  # all zero trace id: stored as ''
    return request(first, second, third)


def stub(port: int) -> tuple[grpc.Channel, Any]:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    export = channel.unary_unary(
        EXPORT,
        request_serializer=None,
        response_deserializer=ExportTraceServiceResponse.FromString,
    )
    return channel, export


def stored_rows(store: Store, where: str = "1") -> list[dict[str, Any]]:
    """``otel_traces`` rows as plain Python values, in the Python mapping's shapes."""
    frame = store.query(
        f"SELECT {', '.join(f'`{c}`' for c in COLUMNS)}, "
        "toUnixTimestamp64Nano(Timestamp) AS ts_ns, "
        "arrayMap(t -> toUnixTimestamp64Nano(t), `Events.Timestamp`) AS event_ns, "
        "arrayMap(m -> mapKeys(m), `Events.Attributes`) AS event_keys, "
        "mapKeys(SpanAttributes) AS span_keys, mapKeys(ResourceAttributes) AS resource_keys "
        f"FROM otel_traces WHERE {where} ORDER BY SpanId"
    )
    rows = []
    for record in frame.to_dict(orient="records"):
        row: dict[str, Any] = {}
        for column in COLUMNS:
            item = record[column]
            if hasattr(item, "tolist"):
                item = item.tolist()
            if column == "Timestamp":
                item = int(record["ts_ns"])
            elif column == "Events.Timestamp":
                item = [int(t) for t in _list(record["event_ns"])]
            elif column in ("Events.Attributes", "Links.Attributes"):
                item = [dict(m) for m in _list(item)]
            elif column == "Duration":
                item = int(item)
            row[column] = item
        row["span_keys"] = _list(record["span_keys"])
        row["resource_keys"] = _list(record["resource_keys"])
        row["event_keys"] = [_list(keys) for keys in _list(record["event_keys"])]
        rows.append(row)
    return rows


def _list(item: Any) -> list[Any]:
    return list(item.tolist() if hasattr(item, "tolist") else item)


def python_rows(*encoded: bytes) -> list[dict[str, Any]]:
    """What ``rows.request_rows`` makes of the same requests, sorted like ``stored_rows``."""
    rows = []
    for data in encoded:
        converted = request_rows(ExportTraceServiceRequest.FromString(data))
        for index in range(len(converted)):
            row = {column: converted.columns[i][index] for i, column in enumerate(COLUMNS)}
            row["span_keys"] = list(row["SpanAttributes"])
            row["resource_keys"] = list(row["ResourceAttributes"])
            row["event_keys"] = [list(m) for m in row["Events.Attributes"]]
            rows.append(row)
    return sorted(rows, key=lambda row: row["SpanId"])


def with_invalid_utf8(data: bytes, marker: str, replacement: bytes) -> bytes:
    """Swap a same-length placeholder string for bytes protobuf classes cannot hold."""
    encoded = marker.encode()
    assert len(encoded) == len(replacement) and data.count(encoded) == 1
    return data.replace(encoded, replacement)


def double_bits(number: float) -> bytes:
    return struct.pack("<d", number)


def running_intake(directory: Path, **config: Any) -> Iterator[tuple[Store, Intake]]:
    """A store on ``directory`` and an intake on any free port(s), until the generator ends
    (a module fixture's body: ``yield from running_intake(...)``)."""
    store = open_store(directory / "store")
    intake = Intake(store, IntakeConfig(port=0, flush_interval=0.02, **config))
    intake.start()
    try:
        yield store, intake
    finally:
        intake.stop()
        store.close()

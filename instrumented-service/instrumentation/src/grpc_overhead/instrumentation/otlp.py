"""OTLP encoding straight from call records, for the SDK's OTLP/gRPC exporter.

The SDK encoder walks ``ReadableSpan`` objects attribute by attribute and
costs about 100 microseconds per span with a dozen events (measured: the
dominant cost of the whole instrumentation). Our spans have a fixed shape, so
this module writes the protobuf wire format directly, with every constant
piece (field tags, attribute keys, event names, the resource, the scope)
encoded once. ``CallRecordOTLPExporter`` keeps everything else of the SDK
exporter (channel, TLS, headers, retries, ``OTEL_EXPORTER_OTLP_*`` settings)
and only replaces the translation step. tests/instrumentation/test_otlp.py
checks the result is equal to the SDK encoder's output for the same spans.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource

from grpc_overhead.instrumentation import clock
from grpc_overhead.instrumentation.compressibility import ATTRIBUTE_KEYS, sample_attributes
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.spans import (
    SCOPE,
    SpanDescription,
    call_attributes,
    client_waits,
    deadline_budget,
    message_attributes,
    sampling_attributes,
    span_end,
)
from grpc_overhead.instrumentation.vocabulary import (
    CALL_TYPE,
    CLIENT_CONNECT_NS,
    CLIENT_DISPATCH_NS,
    COMPRESSION,
    DEADLINE_BUDGET_NS,
    PEER_ADDRESS,
    PEER_PORT,
    RPC_GRPC_STATUS_CODE,
    RPC_METHOD,
    RPC_SERVICE,
    RPC_SYSTEM,
    RUN_ID,
    SAMPLING_REASON,
    SAMPLING_SERVER_INSTANCE,
    SAMPLING_WEIGHT,
    SERVER_ADDRESS,
    SERVER_PORT,
    SERVER_RESIDENCE_NS,
)

_fixed64 = struct.Struct("<Q").pack
_times = struct.Struct("<BQBQ").pack  # start_time_unix_nano (7) and end_time_unix_nano (8)
_BYTES = tuple(bytes((value,)) for value in range(0x80))
_double = struct.Struct("<d").pack
_KIND_SERVER, _KIND_CLIENT = 2, 3
_STATUS_ERROR = 2
# Span flags (OTLP 1.1+): bit 8 "has is_remote", bit 9 "parent is remote"; like the SDK
# encoder, the trace-flags byte is left out.
_FLAGS_LOCAL_PARENT = struct.pack("<I", 0x100)
_FLAGS_REMOTE_PARENT = struct.pack("<I", 0x300)


def _varint(value: int) -> bytes:
    # Lengths and per-call integers are mostly below 2**21: those take no loop.
    if value < 0x80:
        return _BYTES[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + _varint(len(payload)) + payload


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _length_delimited(b"\x0a", value.encode("utf-8", "replace"))
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value & 0xFFFFFFFFFFFFFFFF)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _length_delimited(b"\x3a", value)
    if isinstance(value, list | tuple):
        values = b"".join(_length_delimited(b"\x0a", _any_value(item)) for item in value)
        return _length_delimited(b"\x2a", values)  # ArrayValue
    return _length_delimited(b"\x0a", str(value).encode("utf-8", "replace"))


_key_cache: dict[str, bytes] = {}


def _key_value(key: str, value: Any) -> bytes:
    encoded_key = _key_cache.get(key)
    if encoded_key is None:
        encoded_key = _length_delimited(b"\x0a", key.encode("utf-8", "replace"))
        if len(_key_cache) < 1024:
            _key_cache[key] = encoded_key
    return encoded_key + _length_delimited(b"\x12", _any_value(value))


_pair_cache: dict[tuple, bytes] = {}
_PAIR_CACHE_LIMIT = 16384
_CACHEABLE = (str, int, float, bool)


def _attributes(tag: bytes, attributes: dict[str, Any]) -> bytes:
    """Encoded key-value pairs; most pairs repeat call after call (method, peer, message
    type and id, status, often sizes), so whole encoded pairs are cached (bounded)."""
    parts = []
    for key, value in attributes.items():
        kind = type(value)
        cacheable = kind in _CACHEABLE
        if cacheable:
            cache_key = (tag, key, kind, value)
            encoded = _pair_cache.get(cache_key)
            if encoded is not None:
                parts.append(encoded)
                continue
        encoded = _length_delimited(tag, _key_value(key, value))
        if cacheable and len(_pair_cache) < _PAIR_CACHE_LIMIT:
            _pair_cache[cache_key] = encoded
        parts.append(encoded)
    return b"".join(parts)


_event_name_cache: dict[str, bytes] = {}


def _event(name: str, timestamp: int, attributes: dict[str, Any] | None) -> bytes:
    encoded_name = _event_name_cache.get(name)
    if encoded_name is None:
        encoded_name = _event_name_cache[name] = _length_delimited(b"\x12", name.encode())
    body = b"\x09" + _fixed64(timestamp) + encoded_name
    if attributes:
        body += _attributes(b"\x1a", attributes)
    return _length_delimited(b"\x5a", body)


def encode_span(record: CallRecord) -> bytes:
    """One Span message; calls that ended well take the cached fast path."""
    if record.status_code or record.exception is not None:
        return _encode_described(record)
    user = record.attributes
    if user and not _RESERVED.isdisjoint(user):
        return _encode_described(record)
    return _encode_fast(record)


def _encode_described(record: CallRecord) -> bytes:
    """The general encoder: renders the ``SpanDescription`` the SDK builder renders too."""
    description = SpanDescription(record)
    parts = [
        b"\x0a\x10" + record.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + record.span_id.to_bytes(8, "big"),
    ]
    if record.parent_span_id:
        parts.append(b"\x22\x08" + record.parent_span_id.to_bytes(8, "big"))
    parts.append(_length_delimited(b"\x2a", description.name.encode("utf-8", "replace")))
    parts.append(b"\x30" + bytes((_KIND_CLIENT if record.client else _KIND_SERVER,)))
    parts.append(b"\x39" + _fixed64(description.start_time))
    parts.append(b"\x41" + _fixed64(description.end_time))
    parts.append(_attributes(b"\x4a", description.attributes))
    parts.extend(_event(*event) for event in description.events)
    if description.error:
        status = _length_delimited(b"\x12", (description.status_message or "").encode())
        parts.append(_length_delimited(b"\x7a", status + b"\x18" + bytes((_STATUS_ERROR,))))
    else:
        parts.append(b"\x7a\x00")  # an empty Status (UNSET), as the SDK encoder writes it
    remote = record.parent_span_id and record.parent_is_remote
    parts.append(b"\x85\x01" + (_FLAGS_REMOTE_PARENT if remote else _FLAGS_LOCAL_PARENT))
    return _length_delimited(b"\x12", b"".join(parts))


# -- the fast path ------------------------------------------------------------------------------
# A successful call's span is mostly bytes that repeat call after call: the name, the
# attributes shared by every call of one method, peer and run, every event's name and
# message attributes. Those are encoded once and cached (bounded); per call only the
# ids, the timestamps and the few per-call integers are encoded. The result parses to
# the same span as the general path (tests/instrumentation/test_otlp.py).
_RESERVED = frozenset(
    (
        RPC_SYSTEM,
        RPC_SERVICE,
        RPC_METHOD,
        RPC_GRPC_STATUS_CODE,
        CALL_TYPE,
        COMPRESSION,
        SERVER_ADDRESS,
        SERVER_PORT,
        PEER_ADDRESS,
        PEER_PORT,
        SERVER_RESIDENCE_NS,
        RUN_ID,
        DEADLINE_BUDGET_NS,
        CLIENT_CONNECT_NS,
        CLIENT_DISPATCH_NS,
        SAMPLING_WEIGHT,
        SAMPLING_REASON,
        SAMPLING_SERVER_INSTANCE,
        *ATTRIBUTE_KEYS,
    )
)
_CACHE_LIMIT = 4096
_heads: dict[tuple, bytes] = {}
_events: dict[tuple, tuple[bytes, bytes]] = {}
_UNSET_STATUS = b"\x7a\x00"
_TAIL_REMOTE = _UNSET_STATUS + b"\x85\x01" + _FLAGS_REMOTE_PARENT
_TAIL_LOCAL = _UNSET_STATUS + b"\x85\x01" + _FLAGS_LOCAL_PARENT
_RESIDENCE_KEY = _length_delimited(b"\x0a", SERVER_RESIDENCE_NS.encode())
_BUDGET_KEY = _length_delimited(b"\x0a", DEADLINE_BUDGET_NS.encode())
_CONNECT_KEY = _length_delimited(b"\x0a", CLIENT_CONNECT_NS.encode())
_DISPATCH_KEY = _length_delimited(b"\x0a", CLIENT_DISPATCH_NS.encode())


def _head(record: CallRecord) -> bytes:
    """Name, kind and the shared attributes of calls like this one."""
    key = (
        record.method,
        record.client,
        record.call_type,
        record.compression,
        record.peer,
        record.run_id,
    )
    head = _heads.get(key)
    if head is None:
        head = (
            _length_delimited(b"\x2a", record.method.lstrip("/").encode("utf-8", "replace"))
            + b"\x30"
            + bytes((_KIND_CLIENT if record.client else _KIND_SERVER,))
            + _attributes(b"\x4a", call_attributes(record))
        )
        if len(_heads) < _CACHE_LIMIT:
            _heads[key] = head
    return head


def _int_attribute(encoded_key: bytes, value: int) -> bytes:
    """A KeyValue with an int value: one attribute whose value changes every call."""
    encoded = _varint(value & 0xFFFFFFFFFFFFFFFF)
    pair = encoded_key + b"\x12" + _varint(len(encoded) + 1) + b"\x18" + encoded
    return b"\x4a" + _varint(len(pair)) + pair


def _event_parts(record: CallRecord, event: tuple) -> tuple[bytes, bytes]:
    """(what goes before the event's timestamp, what goes after it)."""
    name, _timestamp, message_id, size, payload = event
    if payload is not None:  # a compressed size measured off the hot path: not cached
        return _split_event(name, message_attributes(event, record))
    key = (name, message_id, size, record.compression)
    parts = _events.get(key)
    if parts is None:
        parts = _split_event(name, message_attributes(event, record))
        if len(_events) < _CACHE_LIMIT:
            _events[key] = parts
    return parts


def _split_event(name: str, attributes: dict[str, Any] | None) -> tuple[bytes, bytes]:
    encoded = _length_delimited(b"\x12", name.encode())
    if attributes:
        encoded += _attributes(b"\x1a", attributes)
    return b"\x5a" + _varint(9 + len(encoded)) + b"\x09", encoded


def _encode_fast(record: CallRecord) -> bytes:
    offset = clock.wall_offset_ns()
    start = record.start
    parts = [
        b"\x0a\x10" + record.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + record.span_id.to_bytes(8, "big"),
    ]
    parent = record.parent_span_id
    if parent:
        parts.append(b"\x22\x08" + parent.to_bytes(8, "big"))
    parts.append(_head(record))
    events = record.events[:]  # one list: a handler's thread may still add one
    parts.append(_times(0x39, start + offset, 0x41, span_end(record, events) + offset))
    if record.residence_ns >= 0:
        parts.append(_int_attribute(_RESIDENCE_KEY, record.residence_ns))
    budget = deadline_budget(record)
    if budget is not None:
        parts.append(_int_attribute(_BUDGET_KEY, budget))
    connect, dispatch = client_waits(record)
    if connect is not None:
        parts.append(_int_attribute(_CONNECT_KEY, connect))
    if dispatch is not None:
        parts.append(_int_attribute(_DISPATCH_KEY, dispatch))
    sampling = sampling_attributes(record)
    if sampling:
        # A server instance's id comes and goes with deploys: never in the pair cache.
        instance = sampling.pop(SAMPLING_SERVER_INSTANCE, None)
        parts.append(_attributes(b"\x4a", sampling))
        if instance is not None:
            key_value = _key_value(SAMPLING_SERVER_INSTANCE, instance)
            parts.append(_length_delimited(b"\x4a", key_value))
    if record.compress_sample is not None:
        sample = sample_attributes(record)
        if sample:
            # Values differ every sample: not through _attributes' pair cache.
            parts += [_length_delimited(b"\x4a", _key_value(k, v)) for k, v in sample.items()]
    if record.attributes:
        parts.append(_attributes(b"\x4a", record.attributes))
    # Per event: its cached bytes before and after the timestamp; one join at the end.
    extend, cached, compression = parts.extend, _events.get, record.compression
    for event in events:
        name, timestamp, message_id, size, payload = event
        around = cached((name, message_id, size, compression)) if payload is None else None
        if around is None:
            around = _event_parts(record, event)
        extend((around[0], _fixed64(timestamp + offset), around[1]))
    parts.append(_TAIL_REMOTE if parent and record.parent_is_remote else _TAIL_LOCAL)
    body = b"".join(parts)
    return b"\x12" + _varint(len(body)) + body


def encode_resource(resource: Resource) -> bytes:
    return _attributes(b"\x0a", dict(resource.attributes))


_SCOPE = _length_delimited(
    b"\x0a",
    _length_delimited(b"\x0a", SCOPE.name.encode())
    + _length_delimited(b"\x12", SCOPE.version.encode()),
)


def encode_request(records: Sequence[CallRecord | bytes], encoded_resource: bytes) -> bytes:
    """An ExportTraceServiceRequest (one resource, one scope) as wire bytes, from records
    or from spans ``encode_span`` already encoded."""
    if records and type(records[0]) is bytes:
        scope_spans = _SCOPE + b"".join(records)  # type: ignore[arg-type]
    else:
        scope_spans = _SCOPE + b"".join(encode_span(record) for record in records)
    resource_spans = _length_delimited(b"\x0a", encoded_resource) + _length_delimited(
        b"\x12", scope_spans
    )
    return _length_delimited(b"\x0a", resource_spans)


def _serialize(request: bytes | ExportTraceServiceRequest) -> bytes:
    return request if type(request) is bytes else request.SerializeToString()


class _WireTraceServiceStub:
    """TraceService.Export taking the request as wire bytes: what ``encode_request`` wrote
    goes out as is, instead of being parsed into a message and serialized again."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.Export = channel.unary_unary(
            _EXPORT_METHOD,
            request_serializer=_serialize,
            response_deserializer=ExportTraceServiceResponse.FromString,
            _registered_method=True,
        )


_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class CallRecordOTLPExporter(OTLPSpanExporter):
    """The SDK's OTLP/gRPC span exporter, fed call records instead of ReadableSpans."""

    accepts_call_records = True

    def __init__(self, *args: Any, resource: Resource | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._encoded_resource = encode_resource(resource) if resource is not None else b""
        # The SDK re-creates its client from _stub when it reconnects: ours stays.
        self._stub = _WireTraceServiceStub
        if self._client is not None:
            self._client = _WireTraceServiceStub(self._channel)

    def set_resource(self, resource: Resource) -> None:
        self._encoded_resource = encode_resource(resource)

    def encode_spans(self, records: Sequence[CallRecord]) -> list[bytes]:
        """Spans encoded ahead of their export request (SpanPipeline encodes early)."""
        return [encode_span(record) for record in records]

    def _translate_data(self, data: Sequence[Any]) -> Any:
        if data and not isinstance(data[0], CallRecord | bytes):
            return super()._translate_data(data)
        return encode_request(data, self._encoded_resource)

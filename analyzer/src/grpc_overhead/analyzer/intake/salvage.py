"""Keep what can be kept of a request the generated protobuf classes refuse.

The Python conversion path (``RowsExporter``, for ClickHouse servers) decodes
with the generated classes, whose decoder (upb) stops at 100 message levels.
A single span with an attribute value nested a few dozen levels deep would
make the whole request undecodable. Instead, the request is taken apart on the
wire (resource spans, scope spans, spans), each part is decoded alone, and a
request is rebuilt from the parts that decode: only the spans that do not are
rejected, as on the chDB path.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ScopeSpans, Span

from grpc_overhead.analyzer.intake.values import LEN_WIRE_TYPE, wire_fields

_RESOURCE, _SCOPE_SPANS = 1, 2  # ResourceSpans fields
_SPANS = 2  # ScopeSpans.spans


def salvage(data: bytes) -> tuple[bytes, int] | None:
    """(request rebuilt from its decodable parts, spans left out); None if the request's
    own framing is broken (nothing can be counted, the request is refused whole)."""
    try:
        out, dropped = bytearray(), 0
        for number, wire_type, value in wire_fields(data):
            if number != 1 or wire_type != LEN_WIRE_TYPE:
                continue
            kept, lost = _resource_spans(value)
            out += _field(1, kept)
            dropped += lost
        return bytes(out), dropped
    except ValueError:
        return None


def _resource_spans(data: bytes) -> tuple[bytes, int]:
    parts = wire_fields(data)
    scopes = [value for number, _, value in parts if number == _SCOPE_SPANS]
    resource = b"".join(value for number, _, value in parts if number == _RESOURCE)
    if not _decodes(Resource, resource):  # no span of this resource can be stored
        return b"", sum(len(_spans(scope)) for scope in scopes)
    out, dropped = bytearray(_field(_RESOURCE, resource)), 0
    for scope in scopes:
        if _decodes(ScopeSpans, scope):
            out += _field(_SCOPE_SPANS, scope)
            continue
        kept = bytearray()
        for number, _, value in wire_fields(scope):
            if number != _SPANS:
                kept += _field(number, value)
            elif _decodes(Span, value):
                kept += _field(_SPANS, value)
            else:
                dropped += 1
        out += _field(_SCOPE_SPANS, bytes(kept))
    return bytes(out), dropped


def _spans(scope: bytes) -> list[bytes]:
    return [value for number, _, value in wire_fields(scope) if number == _SPANS]


def _decodes(message_type: type, data: bytes) -> bool:
    try:
        message_type.FromString(data)
    except DecodeError:
        return False
    return True


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | LEN_WIRE_TYPE) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)

"""OTLP requests encoded by hand: shapes the generated classes cannot build or refuse.

Values nested thousands of levels deep, array values whose bytes are not a
message, strings that are not UTF-8: what a buggy or hostile sender can put
on the wire, and what the collector's own decoder lets through in part.
"""

from __future__ import annotations

from tests.analyzer.otlp_requests import START

_LEN = 2


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return varint(number << 3 | _LEN) + varint(len(payload)) + payload


def fixed64(number: int, value: int) -> bytes:
    return varint(number << 3 | 1) + value.to_bytes(8, "little")


def text_value(raw: bytes) -> bytes:
    """AnyValue{string_value: raw} (raw need not be UTF-8)."""
    return field(1, raw)


def nested_array(depth: int) -> bytes:
    """AnyValue holding an array holding an array ... ``depth`` arrays deep, "x" inside."""
    value = text_value(b"x")
    for _ in range(depth):
        value = field(5, field(1, value))
    return value


def broken_array() -> bytes:
    """AnyValue whose array_value bytes are not an ArrayValue (a length past the end)."""
    return field(5, b"\x0a\x7fab")


def key_value(key: bytes, value: bytes) -> bytes:
    return field(1, key) + field(2, value)


def raw_span(number: int, *attributes: bytes, name: bytes = b"") -> bytes:
    """A Span with ids derived from ``number`` and the given encoded KeyValues."""
    body = (
        field(1, number.to_bytes(16, "big"))
        + field(2, (number + 1000).to_bytes(8, "big"))
        + field(5, name or f"span-{number}".encode())
        + varint(6 << 3)
        + varint(2)  # kind = SERVER
        + fixed64(7, START + number)
        + fixed64(8, START + number + 5_000)
    )
    return body + b"".join(field(9, attribute) for attribute in attributes)


def raw_request(*spans: bytes, resource: tuple[bytes, ...] = ()) -> bytes:
    """ExportTraceServiceRequest: one resource (service.name=svc + ``resource``), one scope."""
    attributes = [key_value(b"service.name", text_value(b"svc")), *resource]
    resource_message = b"".join(field(1, attribute) for attribute in attributes)
    scope_spans = field(1, field(1, b"raw-scope")) + b"".join(field(2, span) for span in spans)
    return field(1, field(1, resource_message) + field(2, scope_spans))

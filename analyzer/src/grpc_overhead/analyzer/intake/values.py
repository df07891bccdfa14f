"""Attribute values as the collector's clickhouse exporter writes them.

The exporter stores every attribute value as ``pcommon.Value.AsString()``
(pdata v1.67.0, ``pcommon/value.go``):

========  ===========================================================
string    as is (bytes kept, even when not valid UTF-8)
int       decimal
double    ES6 number formatting: shortest digits, fixed notation for
          1e-6 <= |x| < 1e21, else ``1.5e-7`` / ``1e+21``; ``NaN``,
          ``Infinity``, ``-Infinity``
bool      ``true`` / ``false``
bytes     base64, standard alphabet, padded
array     JSON of the raw values (``encoding/json``, no HTML escaping)
kvlist    JSON object, keys sorted, last duplicate wins
empty     ``""``
========  ===========================================================

In JSON, bytes are base64 strings, empty values ``null``, and a NaN or an
infinity anywhere makes ``encoding/json`` fail, which ``AsString`` turns into
``""``. Strings are escaped the way Go escapes them (``\\u2028``, ``\\u2029``,
control characters, invalid UTF-8 as ``\\ufffd``).

``complex_value_json`` decodes the protobuf bytes of an ``ArrayValue`` or
``KeyValueList`` itself (a few lines of wire format) instead of using the
generated classes, because those refuse strings that are not UTF-8 while Go
keeps them.
"""

from __future__ import annotations

import base64
import math
import re
import struct
from decimal import Decimal
from typing import Any

# -- numbers -----------------------------------------------------------------

_EXPONENT_LEADING_ZERO = re.compile(r"e-0(\d)$")


def go_float(value: float) -> str:
    """pdata ``float64AsString`` (Go's ES6-style formatting of a float64)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    magnitude = abs(value)
    if magnitude != 0 and (magnitude < 1e-6 or magnitude >= 1e21):
        # repr() gives the same shortest digits; Python writes 'e-07' like Go's
        # 'e' format before pdata's clean-up to 'e-7'.
        return _EXPONENT_LEADING_ZERO.sub(r"e-\1", repr(value))
    text = repr(value)
    if "e" not in text:
        return text[:-2] if text.endswith(".0") else text
    return format(Decimal(text).normalize(), "f")


# -- JSON the way Go's encoding/json writes it --------------------------------

_HEX = "0123456789abcdef"
_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_JSON_ESCAPES["\t"] = "\\t"
_JSON_ESCAPES["\u2028"] = "\\u2028"
_JSON_ESCAPES["\u2029"] = "\\u2029"
for _code in range(0x20):
    _JSON_ESCAPES.setdefault(chr(_code), "\\u00" + _HEX[_code >> 4] + _HEX[_code & 0xF])
# Bytes that were not UTF-8 arrive as surrogate escapes; Go writes U+FFFD for each.
for _code in range(0xDC80, 0xDD00):
    _JSON_ESCAPES[chr(_code)] = "\\ufffd"
_NEEDS_ESCAPE = re.compile("[" + re.escape("".join(_JSON_ESCAPES)) + "]")


def go_json_string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda match: _JSON_ESCAPES[match.group()], text) + '"'


class _Unsupported(Exception):
    """NaN or an infinity: encoding/json refuses it and AsString yields ''."""


def _json(raw: Any) -> str:
    if raw is None:
        return "null"
    if raw is True:
        return "true"
    if raw is False:
        return "false"
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        if math.isnan(raw) or math.isinf(raw):
            raise _Unsupported
        return go_float(raw)
    if isinstance(raw, str):
        return go_json_string(raw)
    if isinstance(raw, bytes | bytearray):
        return '"' + base64.b64encode(raw).decode("ascii") + '"'
    if isinstance(raw, list):
        return "[" + ",".join(_json(item) for item in raw) + "]"
    if isinstance(raw, dict):
        keys = sorted(raw, key=_go_string_order)
        return "{" + ",".join(go_json_string(key) + ":" + _json(raw[key]) for key in keys) + "}"
    raise TypeError(f"unexpected raw value {raw!r}")


def _go_string_order(key: str) -> bytes:
    """Go sorts map keys bytewise; surrogate escapes stand for their original bytes."""
    return key.encode("utf-8", "surrogateescape")


def go_json(raw: Any) -> str:
    """``marshalJSONNoHTMLEscape(raw)`` including its silent '' on NaN/Inf."""
    try:
        return _json(raw)
    except _Unsupported:
        return ""


# -- protobuf wire decoding of AnyValue and friends ---------------------------

#: Arrays and maps inside an attribute value may nest this deep (a span with a
#: deeper value is rejected alone, with OTLP partial success). pdata has no such
#: limit below protobuf's own; 32 levels is far beyond any real attribute.
MAX_NESTING_DEPTH = 32


class InvalidValue(ValueError):
    """An array or map value that cannot be stored: malformed bytes or nested too deep."""


_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
LEN_WIRE_TYPE = _LEN


def wire_fields(data: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) triples; LEN values are bytes. ValueError when
    the bytes are not a message."""
    out = []
    index, end = 0, len(data)
    while index < end:
        key, index = _varint(data, index)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, index = _varint(data, index)
        elif wire_type == _FIXED64:
            value, index = data[index : index + 8], index + 8
        elif wire_type == _LEN:
            length, index = _varint(data, index)
            value, index = data[index : index + length], index + length
        elif wire_type == _FIXED32:
            value, index = data[index : index + 4], index + 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
        if index > end:
            raise ValueError("truncated protobuf message")
        out.append((number, wire_type, value))
    return out


def _varint(data: bytes, index: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if index >= len(data):
            raise ValueError("truncated varint")
        byte = data[index]
        index += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, index
        shift += 7


def _text(value: bytes) -> str:
    return value.decode("utf-8", "surrogateescape")


def any_value_raw(data: bytes, depth: int = 1) -> Any:
    """An encoded ``AnyValue`` as pdata's ``AsRaw()`` sees it (None when empty).

    ``depth`` counts the arrays and maps around it; past ``MAX_NESTING_DEPTH``
    the value is refused (``InvalidValue``) instead of recursing further.
    """
    raw: Any = None
    for number, wire_type, value in wire_fields(data):
        # proto3 oneof: the last member on the wire wins.
        if number == 1 and wire_type == _LEN:
            raw = _text(value)
        elif number == 2 and wire_type == _VARINT:
            raw = bool(value)
        elif number == 3 and wire_type == _VARINT:
            raw = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 4 and wire_type == _FIXED64:
            raw = struct.unpack("<d", value)[0]
        elif number == 5 and wire_type == _LEN:
            raw = array_value_raw(value, depth + 1)
        elif number == 6 and wire_type == _LEN:
            raw = kvlist_value_raw(value, depth + 1)
        elif number == 7 and wire_type == _LEN:
            raw = bytes(value)
    return raw


def _nest(depth: int) -> None:
    if depth > MAX_NESTING_DEPTH:
        raise InvalidValue(f"attribute value nested deeper than {MAX_NESTING_DEPTH} levels")


def array_value_raw(data: bytes, depth: int = 1) -> list[Any]:
    _nest(depth)
    return [any_value_raw(value, depth) for number, _, value in wire_fields(data) if number == 1]


def kvlist_value_raw(data: bytes, depth: int = 1) -> dict[str, Any]:
    _nest(depth)
    out: dict[str, Any] = {}
    for number, _, entry in wire_fields(data):
        if number != 1:
            continue
        key, value = "", None
        for field, _, item in wire_fields(entry):
            if field == 1:
                key = _text(item)
            elif field == 2:
                value = any_value_raw(item, depth)
        out[key] = value
    return out


def complex_value_json(kind: str, data: bytes) -> str:
    """AsString of an array (``kind='array'``) or kvlist value from its encoded bytes.

    Raises ``InvalidValue`` when the bytes are not a well-formed value or nest
    deeper than ``MAX_NESTING_DEPTH``; ``checked_complex_value_json`` never raises.
    """
    try:
        raw = array_value_raw(data) if kind == "array" else kvlist_value_raw(data)
        return go_json(raw)
    except InvalidValue:
        raise
    except (ValueError, TypeError, IndexError, struct.error, RecursionError) as error:
        raise InvalidValue(f"malformed attribute value ({error})") from None


#: Marks a value the engine must not store (see ``protobuf_sql``): no AsString result
#: starts with a NUL byte (JSON starts with ``[``, ``{`` or is empty).
INVALID_VALUE_MARK = "\0"


def checked_complex_value_json(kind: str, data: bytes) -> str:
    """``complex_value_json``, or ``INVALID_VALUE_MARK`` + the reason: never raises.

    It runs inside the engine (a chDB UDF): an exception there would fail the
    whole batch of requests the value was written with, innocent ones too.
    """
    try:
        return complex_value_json(kind, data)
    except InvalidValue as error:
        return INVALID_VALUE_MARK + str(error)


# -- generated protobuf classes (the Python conversion path) -------------------


def any_value_string(value: Any) -> str:
    """AsString of an ``opentelemetry.proto.common.v1.AnyValue`` message."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "int_value":
        return str(value.int_value)
    if which == "double_value":
        return go_float(value.double_value)
    if which == "bool_value":
        return "true" if value.bool_value else "false"
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if which == "array_value":
        return complex_value_json("array", value.array_value.SerializeToString())
    if which == "kvlist_value":
        return complex_value_json("kvlist", value.kvlist_value.SerializeToString())
    return ""

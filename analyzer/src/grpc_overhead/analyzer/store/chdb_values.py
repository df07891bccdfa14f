"""Values crossing into chDB: query parameters as ClickHouse text, columns as Arrow types.

chDB binds ``{name:Type}`` parameters from text it parses with ClickHouse's
escaping rules (TSV), and ``insert`` sends columns as Arrow, so both need the
ClickHouse type of a value spelled the engine's way.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pyarrow as pa

from grpc_overhead.analyzer.store.base import EncodedValue, Parameters

# -- parameters and types ---------------------------------------------------

_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0", "\b": "\\b"}
_ESCAPES["\f"] = "\\f"


def _escape_text(text: str) -> str:
    """ClickHouse parses query parameter values as escaped text (TSV rules)."""
    return "".join(_ESCAPES.get(char, char) for char in text)


def _literal(value: Any) -> str:
    """A value as a ClickHouse literal, for elements inside arrays and tuples."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, datetime | date):
        return "'" + _datetime_text(value) + "'"
    if isinstance(value, list | tuple):
        inner = ", ".join(_literal(item) for item in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    text = _escape_text(str(value)).replace("'", "\\'")
    return f"'{text}'"


def _datetime_text(value: date) -> str:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return value.isoformat()


def bind_parameters(parameters: Parameters | None) -> dict[str, Any]:
    bound: dict[str, Any] = {}
    for name, value in (parameters or {}).items():
        if isinstance(value, EncodedValue):
            bound[name] = str(value)
        elif value is None or isinstance(value, bool | int | float):
            bound[name] = value
        elif isinstance(value, datetime | date):
            bound[name] = _datetime_text(value)
        elif isinstance(value, list | tuple):
            bound[name] = _literal(value)
        else:
            bound[name] = _escape_text(str(value))
    return bound


def _strip(type_name: str, wrapper: str) -> str:
    if type_name.startswith(wrapper + "(") and type_name.endswith(")"):
        return type_name[len(wrapper) + 1 : -1]
    return type_name


def _split_arguments(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
    parts.append(text[start:].strip())
    return parts


_SCALARS = {
    "String": pa.string(),
    "UUID": pa.string(),
    "Bool": pa.bool_(),
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Int64": pa.int64(),
    "Float32": pa.float32(),
    "Float64": pa.float64(),
    "Date": pa.date32(),
    "DateTime": pa.timestamp("s", tz="UTC"),
}
_UNITS = {0: "s", 3: "ms", 6: "us", 9: "ns"}


def arrow_type(type_name: str) -> pa.DataType | None:
    """The Arrow type that carries values of a ClickHouse column (None: infer)."""
    type_name = _strip(_strip(type_name.strip(), "LowCardinality"), "Nullable")
    type_name = _strip(type_name, "LowCardinality")
    if type_name in _SCALARS:
        return _SCALARS[type_name]
    if type_name.startswith(("FixedString(", "Enum8(", "Enum16(")):
        return pa.string()
    if type_name.startswith("DateTime64("):
        precision = int(_split_arguments(type_name[len("DateTime64(") : -1])[0])
        return pa.timestamp(_UNITS.get(precision, "ns"), tz="UTC")
    if type_name.startswith("DateTime("):
        return pa.timestamp("s", tz="UTC")
    if type_name.startswith("Array("):
        element = arrow_type(type_name[len("Array(") : -1])
        return pa.list_(element) if element is not None else None
    if type_name.startswith("Map("):
        key, value = _split_arguments(type_name[len("Map(") : -1])
        key_type, value_type = arrow_type(key), arrow_type(value)
        if key_type is None or value_type is None:
            return None
        return pa.map_(key_type, value_type)
    return None

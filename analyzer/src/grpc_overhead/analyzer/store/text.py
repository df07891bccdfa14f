"""Readable text from whatever bytes a store holds.

``otel_traces`` keeps attribute values byte for byte, as the collector's
clickhouse exporter does, so a span with a string that is not UTF-8 stays that
way in the store (and in a ClickHouse server the Go exporter fills, we are not
even in the write path). Readers must cope, so the backends sanitize here, at
the one place where engine output becomes Python values: invalid sequences
become U+FFFD, as Go's ``encoding/json`` and browsers render them. The stored
bytes are never changed; ``hex()`` in SQL still shows them.

Arrow's own conversion is strict (pandas' Arrow-backed strings fail lazily,
at the first access), so every result is validated in C++ first
(``validate(full=True)``: cheap) and only a column that fails is rebuilt.
"""

from __future__ import annotations

import codecs
from typing import Any

import pandas as pd
import pyarrow as pa

#: A codec name for clickhouse-driver's ``strings_encoding``: UTF-8 that never raises.
LENIENT_UTF8 = "grpc_overhead_lenient_utf8"


def _lenient_search(name: str) -> codecs.CodecInfo | None:
    if name != LENIENT_UTF8:
        return None
    utf8 = codecs.lookup("utf-8")

    def decode(data: bytes, errors: str = "strict") -> tuple[str, int]:
        return codecs.utf_8_decode(data, "replace", True)

    return codecs.CodecInfo(utf8.encode, decode, name=LENIENT_UTF8)


codecs.register(_lenient_search)


def arrow_frame(table: pa.Table) -> pd.DataFrame:
    """A result as a DataFrame (Map -> dict); text that is not UTF-8 made readable."""
    return readable_table(table).to_pandas(maps_as_pydicts="lossy")


def readable_table(table: pa.Table) -> pa.Table:
    """``table`` with every string (also inside lists, maps, structs) valid UTF-8."""
    for index, column in enumerate(table.columns):
        if not _has_text(column.type):
            continue
        try:
            column.validate(full=True)
        except pa.ArrowInvalid:
            fixed = pa.chunked_array(
                [_readable(chunk) for chunk in column.chunks], type=column.type
            )
            table = table.set_column(index, table.field(index), fixed)
    return table


def _has_text(data_type: pa.DataType) -> bool:
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return True
    if pa.types.is_dictionary(data_type):
        return _has_text(data_type.value_type)
    return any(_has_text(data_type.field(i).type) for i in range(data_type.num_fields))


def _readable(array: pa.Array) -> pa.Array:
    """Rebuild one chunk through Python with invalid sequences replaced (rare path)."""
    raw = array.cast(_as_binary(array.type))
    return pa.array([_decoded(value) for value in raw.to_pylist()], type=array.type)


def _as_binary(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_string(data_type):
        return pa.binary()
    if pa.types.is_large_string(data_type):
        return pa.large_binary()
    if pa.types.is_map(data_type):
        return pa.map_(_as_binary(data_type.key_type), _as_binary(data_type.item_type))
    if pa.types.is_list(data_type):
        return pa.list_(_as_binary(data_type.value_type))
    if pa.types.is_large_list(data_type):
        return pa.large_list(_as_binary(data_type.value_type))
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _as_binary(f.type), f.nullable) for f in data_type])
    if pa.types.is_dictionary(data_type):
        return _as_binary(data_type.value_type)
    return data_type


def _decoded(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [_decoded(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_decoded(item) for item in value)
    if isinstance(value, dict):
        return {key: _decoded(item) for key, item in value.items()}
    return value

"""The store's size per table and per call: the rows the engine reports are the rows
stored, and bytes per call is bytes on disk over the calls the pages count.

Each test fills a database of its own on the module's store (chDB runs one engine per
process), so the sizes are of known spans and nothing else.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.rollup import create_rollups, settle
from grpc_overhead.analyzer.schema import SchemaOptions, create_schema
from grpc_overhead.analyzer.store.base import Store, quote_identifier
from grpc_overhead.analyzer.store_size import (
    SIZE_COLUMNS,
    TOTAL,
    size_json,
    size_text,
    store_size,
    tables_only,
    total_row,
)
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e

CALLS = 300


def own_database(store: Store, name: str) -> CallsOptions:
    """Every analyzer table in database ``name``, as ``serve`` would create them there."""
    schema = SchemaOptions.for_store(store, database=name)
    create_schema(store, schema)
    options = CallsOptions.from_schema(schema)
    create_call_tables(store, options)
    return options


def fill(store: Store, options: CallsOptions, calls: int) -> None:
    """``calls`` two-sided calls a millisecond apart, in two INSERTs (two parts), settled."""
    spans = [
        span
        for index in range(calls)
        for span in seed.synthetic_call(replace(Truth(), start=seed.BASE_NS + index * MS))
    ]
    table = f"{options.database}.otel_traces"
    half = len(spans) // 2
    seed.insert_spans(store, spans[:half], table=table)
    seed.insert_spans(store, spans[half:], table=table)
    settle(store, options)


def counted(store: Store, options: CallsOptions, table: str) -> int:
    found = store.query(f"SELECT count() AS n FROM {options.qualified(table)}")
    return int(found["n"].iloc[0])


def test_rows_are_the_rows_stored_and_bytes_per_call_is_bytes_over_calls(module_store):
    options = own_database(module_store, "size_filled")
    fill(module_store, options, CALLS)
    seed.insert_spans(module_store, seed.synthetic_call())  # default database: not counted

    frame = store_size(module_store, options=options)

    assert list(frame.columns) == list(SIZE_COLUMNS)
    assert frame["table"].iloc[-1] == TOTAL
    tables = tables_only(frame)
    assert {"otel_traces", "otel_traces_trace_id_ts", "grpc_calls", "grpc_settled_calls"} <= set(
        tables["table"]
    )
    for row in tables.itertuples(index=False):
        assert row.rows == counted(module_store, options, row.table), row.table
        assert row.bytes_on_disk > 0 and row.uncompressed_bytes > 0 and row.parts >= 1
    by_table = tables.set_index("table")
    assert by_table.loc["otel_traces", "rows"] == 2 * CALLS  # a client and a server span
    assert by_table.loc["grpc_settled_calls", "rows"] == CALLS
    assert list(tables["bytes_on_disk"]) == sorted(tables["bytes_on_disk"], reverse=True)

    total = total_row(frame)
    for column in ("parts", "rows", "bytes_on_disk", "uncompressed_bytes"):
        assert total[column] == tables[column].sum()
    assert (frame["calls"] == CALLS).all()
    for row in frame.itertuples(index=False):
        assert row.bytes_per_call == pytest.approx(row.bytes_on_disk / CALLS)

    document = size_json(frame)
    assert document["calls"] == CALLS
    assert document["bytes_on_disk"] == int(total["bytes_on_disk"])
    # A Python float rounded (as the JSON is): numpy's round of 155145 / 300 gives 517.2,
    # the float 517.1499... rounds to 517.1.
    assert document["bytes_per_call"] == round(float(total["bytes_on_disk"]) / CALLS, 1)
    assert [entry["table"] for entry in document["tables"]] == list(tables["table"])
    text = size_text(frame)
    assert f"bytes per call over {CALLS:,} calls" in text
    assert f"biggest tables: {tables['table'].iloc[0]} " in text


def test_a_store_without_calls_has_no_bytes_per_call(module_store):
    options = own_database(module_store, "size_empty")
    create_rollups(module_store, options)  # records the rollups' version: one row, no call

    frame = store_size(module_store, options=options)

    assert list(frame["table"]) == ["grpc_rollup_version", TOTAL]
    assert (frame["calls"] == 0).all()
    assert all(math.isnan(value) for value in frame["bytes_per_call"])
    document = size_json(frame)
    assert document["bytes_per_call"] is None and document["rows"] == 1
    assert "no calls" in size_text(frame)


def test_a_database_without_tables_is_one_total_row(module_store):
    module_store.command(f"CREATE DATABASE IF NOT EXISTS {quote_identifier('size_none')}")
    frame = store_size(module_store, options=CallsOptions(database="size_none"))
    assert list(frame["table"]) == [TOTAL]
    assert int(frame["bytes_on_disk"].iloc[0]) == 0 and int(frame["calls"].iloc[0]) == 0
    assert size_json(frame)["tables"] == []

"""How much disk the store takes, per table and per call: what keeping calls costs.

Every call leaves rows in several tables (its spans in ``otel_traces``, its halves in
``grpc_calls``, its settled row in ``grpc_settled_calls``, a share of the rollups...),
so "how big will the store get" is answered per call: bytes on disk divided by the
calls stored, per table and for the whole database. A user sizing a disk for a week
of traffic multiplies that by calls per second; one deciding what to drop sees which
table costs the most.

Sizes are the engine's own (``system.parts``, active parts only: parts a merge
replaced are deleted shortly after and take no lasting room), so they are what is
on disk after compression, the same on chDB and on a ClickHouse server. Tables
without parts (views, empty tables) take no room and have no row. The calls are
counted the way every page counts them (``insights.rows.sides``: settled calls
from ``grpc_settled_calls``, the rest merged raw), over the whole store.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.insights.rows import sides
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.store.base import NAMED_OR_CURRENT_DATABASE, Store, table_exists

#: ``store_size`` columns: one row per table, biggest first, then ``TOTAL``.
SIZE_COLUMNS = (
    "table",
    "parts",
    "rows",
    "bytes_on_disk",
    "uncompressed_bytes",
    "calls",
    "bytes_per_call",
)
#: The ``table`` of the row that sums every table.
TOTAL = "(total)"
#: Tables the text report names (the rest are in the JSON and the app).
BIGGEST = 3

# Aliases differ from system.parts' own column names (rows, bytes_on_disk): ClickHouse
# resolves a name to an alias first, and sum(rows) AS rows would sum itself.
_PARTS_SQL = (
    "SELECT table, count() AS part_count, sum(rows) AS row_count,"
    " sum(bytes_on_disk) AS disk_bytes, sum(data_uncompressed_bytes) AS raw_bytes\n"
    "FROM system.parts\n"
    f"WHERE active AND database = {NAMED_OR_CURRENT_DATABASE}\n"
    "GROUP BY table ORDER BY disk_bytes DESC, table"
)
_RENAMED = {
    "part_count": "parts",
    "row_count": "rows",
    "disk_bytes": "bytes_on_disk",
    "raw_bytes": "uncompressed_bytes",
}


def stored_calls(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> int:
    """Every call in the store (settled and live), as the pages count them. Only the
    snapshot of ``filters`` applies (``as_of_ns``, ``grace_ns``), never its selection:
    the tables hold every call, so the size per call is over all of them."""
    options = options or CallsOptions()
    if not table_exists(store, options.calls_table, options.database):
        return 0
    filters = filters or CallFilters()
    everything = CallFilters(as_of_ns=filters.as_of_ns, grace_ns=filters.grace_ns)
    return int(sides(store, everything, options=options)["calls"].sum())


def table_sizes(store: Store, options: CallsOptions) -> pd.DataFrame:
    """Per table of the store's database: parts, rows, bytes on disk and uncompressed, from
    ``system.parts`` alone (cheap: the retention keeper reads it every few seconds)."""
    tables = store.query(_PARTS_SQL, {"database": options.database}, readonly=True)
    tables = tables.rename(columns=_RENAMED)
    numbers = list(_RENAMED.values())
    tables[numbers] = tables[numbers].astype("int64")
    return tables


def store_size(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """``SIZE_COLUMNS``: per table of the store's database (``options.database``, ''
    the connection's current one) its active parts, rows, bytes on disk and
    uncompressed, and bytes on disk per stored call (NaN when no call is stored);
    biggest first, and a last ``TOTAL`` row summing them. ``calls`` is the same on
    every row (``stored_calls``; ``filters``: its snapshot only)."""
    options = options or CallsOptions()
    tables = table_sizes(store, options)
    numbers = list(_RENAMED.values())
    total = pd.DataFrame([{"table": TOTAL, **{n: int(tables[n].sum()) for n in numbers}}])
    frame = pd.concat([tables, total], ignore_index=True) if len(tables) else total
    calls = stored_calls(store, filters, options=options)
    frame["calls"] = calls
    frame["bytes_per_call"] = frame["bytes_on_disk"] / calls if calls else math.nan
    return frame[list(SIZE_COLUMNS)].reset_index(drop=True)


def total_row(frame: pd.DataFrame) -> pd.Series:
    """The ``TOTAL`` row of a ``store_size`` answer."""
    return frame[frame["table"] == TOTAL].iloc[0]


def tables_only(frame: pd.DataFrame) -> pd.DataFrame:
    """The per-table rows of a ``store_size`` answer (no ``TOTAL``), biggest first."""
    return frame[frame["table"] != TOTAL].reset_index(drop=True)


def _per_call(value: Any) -> float | None:
    value = float(value)
    return None if math.isnan(value) else round(value, 1)


def _sizes(row: Any) -> dict[str, Any]:
    return {
        "parts": int(row.parts),
        "rows": int(row.rows),
        "bytes_on_disk": int(row.bytes_on_disk),
        "uncompressed_bytes": int(row.uncompressed_bytes),
        "bytes_per_call": _per_call(row.bytes_per_call),
    }


def size_json(frame: pd.DataFrame) -> dict[str, Any]:
    """``report``'s ``store`` key: ``{"calls", "parts", "rows", "bytes_on_disk",
    "uncompressed_bytes", "bytes_per_call", "tables": [{"table", ...the same}]}``,
    the totals at the top, tables biggest first; ``bytes_per_call`` null without calls."""
    total = total_row(frame)
    return {
        "calls": int(total["calls"]),
        **_sizes(total),
        "tables": [
            {"table": str(row.table), **_sizes(row)}
            for row in tables_only(frame).itertuples(index=False)
        ],
    }


def megabytes(num_bytes: float) -> str:
    """'12.3 MB', '1,234.5 MB'; '45.6 kB' under a megabyte (decimal, as ``du --si``
    and the app's sizes)."""
    if num_bytes < 1e6:
        return f"{num_bytes / 1e3:,.1f} kB"
    return f"{num_bytes / 1e6:,.1f} MB"


def size_text(frame: pd.DataFrame) -> str:
    """Two lines for the text report: the whole store, then its ``BIGGEST`` tables."""
    total = total_row(frame)
    per_call = _per_call(total["bytes_per_call"])
    calls = int(total["calls"])
    each = "no calls"
    if per_call is not None:
        each = f"{per_call:,.0f} bytes per call over {calls:,} calls"
    line = (
        f"store: {megabytes(total['bytes_on_disk'])} on disk"
        f" ({megabytes(total['uncompressed_bytes'])} uncompressed), {each}"
    )
    biggest = tables_only(frame).head(BIGGEST)
    if biggest.empty:
        return line + "\n"
    named = ", ".join(
        f"{row.table} {megabytes(row.bytes_on_disk)}"
        + (f" ({row.bytes_per_call:,.0f} B/call)" if calls else "")
        for row in biggest.itertuples(index=False)
    )
    return f"{line}\nbiggest tables: {named}\n"

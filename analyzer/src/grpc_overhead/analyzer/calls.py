"""One row per RPC, assembled inside ClickHouse: ``grpc_calls`` and the view that fills it.

The client span and the server span of a call arrive separately (different
processes, different export batches, any order). A materialized view on
``otel_traces`` turns each gRPC span into a *half row* of ``grpc_calls``:
the client span fills the client columns and leaves the server columns at
their "absent" value, the server span the other way round. Both halves carry
the same key, ``(TraceId, ClientSpanId)``: a client span is keyed by its own
``SpanId``, a server span by its ``ParentSpanId`` (the client span that
called it, propagated through ``traceparent``).

``grpc_calls`` is an ``AggregatingMergeTree`` whose columns are all
``SimpleAggregateFunction(max, T)`` with an absent value that loses every
``max`` (0, '' or -1): when ClickHouse merges parts, the two halves collapse
into one complete row, with no JOIN, in real time, on chDB and on a cluster
alike. ``max`` is also idempotent, so inserting the same span twice (a
collector retry, a backfill run while the view is live) changes nothing.

Until a background merge has run, the halves may sit in different parts, so
every read merges again (``calls_source``: ``FINAL``, ``READ_STRATEGIES``).

There is deliberately no ``PARTITION BY``: a partition key is computed per
row, and the server half's timestamps differ from the client half's, so a
time partition could put the halves of a call around midnight into different
partitions, which never merge. On a sharded cluster the same rule holds for
shards: ``otel_traces`` must be distributed by ``TraceId`` so both spans of a
call reach one shard.

Times are ``Int64`` Unix nanoseconds (0 = not from this half): phases are
differences computed in ``Int64``, never ``UInt64``, so a skewed clock gives a
negative phase, not a wrapped 18-quintillion one. Event columns hold the
*first* occurrence of an event; streams also keep the *last* one where the
clock-offset estimate needs it.
"""

from __future__ import annotations

from typing import Any

from grpc_overhead.analyzer import span_sources as src
from grpc_overhead.analyzer.attempts import fold_attempts_sql
from grpc_overhead.analyzer.call_columns import (
    CLIENT_KINDS,
    COLUMN_NAMES,
    COLUMNS,
    SERVER_KINDS,
    SPAN_ALIASES,
)
from grpc_overhead.analyzer.folding import CLIENT_KEY, FOLDED_INTO, SKIP_FOLDED
from grpc_overhead.analyzer.options import (
    READ_STRATEGIES,
    ROW_FILTER,
    ROW_START_INDEX,
    CallsOptions,
)
from grpc_overhead.analyzer.store.base import (
    NAMED_OR_CURRENT_DATABASE,
    Store,
    any_row,
    quote_identifier,
    table_exists,
)

#: Timestamps and counts: rows are ordered by trace id, so a column's values
#: are in random order and LZ4 alone barely compresses them (about 17 %);
#: T64 first drops the bits a block's values share, which makes the column
#: smaller and about twice as fast to read (bench/results/analysis.md).
T64_CODEC = "T64, LZ4"
_T64_TYPES = ("Int64", "UInt64", "UInt32", "Int16")


def create_calls_table_sql(options: CallsOptions) -> str:
    lines = [
        "    TraceId String CODEC(ZSTD(1))",
        "    ClientSpanId String CODEC(ZSTD(1))",
    ]
    lines += [
        f"    {column.name} SimpleAggregateFunction(max, {column.type})"
        + (f" DEFAULT {column.absent}" if column.absent != "0" else "")
        + (f" CODEC({T64_CODEC})" if column.type in _T64_TYPES else "")
        for column in COLUMNS
    ]
    lines.append(f"    {ROW_START_INDEX}")
    return (
        f"CREATE TABLE IF NOT EXISTS {options.calls}{options.on_cluster()} (\n"
        + ",\n".join(lines)
        + f"\n) ENGINE = {options.engine_clause()}\nORDER BY (TraceId, ClientSpanId)"
    )


def extract_select_sql(options: CallsOptions) -> str:
    """One gRPC span of ``otel_traces`` -> one half row of ``grpc_calls``.

    The single SELECT both the materialized view and ``backfill`` use. Spans
    are read without ARRAY JOIN: event timestamps are looked up by position
    in ``Events.Name``.
    """
    outputs = [
        "    TraceId",
        f"    if(is_client, {CLIENT_KEY}, ParentSpanId) AS ClientSpanId",
    ]
    outputs += [f"    {column.expression()} AS {column.name}" for column in COLUMNS]
    return (
        "WITH\n    "
        + ",\n    ".join(SPAN_ALIASES)
        + "\nSELECT\n"
        + ",\n".join(outputs)
        + f"\nFROM {options.traces}\n"
        + "WHERE "
        + src.IS_GRPC_SPAN.format(kinds=repr(CLIENT_KINDS + SERVER_KINDS))
        + "\n  AND TraceId != ''\n"
        + f"  AND {SKIP_FOLDED}"
    )


def create_view_sql(options: CallsOptions) -> str:
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {options.qualified(options.view)}"
        f"{options.on_cluster()}\nTO {options.calls}\nAS {extract_select_sql(options)}"
    )


def backfill_sql(options: CallsOptions) -> str:
    columns = ", ".join(quote_identifier(name) for name in COLUMN_NAMES)
    return f"INSERT INTO {options.calls} ({columns})\n{extract_select_sql(options)}"


def view_exists(store: Store, options: CallsOptions) -> bool:
    return table_exists(store, options.view, options.database)


def _view_is_current(store: Store, options: CallsOptions) -> bool:
    """Whether the existing view fills every column this version knows (and takes REST spans)."""
    found = store.query(
        "SELECT create_table_query AS query FROM system.tables WHERE name = {name:String}"
        f" AND database = {NAMED_OR_CURRENT_DATABASE}",
        {"database": options.database, "name": options.view},
    )
    if found.empty:
        return False
    query = str(found["query"].iloc[0])
    return (
        FOLDED_INTO in query
        and "grpc_overhead.transport" in query
        and "StatusMessage" in query  # A72 status codes (call_columns._A72_CODE)
        and "'compressed', '')) AS compression" in query  # call_columns._COMPRESSION
        and "a['message.type']" in query  # semconv's older spellings (span_sources.semconv)
        and "sampling.server_instance" in query  # call_columns._SERVER_INSTANCE_SAID
        and all(f"AS {column.name}" in query for column in COLUMNS)
    )


def create_calls(
    store: Store, options: CallsOptions | None = None, *, backfill: bool = True
) -> bool:
    """Create ``grpc_calls`` and its view if missing; idempotent, safe on every start.

    ``otel_traces`` must exist (``schema.create_schema``). When the view is
    new and ``backfill`` is true, spans already in ``otel_traces`` (a store
    written by the collector's own exporter before the analyzer first ran)
    are assembled too. The view is created before the backfill, so no span
    falls between the two; a span seen by both is harmless (``max``).
    Returns True when the view was created now.
    """
    options = options or CallsOptions()
    store.command(create_calls_table_sql(options))
    # Tables made by an older version get the newer columns and index (for their
    # new parts); a view that does not fill every column is made anew.
    index = ROW_START_INDEX.replace("INDEX", "INDEX IF NOT EXISTS", 1)
    store.command(f"ALTER TABLE {options.calls}{options.on_cluster()} ADD {index}")
    store.command(
        f"ALTER TABLE {options.calls}{options.on_cluster()} "
        + ", ".join(
            f"ADD COLUMN IF NOT EXISTS {column.name} SimpleAggregateFunction(max, {column.type})"
            + (f" DEFAULT {column.absent}" if column.absent != "0" else "")
            for column in COLUMNS
        )
    )
    existed = view_exists(store, options)
    if existed and not _view_is_current(store, options):
        store.command(f"DROP VIEW {options.qualified(options.view)}{options.on_cluster()}")
    store.command(create_view_sql(options))
    if not existed and backfill and _has_spans(store, options):
        backfill_calls(store, options)
    return not existed


def _has_spans(store: Store, options: CallsOptions) -> bool:
    """Whether ``otel_traces`` holds any span: on a fresh store (each ``serve`` start on a
    new directory) the backfill's statement would cost 0.1 s of analysis for no row. A span
    stored after this check went through the view, which already existed."""
    return any_row(store, options.traces, readonly=False)


def backfill_calls(store: Store, options: CallsOptions | None = None) -> None:
    """Assemble every gRPC span already in ``otel_traces`` into ``grpc_calls``.

    Idempotent: running it twice, or over spans the view already saw, leaves
    the merged rows unchanged (every column is a ``max``).
    """
    store.command(backfill_sql(options or CallsOptions()))


# -- reading -----------------------------------------------------------------------------------


def calls_source(options: CallsOptions | None = None, keys: str = "") -> str:
    """One complete row per call (every column of ``COLUMN_NAMES``), pre-filtered by
    ``ROW_FILTER`` (and to the (TraceId, ClientSpanId) pairs of the ``keys`` subquery:
    a key holds for both halves, so it filters before the merge), merged the
    ``options.read`` way."""
    options = options or CallsOptions()
    read = options.read
    row_filter = f"{ROW_FILTER} AND (TraceId, ClientSpanId) IN ({keys})" if keys else ROW_FILTER
    # The keys of A72 rows (call span, attempts): a cheap scan of three columns that
    # lets the fold's branch read only those calls, so stores without A72 spans pay
    # next to nothing for it. Key columns are equal in both halves, so the filter is
    # safe before the halves merge.
    a72_keys = (
        "(TraceId, ClientSpanId) IN (SELECT TraceId, ClientSpanId"
        f" FROM {options.calls} WHERE CallSpanId != '' AND {row_filter})"
    )
    if read == "final":
        base = f"SELECT * FROM {options.calls} FINAL PREWHERE {row_filter}"
        a72 = f"SELECT * FROM {options.calls} FINAL PREWHERE {row_filter} AND {a72_keys}"
    elif read == "group_by":
        merged = ", ".join(f"max({column.name}) AS {column.name}" for column in COLUMNS)

        def grouped(where: str) -> str:
            return (
                f"SELECT TraceId, ClientSpanId, {merged}"
                f" FROM (SELECT * FROM {options.calls} WHERE {where})"
                " GROUP BY TraceId, ClientSpanId"
            )

        base, a72 = grouped(row_filter), grouped(f"{row_filter} AND {a72_keys}")
    else:
        raise ValueError(f"read must be one of {READ_STRATEGIES}, not {read!r}")
    # A72 calls span several rows (call, attempts): folded into one per call.
    return fold_attempts_sql(base, a72, [column.name for column in COLUMNS])


def rows_to_scan(store: Store, options: CallsOptions, parameters: dict[str, Any]) -> bool:
    """Whether any half row passes ``ROW_FILTER``: a cheap check (two columns, no
    merging) that lets a query read settled minutes from the rollups alone."""
    return any_row(store, options.calls, ROW_FILTER, parameters, prewhere=True)

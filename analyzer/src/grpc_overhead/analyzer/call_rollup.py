"""Settled calls kept merged, phases computed: what keeps the app's pages fast at 1 M calls.

The Overview, Payload, Phases (tail, sides) pages aggregate per-call rows
(``rows_sql``): every call's two halves merged (``FINAL`` or ``GROUP BY``
over every column) and every phase computed, then aggregated. At 1 M calls on
two cores the merge and the phase expressions were 85-95 % of each query
(measured: Overview 1.74 s of which 0.31 s is the aggregation proper; Payload
2.24 s -> 0.30 s; the tail 1.10 s -> 0.09 s; docs/notes/issue-13d.md).

Pages need more than sums and sketches (status codes per method, the
payload fits' regressions, the slowest calls' ids, buckets finer than a
minute), so rather than one pre-aggregate per page, ``settle`` also keeps
``grpc_settled_calls``: the ``rows_sql`` rows of each settled minute, one
per call, ordered by call start. A page then reads settled minutes from it
``UNION ALL`` the same rows computed raw for the rest (the edges of the
range, the unsettled last minutes): the same columns, the same values, so
every aggregate over them is the one computed raw, and only the unsettled
tail pays for the merge.

Values are those of ``per_call_sql(clock=True)``: on one host (offset 0)
identical to the unclocked rows a page computes there; across hosts the
one-way phases carry each minute's estimate as the settle computed it, as
``grpc_phase_rollup``'s do.

The rollups' layout is versioned (``ROLLUP_VERSION``, kept in
``grpc_rollup_version``): a store whose rollups were made by another
version has them dropped and rebuilt from the calls by the next settle, so
an existing store upgrades by itself.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.declared_columns import SETTLED_CALLS_COLUMNS, column_list
from grpc_overhead.analyzer.options import CALL_FILTER, CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.result_columns import CALL_WEIGHT
from grpc_overhead.analyzer.store.base import (
    NAMED_OR_CURRENT_DATABASE,
    Store,
    any_row,
    table_exists,
)

#: Bump when a rollup table's columns or meaning change: the rollups are rebuilt.
#: 1: phase and offset rollups (no version table); 2: + grpc_settled_calls; 3: A72 status
#: codes and attempts that reached no server never a call of their own (1970's minute);
#: 4: phase_bounds (request_network only for our clients, request_receive, no network
#: phase negative on a shared clock); 5: the halves' sampling weights and reasons; 6: an
#: offset window's calls weighted (the calls made, under sampling).
ROLLUP_VERSION = 6
VERSION_TABLE = "grpc_rollup_version"
SETTLED_CALLS_TABLE = "grpc_settled_calls"

#: The compression a call used, as one label. gRPC compresses whole messages
#: (``grpc.compression``: gzip, deflate; absent = identity), the prediction
#: service compresses its feature blob itself (``grpc_overhead.payload.codec``:
#: zstd, lz4, snappy; none). Both at once reads "gzip+zstd"; neither "none".
ALGORITHM = (
    "multiIf(payload_codec NOT IN ('', 'none') AND compression NOT IN ('', 'identity'),"
    " concat(compression, '+', payload_codec),"
    " payload_codec NOT IN ('', 'none'), toString(payload_codec),"
    " compression NOT IN ('', 'identity'), toString(compression), 'none')"
)


def rows_sql(
    options: CallsOptions | None = None,
    clock: bool = False,
    keys: str = "",
    phases: Collection[str] | None = None,
) -> str:
    """One row per call matching the filters: every column of ``grpc_calls``,
    ``call_start_ns``, ``algorithm``, and per phase ``{name}_value`` (ns) and
    ``{name}_defined``: ``phases.per_call_sql`` with these columns. Parameters:
    ``CallFilters.parameters()`` + ``ClockOptions.parameters()``.

    One-way phases are the best estimates: exact where both halves share a clock;
    with ``clock`` (calls across hosts) corrected by the offset estimate too.
    ``phases``: only those (``per_call_sql``).
    """
    columns = ("*", f"{ALGORITHM} AS algorithm", f"{CALL_WEIGHT} AS weight")
    return per_call_sql(options, clock=clock, columns=columns, keys=keys, phases=phases)


def _plain_engine(options: CallsOptions) -> str:
    engine = options.engine.replace("Aggregating", "") if options.engine else "MergeTree"
    return f"{engine}({options.engine_params if options.engine else ''})"


#: After the ``rows_sql`` columns: how each call's offset was estimated (the call
#: explorer and the Clock offsets page show it). Not part of the rows pages read.
ESTIMATE_COLUMNS = ("own_window_offset_ns", "pair_offset_ns", "clock_uncertainty_ns")


def settled_calls_select_sql(options: CallsOptions | None = None) -> str:
    """What the table's columns are: those of ``rows_sql(clock=False)`` (a page's raw
    rows), ``call_start_ns`` as Int64, then ``ESTIMATE_COLUMNS``."""
    estimates = ", ".join(f"toFloat64(0) AS {name}" for name in ESTIMATE_COLUMNS)
    return (
        f"SELECT * REPLACE (toInt64(call_start_ns) AS call_start_ns), {estimates}\n"
        f"FROM ({rows_sql(options)})"
    )


def create_settled_calls_sql(options: CallsOptions) -> str:
    """The table, its columns declared (``declared_columns``: the engine would analyze
    ``settled_calls_select_sql`` to learn them, 0.18 s) and compressed with ZSTD at
    ``CODEC_LEVEL``; keyed by call start so a time range reads only its parts."""
    columns = column_list(
        SETTLED_CALLS_COLUMNS, codec=f"ZSTD({CODEC_LEVEL})", uncompressed=("call_start_ns",)
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(SETTLED_CALLS_TABLE)}"
        f"{options.on_cluster()}{columns}\n"
        f"ENGINE = {_plain_engine(options)}\nORDER BY call_start_ns"
    )


def settled_calls_parameters() -> dict[str, Any]:
    """The parameters ``settled_calls_select_sql`` takes (their defaults: its columns do not
    depend on them)."""
    return {**CallFilters().parameters(), **ClockOptions().parameters()}


def ensure_version(store: Store, options: CallsOptions, tables: list[str]) -> bool:
    """Drop ``tables`` (the rollups) when they were made by another ``ROLLUP_VERSION``;
    record the current one. True when they were dropped (a settle rebuilds them)."""
    version = options.qualified(VERSION_TABLE)
    store.command(
        f"CREATE TABLE IF NOT EXISTS {version}{options.on_cluster()} (version UInt32)"
        f" ENGINE = {_plain_engine(options)} ORDER BY tuple()"
    )
    found = store.query(f"SELECT max(version) AS v, count() AS n FROM {version}")
    if int(found["n"].iloc[0]) and int(found["v"].iloc[0]) == ROLLUP_VERSION:
        return False
    stale = [table for table in tables if table_exists(store, table, options.database)]
    for table in stale:
        store.command(f"DROP TABLE IF EXISTS {options.qualified(table)}{options.on_cluster()}")
    store.command(f"TRUNCATE TABLE {version}{options.on_cluster()}")
    store.command(f"INSERT INTO {version} VALUES ({{v:UInt32}})", {"v": ROLLUP_VERSION})
    return bool(stale)


#: ``grpc_settled_calls``' ZSTD level (see ``create_settled_calls``).
CODEC_LEVEL = 3


def create_settled_calls(store: Store, options: CallsOptions) -> None:
    """Create the table if missing, its columns compressed with ZSTD at level ``CODEC_LEVEL``.

    ZSTD(1) was 40 % smaller than the default LZ4 at 1 M generated calls (369 -> 221 MB),
    for as fast a read; level 3 is another 15 % on a demo's real calls (295 -> 250 bytes
    per call; 4 % on generated ones, whose values are hashes), read and written as fast
    (the settle writes it, in the background, never the intake). Delta on the timestamp
    columns, T64 or Gorilla gained less or nothing (measured). A table made before keeps
    its codec (ZSTD(1)): only new parts would differ, so it is left alone."""
    if has_settled_calls(store, options):
        return
    store.command(create_settled_calls_sql(options))


def settled_columns(store: Store, options: CallsOptions, *, estimates: bool = False) -> list[str]:
    """The table's columns in order (those of ``rows_sql``; with ``estimates``, also
    ``ESTIMATE_COLUMNS``), quoted for a select list."""
    found = store.query(
        "SELECT name FROM system.columns WHERE table = {table:String}"
        f" AND database = {NAMED_OR_CURRENT_DATABASE}"
        " ORDER BY position",
        {"table": SETTLED_CALLS_TABLE, "database": options.database},
    )
    names = [name for name in found["name"] if estimates or name not in ESTIMATE_COLUMNS]
    return [f"`{name}`" for name in names]


def insert_settled_calls(store: Store, options: CallsOptions, parameters: dict[str, Any]) -> None:
    """The rows of the calls starting in the round's ``[since_ns, until_ns)``."""
    columns = ", ".join(settled_columns(store, options, estimates=True))
    store.command(
        f"INSERT INTO {options.qualified(SETTLED_CALLS_TABLE)} ({columns})\n"
        f"SELECT {columns} FROM ({rows_sql(options, clock=True)})",
        parameters,
    )


def settled_calls_in(store: Store, options: CallsOptions, parameters: dict[str, Any]) -> bool:
    """Whether any call of the round's ``[since_ns, until_ns)`` is stored already."""
    return any_row(
        store,
        options.qualified(SETTLED_CALLS_TABLE),
        "call_start_ns >= {since_ns:Int64} AND call_start_ns < {until_ns:Int64}",
        parameters,
        readonly=False,
    )


def delete_settled_calls(store: Store, options: CallsOptions, parameters: dict[str, Any]) -> None:
    """Forget the rows of minutes ``[start, end)`` (re-rolled after late arrivals)."""
    store.command(
        f"DELETE FROM {options.qualified(SETTLED_CALLS_TABLE)}"
        " WHERE call_start_ns >= {start:Int64} AND call_start_ns < {end:Int64}",
        parameters,
    )


def has_settled_calls(store: Store, options: CallsOptions) -> bool:
    return table_exists(store, SETTLED_CALLS_TABLE, options.database)


def settled_rows_sql(columns: list[str], options: CallsOptions) -> str:
    """The stored rows of settled calls in ``[settled_from_ns, settled_until_ns)`` that
    the filters keep. (A raw read's ``keys`` subquery only spares merging calls a
    query then drops; it scans halves outside the settled range, so not here.)"""
    where = (
        "call_start_ns >= {settled_from_ns:Int64} AND call_start_ns < {settled_until_ns:Int64}"
        " AND call_start_ns >= {since_ns:Int64} AND call_start_ns < {until_ns:Int64}"
        f" AND {CALL_FILTER}"
    )
    return (
        f"SELECT {', '.join(columns)} FROM {options.qualified(SETTLED_CALLS_TABLE)} WHERE {where}"
    )

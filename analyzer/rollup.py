"""Rollups of settled minutes: what keeps the breakdown fast over millions of calls.

Computing every phase of every call and feeding quantile sketches costs
0.7 µs per call on two cores once the halves are merged, several times that
while they are not (bench/results/analysis.md): seconds at 10 M calls. But
calls stop changing once both halves have arrived, so each
minute of calls is computed once, when it has *settled* (older than
``DEFAULT_SETTLE_DELAY``, by default 5 minutes: spans are exported within
seconds and the collector retries for a few minutes), and kept as mergeable
states:

* ``grpc_phase_rollup`` (AggregatingMergeTree, key ``window_start_ns,
  service, method, run_id``): calls, and per phase the t-digest state, the sum
  and the count of defined values, exactly the states ``phases.breakdown_sql``
  builds from raw calls, so a breakdown merges rollup rows for the settled
  minutes with raw states for the rest (the edges of ``--since``/``--until``
  and the last minutes) in one query.
* ``grpc_offset_rollup`` (MergeTree, key ``window_start_ns, client_domain,
  server_domain``): each minute's clock-offset estimate per domain pair.

Rollups assume the default clock options (60 s windows, host domains); a
report with other options computes everything raw. ``settle`` advances a
watermark kept in the phase rollup itself: each run also writes a marker
row (``calls = 0``) for its last minute in the same INSERT as the states, so
the watermark moves exactly when the states land. A span that arrives after
its minute settled is stored (``calls()`` and SQL see it) but not in the
breakdown, which counts its call as it was at settle time; a delay longer
than the collector's retry horizon makes that as rare as data lost in
transit.

Settling runs in the process that owns the store: ``grpc-overhead serve``
(every minute) and ``grpc-overhead report`` on a chDB store. Two processes
settling one ClickHouse server at the same moment would count a minute
twice; there, let one process do it.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.calls import CallFilters, CallsOptions, time_parameters
from grpc_overhead.analyzer.clock_offsets import (
    OFFSET_CTES,
    ClockOptions,
    merged_cte,
    pair_offsets,
)
from grpc_overhead.analyzer.phases import (
    ALL_PHASES,
    QUANTILE_STATE_TYPE,
    per_call_sql,
    phase_breakdown,
    state_aggregates,
)
from grpc_overhead.analyzer.store.base import Store

WINDOW_NS = 60_000_000_000
DEFAULT_SETTLE_DELAY = timedelta(minutes=5)


def create_rollup_tables_sql(options: CallsOptions) -> list[str]:
    phase_columns = []
    for name in ALL_PHASES:
        phase_columns += [
            f"    {name}_q {QUANTILE_STATE_TYPE}",
            f"    {name}_sum SimpleAggregateFunction(sum, Float64)",
            f"    {name}_calls SimpleAggregateFunction(sum, UInt64)",
        ]
    phases = (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(options.rollup_table)}"
        f"{options.on_cluster()} (\n"
        "    window_start_ns Int64,\n"
        "    service LowCardinality(String),\n"
        "    method LowCardinality(String),\n"
        "    run_id LowCardinality(String),\n"
        "    calls SimpleAggregateFunction(sum, UInt64),\n"
        + ",\n".join(phase_columns)
        + f"\n) ENGINE = {options.engine_clause()}\n"
        "ORDER BY (window_start_ns, service, method, run_id)"
    )
    offsets_engine = options.engine.replace("Aggregating", "") if options.engine else "MergeTree"
    offsets = (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(options.offset_rollup_table)}"
        f"{options.on_cluster()} (\n"
        "    window_start_ns Int64,\n"
        "    client_domain LowCardinality(String),\n"
        "    server_domain LowCardinality(String),\n"
        "    window_offset_ns Float64,\n"
        "    window_uncertainty_ns Float64,\n"
        "    window_calls UInt64\n"
        f") ENGINE = {offsets_engine}({options.engine_params if options.engine else ''})\n"
        "ORDER BY (window_start_ns, client_domain, server_domain)"
    )
    return [phases, offsets]


def create_rollups(store: Store, options: CallsOptions | None = None) -> None:
    """Create both rollup tables if missing (idempotent)."""
    for statement in create_rollup_tables_sql(options or CallsOptions()):
        store.command(statement)


def settled_until(store: Store, options: CallsOptions | None = None) -> int:
    """Unix ns up to which minutes are in the rollup (0: none yet)."""
    options = options or CallsOptions()
    found = store.query(
        f"SELECT max(window_start_ns) AS last, count() AS n "
        f"FROM {options.qualified(options.rollup_table)}"
    )
    if not int(found["n"].iloc[0]):
        return 0
    return int(found["last"].iloc[0]) + WINDOW_NS


def _first_call_ns(store: Store, options: CallsOptions) -> int | None:
    found = store.query(
        "SELECT min(if(client_start_ns != 0, client_start_ns, server_start_ns)) AS first, "
        f"count() AS n FROM {options.calls}"
    )
    return int(found["first"].iloc[0]) if int(found["n"].iloc[0]) else None


def _settle_parameters(start: int, end: int) -> dict[str, Any]:
    return {
        **CallFilters().parameters(),
        **ClockOptions().parameters(),
        **time_parameters(start, end),
        "marker_ns": end - WINDOW_NS,
    }


def settle_sql(options: CallsOptions) -> tuple[str, str]:
    """(offsets INSERT, phases INSERT with the watermark marker) for ``[since_ns, until_ns)``."""
    offsets = (
        f"INSERT INTO {options.qualified(options.offset_rollup_table)}\n"
        f"WITH\n{merged_cte(options, 'final')},\n{OFFSET_CTES}\n"
        "SELECT window_start_ns, client_domain, server_domain, window_offset_ns,"
        " window_uncertainty_ns, window_calls FROM windows"
    )
    window = f"intDiv(call_start_ns, {WINDOW_NS}) * {WINDOW_NS}"
    states = ",\n    ".join(state_aggregates())
    empty_states = ",\n    ".join(state_aggregates(empty=True))
    phases = (
        f"INSERT INTO {options.qualified(options.rollup_table)}\n"
        f"SELECT {window} AS window_start_ns, service, method, run_id, count() AS calls,\n"
        f"    {states}\n"
        f"FROM ({per_call_sql(options, 'final')})\n"
        "GROUP BY window_start_ns, service, method, run_id\n"
        "UNION ALL\n"
        "SELECT {marker_ns:Int64} AS window_start_ns, '' AS service, '' AS method,"
        " '' AS run_id, toUInt64(0) AS calls,\n"
        f"    {empty_states}\n"
        "FROM system.one"
    )
    return offsets, phases


def settle(
    store: Store,
    options: CallsOptions | None = None,
    *,
    delay: timedelta = DEFAULT_SETTLE_DELAY,
    now_ns: int | None = None,
) -> int:
    """Roll up every whole minute older than ``delay`` not rolled up yet; returns minutes.

    Idempotent per minute: the watermark moves with the states it covers.
    """
    options = options or CallsOptions()
    create_rollups(store, options)
    now_ns = time.time_ns() if now_ns is None else now_ns
    end = (now_ns - int(delay / timedelta(microseconds=1)) * 1000) // WINDOW_NS * WINDOW_NS
    start = settled_until(store, options)
    if not start:
        first = _first_call_ns(store, options)
        if first is None:
            return 0
        start = first // WINDOW_NS * WINDOW_NS
    if end <= start:
        return 0
    offsets, phases = settle_sql(options)
    parameters = _settle_parameters(start, end)
    store.command(offsets, parameters)
    store.command(phases, parameters)
    return (end - start) // WINDOW_NS


def settled_range(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    options: CallsOptions | None = None,
) -> tuple[int, int] | None:
    """The whole settled minutes inside the filters' time range, or None."""
    if (clock or ClockOptions()) != ClockOptions():
        return None
    options = options or CallsOptions()
    if not _exists(store, options.rollup_table):
        return None
    parameters = (filters or CallFilters()).parameters()
    watermark = settled_until(store, options)
    start = -(-parameters["since_ns"] // WINDOW_NS) * WINDOW_NS
    end = min(parameters["until_ns"] // WINDOW_NS * WINDOW_NS, watermark)
    return (start, end) if end > start else None


def _exists(store: Store, table: str) -> bool:
    found = store.query(
        "SELECT count() AS n FROM system.tables WHERE database = currentDatabase() "
        "AND name = {name:String}",
        {"name": table},
    )
    return bool(int(found["n"].iloc[0]))


def breakdown(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """``phases.phase_breakdown``, reading settled minutes from the rollup."""
    settled = settled_range(store, filters, clock, options)
    return phase_breakdown(store, filters, clock, options=options, settled=settled)


def offsets(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """``clock_offsets.pair_offsets``, reading settled minutes from the offset rollup."""
    settled = settled_range(store, filters, clock, options)
    return pair_offsets(store, filters, clock, options=options, settled=settled)

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
* ``grpc_settled_calls`` (``call_rollup``): each settled call's merged row with
  its phases computed, which the app's pages read instead of merging halves.
  The layout is versioned (``call_rollup.ROLLUP_VERSION``): rollups of another
  version are dropped and rebuilt from the calls.

Rollups assume the default clock options (60 s windows, host domains); a
report with other options computes everything raw. ``settle`` advances a
watermark kept in the phase rollup itself: each run also writes a marker
row (``calls = 0``) for its last minute in the same INSERT as the states, so
the watermark moves exactly when the states land.

Settling is incremental: each round covers at most ``MAX_ROWS_PER_ROUND`` call
halves (at least one minute), as its own INSERTs (offsets, the settled calls with
their phases, then the phase states summed from those rows), so a first settle over
millions of stored calls is many short store operations, not one long one (on chDB
the store's connection is held per statement; the intake writes through sessions of
its own anyway), and an interrupted settle resumes at the watermark.

Late spans: a half row that lands in ``grpc_calls`` is recorded, with the
engine's clock, in ``grpc_call_arrivals`` by a materialized view (its minute;
for a server half without its client half, every minute within the halves'
margin, since the call's minute is the client's). Each run records its
start in ``grpc_rollup_runs``; the next run re-rolls every settled minute
with an arrival since then (minus ``ARRIVAL_MARGIN_NS``, for inserts still
committing when the previous run read), replacing its rows while holding the
store (``Store.exclusive``), so breakdowns always equal a raw computation.

Settling runs in the process that owns the store: ``grpc-overhead serve``
(every minute) and ``grpc-overhead report`` on a chDB store. Two processes
settling one ClickHouse server at the same moment would count a minute
twice; there, let one process do it.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import call_rollup
from grpc_overhead.analyzer.clock_offsets import OFFSET_CTES, ClockOptions, merged_cte, pair_offsets
from grpc_overhead.analyzer.options import (
    CALL_START,
    HALF_MARGIN_NS,
    HAS_ROW_START,
    INT64_MAX,
    CallFilters,
    CallsOptions,
    time_parameters,
)
from grpc_overhead.analyzer.phase_aggregates import state_aggregates
from grpc_overhead.analyzer.phases import phase_breakdown
from grpc_overhead.analyzer.result_columns import ALL_PHASES, QUANTILE_STATE_TYPE
from grpc_overhead.analyzer.store.base import Store, table_exists

WINDOW_NS = 60_000_000_000
DEFAULT_SETTLE_DELAY = timedelta(minutes=5)
#: Call halves per settle round: about half a second of rollup work on two cores.
MAX_ROWS_PER_ROUND = 400_000
#: An insert's arrival time is taken before its rows become visible: arrivals
#: this much before the previous run's start are checked again.
ARRIVAL_MARGIN_NS = 30_000_000_000
ARRIVALS_TABLE = "grpc_call_arrivals"
ARRIVALS_VIEW = "grpc_call_arrivals_mv"
RUNS_TABLE = "grpc_rollup_runs"


def create_rollup_tables_sql(options: CallsOptions) -> list[str]:
    phase_columns = []
    for name in ALL_PHASES:
        phase_columns += [
            f"    {name}_q {QUANTILE_STATE_TYPE}",
            f"    {name}_sum SimpleAggregateFunction(sum, Float64)",
            f"    {name}_calls SimpleAggregateFunction(sum, Float64)",
        ]
    phases = (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(options.rollup_table)}"
        f"{options.on_cluster()} (\n"
        "    window_start_ns Int64,\n"
        "    service LowCardinality(String),\n"
        "    method LowCardinality(String),\n"
        "    run_id LowCardinality(String),\n"
        "    calls SimpleAggregateFunction(sum, Float64),\n"
        "    stored_calls SimpleAggregateFunction(sum, UInt64),\n"
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
    # A rollup table made by an older version gets the phases added since (their
    # states are empty in the minutes it settled before).
    added = (
        f"ALTER TABLE {options.qualified(options.rollup_table)}{options.on_cluster()} "
        + ", ".join(f"ADD COLUMN IF NOT EXISTS {column.strip()}" for column in phase_columns)
    )
    return [phases, added, offsets]


def _minute(expression: str) -> str:
    return f"intDiv({expression}, {WINDOW_NS}) * {WINDOW_NS}"


def create_arrivals_sql(options: CallsOptions) -> list[str]:
    """Arrival log of ``grpc_calls`` half rows, its view, and the log of settle runs."""
    engine = options.engine.replace("Aggregating", "") if options.engine else "MergeTree"
    engine += f"({options.engine_params if options.engine else ''})"
    arrivals = (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(ARRIVALS_TABLE)}{options.on_cluster()} "
        f"(window_start_ns Int64, arrived_ns Int64) ENGINE = {engine} ORDER BY window_start_ns"
    )
    margin = HALF_MARGIN_NS
    view = (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {options.qualified(ARRIVALS_VIEW)}"
        f"{options.on_cluster()}\nTO {options.qualified(ARRIVALS_TABLE)}\nAS SELECT DISTINCT\n"
        f"    arrayJoin(if(client_start_ns != 0, [{_minute('client_start_ns')}],"
        f" range({_minute(f'server_start_ns - {margin}')},"
        f" {_minute(f'server_start_ns + {margin}')} + 1, {WINDOW_NS})))"
        " AS window_start_ns,\n"
        "    toUnixTimestamp64Nano(now64(9)) AS arrived_ns\n"
        f"FROM {options.calls}"
    )
    runs = (
        f"CREATE TABLE IF NOT EXISTS {options.qualified(RUNS_TABLE)}{options.on_cluster()} "
        f"(started_ns Int64, until_ns Int64) ENGINE = {engine} ORDER BY started_ns"
    )
    return [arrivals, view, runs]


def create_rollups(store: Store, options: CallsOptions | None = None) -> None:
    """Create the rollup tables and the arrival log if missing (idempotent); rollups
    made by another ``call_rollup.ROLLUP_VERSION`` are dropped first, to be rebuilt."""
    options = options or CallsOptions()
    rollups = [options.rollup_table, options.offset_rollup_table, call_rollup.SETTLED_CALLS_TABLE]
    call_rollup.ensure_version(store, options, rollups)
    for statement in create_rollup_tables_sql(options) + create_arrivals_sql(options):
        store.command(statement)
    call_rollup.create_settled_calls(store, options)


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
        f"count() AS n FROM {options.calls} WHERE {HAS_ROW_START}"
    )
    return int(found["first"].iloc[0]) if int(found["n"].iloc[0]) else None


def _settle_parameters(start: int, end: int) -> dict[str, Any]:
    # Nothing held back (``SHOWN_FILTER``): a settled minute is minutes past any grace
    # period, and a peer half that still comes re-rolls its minute (late arrivals).
    return {
        **CallFilters(as_of_ns=INT64_MAX, grace_ns=0).parameters(),
        **ClockOptions().parameters(),
        **time_parameters(start, end),
        "marker_ns": end - WINDOW_NS,
    }


def settle_sql(options: CallsOptions) -> tuple[str, str]:
    """(offsets INSERT, phases INSERT with the watermark marker) for ``[since_ns, until_ns)``."""
    offsets = (
        f"INSERT INTO {options.qualified(options.offset_rollup_table)}\n"
        f"WITH\n{merged_cte(options)},\n{OFFSET_CTES}\n"
        "SELECT window_start_ns, client_domain, server_domain, window_offset_ns,"
        " window_uncertainty_ns, window_calls FROM windows"
    )
    window = f"intDiv(call_start_ns, {WINDOW_NS}) * {WINDOW_NS}"
    states = ",\n    ".join(state_aggregates())
    empty_states = ",\n    ".join(state_aggregates(empty=True))
    # The round's calls as ``insert_settled_calls`` just stored them: ``per_call_sql``'s
    # rows, without the engine analyzing every phase expression again (0.7 s a round).
    settled = (
        f"SELECT * FROM {options.qualified(call_rollup.SETTLED_CALLS_TABLE)}"
        " WHERE call_start_ns >= {since_ns:Int64} AND call_start_ns < {until_ns:Int64}"
    )
    phases = (
        f"INSERT INTO {options.qualified(options.rollup_table)}\n"
        f"SELECT {window} AS window_start_ns, service, method, run_id, sum(weight) AS calls,"
        " count() AS stored_calls,\n"
        f"    {states}\n"
        f"FROM ({settled})\n"
        "GROUP BY window_start_ns, service, method, run_id\n"
        "UNION ALL\n"
        "SELECT {marker_ns:Int64} AS window_start_ns, '' AS service, '' AS method,"
        " '' AS run_id, toFloat64(0) AS calls, toUInt64(0) AS stored_calls,\n"
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
    max_rows_per_round: int = MAX_ROWS_PER_ROUND,
    arrival_margin_ns: int = ARRIVAL_MARGIN_NS,
    stop: threading.Event | None = None,
) -> int:
    """Re-roll minutes with late arrivals, then roll up every whole minute older than
    ``delay`` not rolled up yet, in rounds; returns the minutes newly rolled up.

    Idempotent per minute: the watermark moves with the states it covers. ``stop``
    set ends it between rounds (a process shutting down while it rolls up a big
    store): the run is not recorded, so the next one looks at the same arrivals.
    """
    options = options or CallsOptions()
    create_rollups(store, options)
    started_ns = store_clock_ns(store)
    watermark = settled_until(store, options)
    reroll_late_minutes(store, options, watermark, arrival_margin_ns, max_rows_per_round)
    now_ns = time.time_ns() if now_ns is None else now_ns
    end = (now_ns - int(delay / timedelta(microseconds=1)) * 1000) // WINDOW_NS * WINDOW_NS
    start = watermark
    if not start:
        first = _first_call_ns(store, options)
        start = end if first is None else first // WINDOW_NS * WINDOW_NS
    settled = 0
    for round_start, round_end in plan_rounds(store, options, start, end, max_rows_per_round):
        if stop is not None and stop.is_set():
            return settled
        _roll(store, options, round_start, round_end)
        settled += (round_end - round_start) // WINDOW_NS
    _finish_run(store, options, started_ns, max(start, end), arrival_margin_ns)
    return settled


def plan_rounds(
    store: Store, options: CallsOptions, start: int, end: int, max_rows: int
) -> list[tuple[int, int]]:
    """``[start, end)`` cut at minute edges into ranges of at most ``max_rows`` half rows
    (a busier single minute is a round of its own). One cheap scan of two columns."""
    if end <= start:
        return []
    counts = store.query(
        f"SELECT {_minute(CALL_START)} AS minute, count() AS n "
        f"FROM {options.calls} WHERE minute >= {{start:Int64}} AND minute < {{end:Int64}} "
        "GROUP BY minute ORDER BY minute",
        {"start": start, "end": end},
    )
    rounds, round_start, rows = [], start, 0
    for minute, n in zip(counts["minute"], counts["n"], strict=True):
        if rows and rows + int(n) > max_rows:
            rounds.append((round_start, int(minute)))
            round_start, rows = int(minute), 0
        rows += int(n)
    rounds.append((round_start, end))
    return rounds


def _roll(store: Store, options: CallsOptions, start: int, end: int) -> None:
    offsets, phases = settle_sql(options)
    parameters = _settle_parameters(start, end)
    store.command(offsets, parameters)
    # A round killed before its marker left its calls stored: they go first, since the
    # phases are summed from the stored calls (a DELETE only in that rare case).
    if call_rollup.settled_calls_in(store, options, parameters):
        call_rollup.delete_settled_calls(store, options, {"start": start, "end": end})
    call_rollup.insert_settled_calls(store, options, parameters)
    store.command(phases, parameters)  # last: its marker row moves the watermark


def late_minutes(
    store: Store, options: CallsOptions, watermark: int, margin_ns: int = ARRIVAL_MARGIN_NS
) -> list[int]:
    """Settled minutes (before ``watermark``) with call halves that arrived since the
    last run started (minus the margin); none before the first run."""
    last = store.query(
        f"SELECT max(started_ns) AS started, count() AS n FROM {options.qualified(RUNS_TABLE)}"
    )
    if not watermark or not int(last["n"].iloc[0]):
        return []
    found = store.query(
        f"SELECT DISTINCT window_start_ns FROM {options.qualified(ARRIVALS_TABLE)} "
        "WHERE window_start_ns < {watermark:Int64} AND arrived_ns >= {since:Int64} "
        "ORDER BY window_start_ns",
        {"watermark": watermark, "since": int(last["started"].iloc[0]) - margin_ns},
    )
    return [int(minute) for minute in found["window_start_ns"]]


def reroll_late_minutes(
    store: Store,
    options: CallsOptions,
    watermark: int,
    margin_ns: int = ARRIVAL_MARGIN_NS,
    max_rows_per_round: int = MAX_ROWS_PER_ROUND,
) -> int:
    """Recompute the rollup rows of every settled minute with late arrivals; returns
    how many. Consecutive minutes go in bounded rounds, each replaced while holding
    the store, so no reader sees a minute missing or counted twice."""
    minutes = late_minutes(store, options, watermark, margin_ns)
    rounds = [
        bounded
        for start, end in _runs_of_minutes(minutes)
        for bounded in plan_rounds(store, options, start, end, max_rows_per_round)
    ]
    for start, end in rounds:
        parameters = {"start": start, "end": end}
        window = "window_start_ns >= {start:Int64} AND window_start_ns < {end:Int64}"
        with store.exclusive():
            # Data rows only: the watermark markers (calls = 0) stay where they are.
            store.command(
                f"DELETE FROM {options.qualified(options.rollup_table)} "
                f"WHERE {window} AND calls > 0",
                parameters,
            )
            store.command(
                f"DELETE FROM {options.qualified(options.offset_rollup_table)} WHERE {window}",
                parameters,
            )
            call_rollup.delete_settled_calls(store, options, parameters)
            _roll(store, options, start, end)
    return len(minutes)


def _runs_of_minutes(minutes: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for minute in minutes:
        if runs and runs[-1][1] == minute:
            runs[-1] = (runs[-1][0], minute + WINDOW_NS)
        else:
            runs.append((minute, minute + WINDOW_NS))
    return runs


def _finish_run(
    store: Store, options: CallsOptions, started_ns: int, until_ns: int, margin_ns: int
) -> None:
    """Record the run; forget arrivals no later run will look at."""
    store.command(
        f"INSERT INTO {options.qualified(RUNS_TABLE)} VALUES ({{started:Int64}}, {{until:Int64}})",
        {"started": started_ns, "until": until_ns},
    )
    old = {"before": started_ns - max(margin_ns, ARRIVAL_MARGIN_NS)}
    stale = f"FROM {options.qualified(ARRIVALS_TABLE)} WHERE arrived_ns < {{before:Int64}}"
    if int(store.query(f"SELECT count() AS n {stale}", old)["n"].iloc[0]):
        store.command(f"DELETE {stale}", old)


def store_clock_ns(store: Store) -> int:
    """The engine's clock, the one ``grpc_call_arrivals`` and ``grpc_calls``' arrival
    columns record arrivals with (``CallFilters.as_of_ns`` takes it)."""
    found = store.query("SELECT toUnixTimestamp64Nano(now64(9)) AS now")
    return int(found["now"].iloc[0])


def settled_range(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    options: CallsOptions | None = None,
) -> tuple[int, int] | None:
    """The whole settled minutes inside the filters' time range, or None."""
    if (clock or ClockOptions()) != ClockOptions():
        return None
    if filters is not None and filters.otel_service:
        return None  # rollups are kept per gRPC service, not per OpenTelemetry service
    options = options or CallsOptions()
    if not _exists(store, options, options.rollup_table):
        return None
    parameters = (filters or CallFilters()).parameters()
    watermark = settled_until(store, options)
    start = -(-parameters["since_ns"] // WINDOW_NS) * WINDOW_NS
    end = min(parameters["until_ns"] // WINDOW_NS * WINDOW_NS, watermark)
    return (start, end) if end > start else None


def _exists(store: Store, options: CallsOptions, table: str) -> bool:
    return table_exists(store, table, options.database)


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
    """``clock_offsets.pair_offsets`` following every filter (``report``'s table), reading
    settled minutes from the offset rollup (kept per domain pair: not with a service,
    method or run filter)."""
    settled = settled_range(store, filters, clock, options)
    if filters is not None and (filters.service or filters.method or filters.run_id):
        settled = None
    return pair_offsets(
        store, filters, clock, options=options, settled=settled, follow_filters=True
    )

"""Find calls, then look at one: its events on one timeline, raw and clock-corrected.

``find_calls`` is the search (method, time, run from the filters; latency
bounds; a trace id), bounded by ``LIMIT`` and ordered in ClickHouse, so it
costs one pass over the matching calls whatever their number.

``call_summary`` and ``call_waterfall`` describe one call. Its phases and
clock offset come from ``phases.per_call_sql`` restricted to the call's own
estimation window: a window's estimate depends only on the calls in it, so
the offset is exactly the one every other page applies to this call. Its
events come from the client and server spans in ``otel_traces`` (every
event, every message of a stream); the phase bars from the merged
``grpc_calls`` row, using the column pairs that define each phase in
``phases.PHASES``, so a bar's length is the phase's value by construction.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import call_rollup
from grpc_overhead.analyzer.call_columns import CALL_STATUS
from grpc_overhead.analyzer.calls import calls_source
from grpc_overhead.analyzer.clock_offsets import ClockOptions, query_parameters
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights.call_tables import COARSE_PHASES as COARSE_PHASES
from grpc_overhead.analyzer.insights.call_tables import ONE_WAY as ONE_WAY
from grpc_overhead.analyzer.insights.call_tables import event_table as event_table
from grpc_overhead.analyzer.insights.call_tables import phase_table as phase_table
from grpc_overhead.analyzer.insights.chain_pieces import drawn
from grpc_overhead.analyzer.insights.rows import rows_for
from grpc_overhead.analyzer.insights.waterfall_waits import LANES as LANES
from grpc_overhead.analyzer.insights.waterfall_waits import SEGMENTS, SIDES, Waits, bar
from grpc_overhead.analyzer.insights.waterfall_waits import phase_bounds as phase_bounds
from grpc_overhead.analyzer.options import (
    HALF_MARGIN_NS,
    INT64_MAX,
    CallFilters,
    CallsOptions,
    time_parameters,
)
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.result_columns import ALL_PHASES, CALL_IDENTITY
from grpc_overhead.analyzer.rollup import settled_until
from grpc_overhead.analyzer.span_sources import SOURCE_KEYS
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import is_stream_row

ORDERS = {
    "slowest": "total_ns DESC NULLS LAST, call_start_ns DESC",
    "recent": "call_start_ns DESC",
}
MAX_LIMIT = 10_000

#: Phases the search table shows, in µs.
FOUND_PHASES = ("total", "server_duration", "processing", "network_overhead", "server_queue")

FOUND_COLUMNS = (
    "start",
    "trace_id",
    "client_span_id",
    "service",
    "method",
    "run_id",
    "client_host",
    "server_instance",
    "server_host",
    "status_code",
    *(f"{name}_us" for name in FOUND_PHASES),
    "request_bytes",
    "response_bytes",
    "weight",  # the calls this stored one stands for under sampling (1 unless sampled)
)


def find_calls(
    store: Store,
    filters: CallFilters | None = None,
    *,
    min_total_us: float | None = None,
    max_total_us: float | None = None,
    trace_id: str = "",
    order: str = "slowest",
    limit: int = 100,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Calls matching the filters and latency bounds, slowest (or most recent) first.

    Columns ``FOUND_COLUMNS``; a latency bound keeps only calls whose total
    is known (client span present). ``limit`` is capped at ``MAX_LIMIT``.
    """
    if order not in ORDERS:
        raise BadInput(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    if limit < 1:
        raise BadInput(f"limit must be at least 1, not {limit}")
    if min_total_us is not None and max_total_us is not None and max_total_us < min_total_us:
        raise BadInput(
            f"the latency range is empty: max {max_total_us:g} µs is below min "
            f"{min_total_us:g} µs; raise the max or lower the min"
        )
    options = options or CallsOptions()
    phases_us = [
        f"if({name}_defined, {name}_value / 1000, NULL) AS {name}_us" for name in FOUND_PHASES
    ]
    # Phases that need no clock estimate: stored rows of settled minutes, the rest raw.
    rows, bound = rows_for(store, filters, options, clock=False)
    sql = (
        "SELECT fromUnixTimestamp64Nano(call_start_ns, 'UTC') AS start,"
        " TraceId AS trace_id, ClientSpanId AS client_span_id, service, method, run_id,"
        " client_host, server_instance, server_host,"
        f" {CALL_STATUS} AS status_code,\n    "
        + ",\n    ".join(phases_us)
        + ",\n    request_uncompressed_bytes AS request_bytes,"
        " response_uncompressed_bytes AS response_bytes, weight\n"
        "FROM (\n    SELECT *, if(total_defined, total_value, NULL) AS total_ns\n"
        f"    FROM ({rows})\n"
        "    WHERE ({trace_id:String} = '' OR TraceId = {trace_id:String})\n"
        ")\nWHERE ({min_total_ns:Int64} = -1"
        " OR (total_defined AND total_value >= {min_total_ns:Int64}))"
        "\n    AND ({max_total_ns:Int64} = -1"
        " OR (total_defined AND total_value <= {max_total_ns:Int64}))"
        f"\nORDER BY {ORDERS[order]}\nLIMIT {{limit:UInt64}}"
    )
    parameters = {
        **bound,
        "trace_id": normalize_trace_id(trace_id) if trace_id else "",
        "min_total_ns": -1 if min_total_us is None else round(min_total_us * 1000),
        "max_total_ns": -1 if max_total_us is None else round(max_total_us * 1000),
        "limit": min(int(limit), MAX_LIMIT),
    }
    return store.query(sql, parameters, readonly=True)[list(FOUND_COLUMNS)]


def normalize_trace_id(text: str) -> str:
    """A trace id as stored (32 lower-case hex digits), or BadInput saying what is expected."""
    trace_id = text.strip().lower()
    if len(trace_id) != 32 or any(c not in "0123456789abcdef" for c in trace_id):
        raise BadInput(
            f"{text.strip()!r} is not a trace id: expected 32 hexadecimal digits "
            "(copy one from the table of calls or from Jaeger)"
        )
    return trace_id


# -- one call --------------------------------------------------------------------------------------


def locate(
    store: Store, trace_id: str, client_span_id: str = "", *, options: CallsOptions
) -> tuple[str, int] | None:
    """(client span id, call start ns) of the trace's first call (or of that span), or None.

    A key lookup on ``grpc_calls`` (ordered by trace id), halves merged by hand.
    """
    sql = (
        "SELECT ClientSpanId AS span, max(client_start_ns) AS client_start,"
        " max(server_start_ns) AS server_start\n"
        f"FROM {options.calls}\nWHERE TraceId = {{trace_id:String}}"
        " AND ({span:String} = '' OR ClientSpanId = {span:String})\n"
        "GROUP BY ClientSpanId\n"
        # An A72 attempt's row is part of its call's (keyed by the call span): never a call.
        "HAVING max(CallSpanId) = '' OR max(CallSpanId) = ClientSpanId\n"
        "ORDER BY if(client_start != 0, client_start, server_start), span LIMIT 1"
    )
    found = store.query(
        sql,
        {"trace_id": normalize_trace_id(trace_id), "span": client_span_id.strip().lower()},
        readonly=True,
    )
    if found.empty:
        return None
    row = found.iloc[0]
    start = int(row["client_start"]) or int(row["server_start"])
    return str(row["span"]), start


def _window_parameters(
    start_ns: int, clock: ClockOptions, trace_id: str, span: str
) -> dict[str, Any]:
    """Bound values for the call's own clock window (and the call's key)."""
    window_ns = clock.parameters()["window_ns"]
    window_start = start_ns // window_ns * window_ns
    return {
        **query_parameters(None, clock),
        **time_parameters(window_start, min(window_start + window_ns, INT64_MAX)),
        "trace_id": trace_id,
        "span": span,
    }


#: Who wrote each half (``span_sources``) and how many attempts the call took (A72).
SOURCE_COLUMNS = (*SOURCE_KEYS, "client_attempts")

SUMMARY_COLUMNS = (
    "trace_id",
    "client_span_id",
    "server_span_id",
    "start",
    *CALL_IDENTITY,
    "status_code",
    "client_domain",
    "server_domain",
    "clock_offset_us",
    "clock_uncertainty_us",
    "clock_estimate",
    *SOURCE_COLUMNS,
    *(f"{name}_us" for name in ALL_PHASES),
)


def call_summary(
    store: Store,
    trace_id: str,
    client_span_id: str = "",
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """One row for the call (or none when the trace has no gRPC call): identity, every
    phase in µs (NaN where undefined), and the clock offset applied to the server's
    timestamps with its uncertainty (``clock_estimate``: 'same clock', 'own window',
    'pair' when the call's window had no estimate, or 'none')."""
    options = options or CallsOptions()
    clock = clock or ClockOptions()
    trace_id = normalize_trace_id(trace_id)
    found = locate(store, trace_id, client_span_id, options=options)
    if found is None:
        return pd.DataFrame({column: [] for column in SUMMARY_COLUMNS})
    span, start_ns = found
    bound = _window_parameters(start_ns, clock, trace_id, span)
    if clock == ClockOptions() and _is_settled(store, start_ns, options):
        # A key lookup in the stored rows, where the call's own window (or one shared
        # clock) gave its offset: exactly what the window's raw computation gives.
        stored = (
            f"SELECT * FROM {options.qualified(call_rollup.SETTLED_CALLS_TABLE)}"
            " WHERE call_start_ns = {start_ns:Int64}"
        )
        frame = store.query(
            _summary_sql(stored)
            + " AND (client_domain = server_domain OR NOT isNaN(own_window_offset_ns))",
            {**bound, "start_ns": start_ns},
            readonly=True,
        )
        if not frame.empty:
            return frame[list(SUMMARY_COLUMNS)]
    frame = store.query(_summary_sql(per_call_sql(options)), bound, readonly=True)
    return frame[list(SUMMARY_COLUMNS)]


def _is_settled(store: Store, start_ns: int, options: CallsOptions) -> bool:
    """Whether the call's minute is in ``grpc_settled_calls``."""
    if not call_rollup.has_settled_calls(store, options):
        return False
    return start_ns < settled_until(store, options)


def _summary_sql(source: str) -> str:
    """``call_summary``'s select over ``source`` (``per_call_sql`` rows, with the clock)."""
    phases_us = [
        f"if({name}_defined, {name}_value / 1000, NULL) AS {name}_us" for name in ALL_PHASES
    ]
    return (
        "SELECT TraceId AS trace_id, ClientSpanId AS client_span_id,"
        " ServerSpanId AS server_span_id,"
        f" fromUnixTimestamp64Nano(call_start_ns, 'UTC') AS start, {', '.join(CALL_IDENTITY)},"
        f" {CALL_STATUS} AS status_code,"
        f" client_domain, server_domain, {', '.join(SOURCE_COLUMNS)},\n"
        "    if(clock_defined, clock_offset_ns / 1000, NULL) AS clock_offset_us,\n"
        "    if(clock_defined, clock_uncertainty_ns / 1000, NULL) AS clock_uncertainty_us,\n"
        "    multiIf(client_domain = server_domain, 'same clock',"
        " NOT isNaN(own_window_offset_ns), 'own window',"
        " NOT isNaN(pair_offset_ns), 'pair', 'none') AS clock_estimate,\n    "
        + ",\n    ".join(phases_us)
        + f"\nFROM ({source})\n"
        "WHERE TraceId = {trace_id:String} AND ClientSpanId = {span:String}"
    )


# -- the waterfall -------------------------------------------------------------------------------

WATERFALL_COLUMNS = ("view", "kind", "lane", "name", "start_us", "end_us", "detail")


def call_waterfall(
    store: Store,
    trace_id: str,
    client_span_id: str = "",
    clock_offset_us: float | None = None,
    server_dispatch_us: float | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """The call's spans, phases and events on one timeline, twice: raw and corrected.

    ``clock_offset_us`` is the call's offset as ``call_summary`` reports it
    (passed in so the page does not estimate it twice; None: no estimate,
    both views are then the raw one); ``server_dispatch_us`` likewise (the
    server's wait before serverCallStarted, drawn as its own bar and taken out
    of request_network). One row per (view, item): ``view``
    'raw' (each clock as recorded) or 'corrected' (server times minus the
    offset); ``kind`` 'span', 'phase' or 'event'; ``lane`` client, network
    or server; ``start_us``/``end_us`` relative to the client span's start
    (an event has start = end); ``detail`` the message id and size of
    message events. Empty when the trace has no gRPC call.
    """
    options = options or CallsOptions()
    trace_id = normalize_trace_id(trace_id)
    found = locate(store, trace_id, client_span_id, options=options)
    if found is None:
        return pd.DataFrame({column: [] for column in WATERFALL_COLUMNS})
    span, start_ns = found
    row = _merged_row(store, trace_id, span, start_ns, options)
    events = _span_events(
        store, trace_id, [span, row["AttemptSpanId"]], row["ServerSpanId"], start_ns, options
    )
    # Integer ns throughout: Unix ns do not fit a float's 53 bits exactly.
    offset_ns = (
        0 if clock_offset_us is None or pd.isna(clock_offset_us) else round(clock_offset_us * 1000)
    )
    origin = int(row["client_start_ns"]) or int(row["server_start_ns"]) - offset_ns
    dispatch_ns = (
        0
        if server_dispatch_us is None or pd.isna(server_dispatch_us)
        else round(server_dispatch_us * 1000)
    )
    waits = Waits(
        max(int(row.get("client_connect_ns", -1)), 0) / 1000,  # as recorded; -1: none
        dispatch_ns / 1000,
        max(int(row.get("client_dispatch_ns", -1)), 0) / 1000,
    )
    records = []
    for view, shift in (("raw", 0), ("corrected", offset_ns)):

        def at(column: str, shift: int = shift) -> float:
            value = int(row[column]) - origin
            return (value - (shift if SIDES[column] == "server" else 0)) / 1000

        for side in ("client", "server"):
            if int(row[f"{side}_start_ns"]):
                span_bar = (f"{side} span", at(f"{side}_start_ns"), at(f"{side}_end_ns"))
                records.append((view, "span", side, *span_bar, ""))

        def gap(earlier: str, later: str) -> float:
            return at(later) - at(earlier) if int(row[earlier]) and int(row[later]) else math.inf

        view_waits = waits.within(
            gap("client_outbound_message_sent_ns", "server_call_started_ns"),
            gap("server_outbound_message_sent_ns", "client_received_response_ns"),
        )
        for name, earlier, later, lane in () if is_stream_row(row) else drawn(SEGMENTS, row):
            if int(row[earlier]) and int(row[later]):
                shown = bar(name, at(earlier), at(later), view_waits)
                if shown is not None:
                    records.append((view, "phase", lane, name, *shown, ""))
        for event in events.itertuples(index=False):
            moved = shift if event.lane == "server" else 0
            time_us = (int(event.time_ns) - origin - moved) / 1000
            records.append((view, "event", event.lane, event.event, time_us, time_us, event.detail))
    return pd.DataFrame.from_records(records, columns=list(WATERFALL_COLUMNS))


def _merged_row(
    store: Store, trace_id: str, span: str, start_ns: int, options: CallsOptions
) -> pd.Series:
    """The call's ``grpc_calls`` row (every event column), halves merged."""
    parameters = {
        **time_parameters(start_ns - HALF_MARGIN_NS, start_ns + HALF_MARGIN_NS),
        "trace_id": trace_id,
        "span": span,
    }
    sql = (
        f"SELECT * FROM ({calls_source(options)})\n"
        "WHERE TraceId = {trace_id:String} AND ClientSpanId = {span:String}"
    )
    return store.query(sql, parameters, readonly=True).iloc[0]


def _span_events(
    store: Store,
    trace_id: str,
    client_spans: list[str],
    server_span: str,
    start_ns: int,
    options: CallsOptions,
) -> pd.DataFrame:
    """Every event of the call's client spans (an A72 call's call and chosen attempt span)
    and server span: lane, event, time_ns, detail (message number and size, ours or A72's)."""
    sql = (
        "SELECT if(SpanId = {server:String}, 'server', 'client') AS lane,"
        " event, toUnixTimestamp64Nano(at) AS time_ns,\n"
        "    multiIf(attributes['rpc.message.id'] != '', attributes['rpc.message.id'],"
        " attributes['message.id'] != '', attributes['message.id'],"
        " attributes['sequence-number'] != '',"
        " toString(toUInt64OrZero(attributes['sequence-number']) + 1), '') AS message,\n"
        "    multiIf(attributes['rpc.message.uncompressed_size'] != '',"
        " attributes['rpc.message.uncompressed_size'],"
        " attributes['message.uncompressed_size'] != '',"
        " attributes['message.uncompressed_size'], attributes['message-size']) AS size,\n"
        "    arrayStringConcat(arrayFilter(part -> part != '', ["
        "if(message != '', concat('message ', message), ''),"
        " if(size != '', concat(size, ' B'), '')]), ', ') AS detail\n"
        f"FROM {options.traces}\n"
        "ARRAY JOIN Events.Name AS event, Events.Timestamp AS at, Events.Attributes AS attributes\n"
        "WHERE TraceId = {trace_id:String} AND SpanId IN {spans:Array(String)}\n"
        "    AND Timestamp >= fromUnixTimestamp64Nano({since_ns:Int64})\n"
        "    AND Timestamp < fromUnixTimestamp64Nano({until_ns:Int64})\n"
        "ORDER BY time_ns, lane"
    )
    parameters = {
        "trace_id": trace_id,
        "spans": [span for span in (*client_spans, server_span) if span],
        "server": server_span,
        "since_ns": start_ns - HALF_MARGIN_NS,
        "until_ns": start_ns + HALF_MARGIN_NS,
    }
    return store.query(sql, parameters, readonly=True)

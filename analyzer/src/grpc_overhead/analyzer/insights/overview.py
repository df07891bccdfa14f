"""The Overview page's answers: how many calls, how slow, and how much of it is not the handler.

One aggregate inside ClickHouse (``overview``) answers the whole page with
``GROUPING SETS``: merging a million unmerged call halves is the expensive
part of any query, so the page pays for it once, and the result is bounded
by methods and time buckets, never by calls (its rows read through
``analysis_cost.grouping_source``: the grouping sets' analysis took 0.4 s otherwise).
Three pure functions read it:

* ``summary``: calls, calls/s, p50/p99 of ``total`` and the share of the
  time calls spend that is not ``processing`` (the seed article's
  "network overhead", as a share);
* ``phases_by_method``: per method, each consecutive phase's mean (or
  median) over the calls that record every event, stacked to that method's
  mean ``total`` (``unattributed`` is a segment of its own, never hidden);
* ``network_over_time``: per time bucket, the wire (``request_network +
  response_network``, exact whatever the clocks do) and the whole overhead
  (``total - processing``).
"""

from __future__ import annotations

import math

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.analysis_cost import grouping_source
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights.rows import (
    CLIENT_ONLY,
    CLIENT_ONLY_SAMPLED,
    SERVER_ONLY,
    STACKED_PHASES,
    bucket_seconds,
    rows_for,
    time_span,
)
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_terms import phases_read
from grpc_overhead.analyzer.result_columns import QUANTILE_STATE_FUNCTION, QUANTILE_WEIGHT
from grpc_overhead.analyzer.span_sources import SOURCE_KEYS
from grpc_overhead.analyzer.status import CALL_STATUS, with_names
from grpc_overhead.analyzer.store.base import Store

#: Both one-way network phases recorded: their sum is exact across clocks.
NETWORK = "request_network_value + response_network_value"
NETWORK_DEFINED = "request_network_defined AND response_network_defined"
#: Every event recorded: the consecutive phases and ``unattributed`` add up to ``total``.
COMPLETE = "unattributed_defined"
#: Two-sided streams with events: no unary split (``stream_phases``), shown per message.
STREAM_CALLS = "request_message_transfer_defined OR response_message_transfer_defined"


STATISTICS = ("mean", "p50")
WEIGHTED, WHOLE = QUANTILE_STATE_FUNCTION, QUANTILE_WEIGHT
TARGET_BUCKETS = 120

#: ``overview`` rows: one per level.
ALL, METHOD, BUCKET, STATUS, SOURCE = "all", "method", "bucket", "status", "source"
#: ``source`` rows: what traced the calls (``sources.source_mix``'s keys), so the page's note
#: on phases some sources cannot have comes from this pass (a query of its own: 0.2 s a run).


def overview(
    store: Store,
    filters: CallFilters | None = None,
    statistic: str = "mean",
    buckets: int = TARGET_BUCKETS,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Everything the Overview shows, in one pass over the calls matching ``filters``.

    One row per ``level``: ``all`` (every call), ``method`` (per service and
    method, busiest first), ``bucket`` (per time bucket of call starts, a
    round length giving at most ``buckets``; ``bucket_s`` says which).
    Columns (ns sums, µs otherwise): calls, first_ns, last_ns, total_calls,
    total_p50_us, total_p99_us, total_mean_us, server_only_calls and
    client_only_calls (one side attached: ``rows.SERVER_ONLY``), calls_with_events and the
    ``complete_{total,processing,network}_ns`` sums over them, per phase of
    ``STACKED_PHASES`` and ``total`` its ``statistic`` (mean or p50) over the
    calls with every event as ``{phase}_us``, and network (request + response
    network) and overhead (total - processing) means and p99; ``status`` rows count
    the calls per (service, method, gRPC status code), ``source`` rows per ``SOURCE_KEYS``.
    Read it with ``summary``, ``phases_by_method``, ``network_over_time``, ``statuses``
    and ``source_mix``.
    """
    if statistic not in STATISTICS:
        raise BadInput(f"statistic must be one of {', '.join(STATISTICS)}, not {statistic!r}")
    span = time_span(store, filters, options)
    step_s = bucket_seconds(*span, target=max(int(buckets), 1)) if span else 1

    # Every figure weighted by the calls each stands for under sampling (``weight``: 1
    # unless sampled), so they estimate all calls; ``stored_calls`` counts the rows.
    def stat(expression: str) -> str:
        if statistic == "mean":
            return f"avgWeightedIf(toFloat64({expression}), weight, {COMPLETE}) / 1000"
        return f"{WEIGHTED}If(0.5)(toFloat64({expression}), {WHOLE}, {COMPLETE})[1] / 1000"

    network, overhead = f"toFloat64({NETWORK}) / 1000", "toFloat64(network_overhead_value) / 1000"
    sql = (
        "SELECT multiIf(grouping(status_code) = 0, 'status', grouping(service) = 0, 'method',"
        " grouping(bucket_ns) = 0, 'bucket', grouping(client_source) = 0, 'source', 'all')"
        " AS level,\n"
        f"    service, method, bucket_ns, status_code, {', '.join(SOURCE_KEYS)},"
        f" {weighted.count()} AS calls, count() AS stored_calls,\n"
        "    min(call_start_ns) AS first_ns, max(call_start_ns) AS last_ns,\n"
        f"    {weighted.count_if('total_defined')} AS total_calls,\n"
        f"    {WEIGHTED}If(0.5, 0.99)(toFloat64(total_value) / 1000, {WHOLE}, total_defined)"
        " AS total_q,\n"
        "    avgWeightedIf(toFloat64(total_value), weight, total_defined) / 1000"
        " AS total_mean_us,\n"
        f"    {weighted.count_if(COMPLETE)} AS calls_with_events,\n"
        f"    {weighted.count_if(SERVER_ONLY)} AS server_only_calls,\n"
        f"    {weighted.count_if(CLIENT_ONLY)} AS client_only_calls,\n"
        f"    {weighted.count_if(CLIENT_ONLY_SAMPLED)} AS client_only_sampled_calls,\n"
        f"    {weighted.count_if(STREAM_CALLS)} AS stream_calls,\n"
        f"    sumIf(total_value * weight, {COMPLETE}) AS complete_total_ns,\n"
        f"    sumIf(processing_value * weight, {COMPLETE}) AS complete_processing_ns,\n"
        f"    sumIf({NETWORK} * weight, {COMPLETE}) AS complete_network_ns,\n    "
        + ",\n    ".join(
            f"{stat(f'{name}_value')} AS {name}_us" for name in (*STACKED_PHASES, "total")
        )
        + ",\n"
        f"    {weighted.count_if(NETWORK_DEFINED)} AS network_calls,\n"
        f"    avgWeightedIf({network}, weight, {NETWORK_DEFINED}) AS network_mean_us,\n"
        f"    {WEIGHTED}If(0.99)({network}, {WHOLE}, {NETWORK_DEFINED})[1] AS network_p99_us,\n"
        f"    {weighted.count_if('network_overhead_defined')} AS overhead_calls,\n"
        "    avgWeightedIf(" + overhead + ", weight, network_overhead_defined)"
        " AS overhead_mean_us\n"
        "FROM (SELECT *, intDiv(call_start_ns, {bucket_ns:Int64}) * {bucket_ns:Int64}"
        f" AS bucket_ns, {CALL_STATUS} AS status_code"
        " FROM {grouped})\n"
        "GROUP BY GROUPING SETS\n"
        "    ((), (service, method), (bucket_ns), (service, method, status_code),"
        f" ({', '.join(SOURCE_KEYS)}))\n"
        "ORDER BY level, calls DESC, service, method, bucket_ns"
    )
    rows, bound = rows_for(store, filters, options, phases=phases_read(sql))
    sql = sql.replace("{grouped}", grouping_source(rows))
    frame = store.query(sql, {**bound, "bucket_ns": step_s * 1_000_000_000}, readonly=True)
    frame = frame[(frame["calls"] > 0) | (frame["level"] == ALL)].reset_index(drop=True)
    frame["bucket_s"] = step_s
    frame["total_p50_us"] = [
        _first(q, n, 0) for q, n in zip(frame["total_q"], frame["total_calls"], strict=True)
    ]
    frame["total_p99_us"] = [
        _first(q, n, 1) for q, n in zip(frame["total_q"], frame["total_calls"], strict=True)
    ]
    _missing_where(frame, ["total_mean_us"], frame["total_calls"])
    _missing_where(
        frame, [f"{name}_us" for name in (*STACKED_PHASES, "total")], frame["calls_with_events"]
    )
    _missing_where(frame, ["network_mean_us", "network_p99_us"], frame["network_calls"])
    _missing_where(frame, ["overhead_mean_us"], frame["overhead_calls"])
    return frame.drop(columns=["total_q"])


SUMMARY_COLUMNS = (
    "calls",
    "first_start",
    "last_start",
    "calls_per_s",
    "total_p50_us",
    "total_p99_us",
    "total_mean_us",
    "not_processing_share",
    "network_share",
    "calls_with_events",
    "server_only_calls",
    "client_only_calls",
    "client_only_sampled_calls",
    "stream_calls",
    "stored_calls",
)


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One row (``SUMMARY_COLUMNS``) from ``overview``'s ``all`` row.

    ``calls_per_s`` is ``(calls - 1)`` over the time between the first and
    the last call start: the arrival rate, exact for evenly spaced calls (NaN
    for fewer than two calls at distinct times). ``not_processing_share`` is
    ``1 - Σ processing / Σ total`` and ``network_share`` ``Σ (request_network
    + response_network) / Σ total``, both over the calls that record every
    event (``calls_with_events``): shares of the time calls spend, so a slow
    call weighs more than a fast one, as it does for the caller.
    """
    rows = frame[frame["level"] == ALL]
    if rows.empty:  # no call matched: some engines return no row for the () grouping set
        empty = {
            "calls": 0,
            "calls_with_events": 0,
            "server_only_calls": 0,
            "client_only_calls": 0,
            "client_only_sampled_calls": 0,
            "stream_calls": 0,
            "stored_calls": 0,
        }
        return pd.DataFrame([empty], columns=list(SUMMARY_COLUMNS))
    row = rows.iloc[0]
    calls = int(row["calls"])
    span_ns = int(row["last_ns"]) - int(row["first_ns"]) if calls else 0
    complete_total = float(row["complete_total_ns"]) if int(row["calls_with_events"]) else 0.0
    return pd.DataFrame(
        [
            {
                "calls": calls,
                "first_start": _timestamp(int(row["first_ns"])) if calls else pd.NaT,
                "last_start": _timestamp(int(row["last_ns"])) if calls else pd.NaT,
                "calls_per_s": (calls - 1) / (span_ns / 1e9) if span_ns > 0 else math.nan,
                "total_p50_us": row["total_p50_us"],
                "total_p99_us": row["total_p99_us"],
                "total_mean_us": row["total_mean_us"],
                "not_processing_share": (
                    1 - float(row["complete_processing_ns"]) / complete_total
                    if complete_total > 0
                    else math.nan
                ),
                "network_share": (
                    float(row["complete_network_ns"]) / complete_total
                    if complete_total > 0
                    else math.nan
                ),
                "calls_with_events": int(row["calls_with_events"]),
                "server_only_calls": int(row["server_only_calls"]),
                "client_only_calls": int(row["client_only_calls"]),
                "client_only_sampled_calls": int(row["client_only_sampled_calls"]),
                "stream_calls": int(row["stream_calls"]),
                "stored_calls": int(row["stored_calls"]),
            }
        ],
        columns=list(SUMMARY_COLUMNS),
    )


PHASES_BY_METHOD_COLUMNS = (
    "service",
    "method",
    "calls",
    "calls_with_events",
    "phase",
    "value_us",
    "share",
    "total_us",
)


def phases_by_method(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (service, method) and phase of ``STACKED_PHASES`` (``PHASES_BY_METHOD_COLUMNS``).

    Only calls that record every event count (``calls_with_events``), so
    with the mean the segments add up exactly to ``total_us``, the mean
    ``total`` of those calls, and ``share`` is the phase's part of it.
    Medians do not add up: with p50, ``total_us`` is the median total and
    ``share`` is against the sum of the segments. Methods busiest first,
    phases in call order; NaN values for a method without events.
    """
    records = []
    for row in frame[frame["level"] == METHOD].to_dict("records"):
        values = {name: float(row[f"{name}_us"]) for name in STACKED_PHASES}
        stacked = sum(values.values())
        for name in STACKED_PHASES:
            records.append(
                (
                    row["service"],
                    row["method"],
                    int(row["calls"]),
                    int(row["calls_with_events"]),
                    name,
                    values[name],
                    values[name] / stacked if stacked else math.nan,
                    float(row["total_us"]),
                )
            )
    return pd.DataFrame.from_records(records, columns=list(PHASES_BY_METHOD_COLUMNS)).astype(
        {"value_us": "float64", "share": "float64", "total_us": "float64"}
    )


NETWORK_COLUMNS = (
    "bucket_start",
    "bucket_s",
    "calls",
    "calls_per_s",
    "network_mean_us",
    "network_p99_us",
    "overhead_mean_us",
    "total_p50_us",
)


def network_over_time(frame: pd.DataFrame) -> pd.DataFrame:
    """Per time bucket with calls (``NETWORK_COLUMNS``), oldest first: ``network`` =
    request_network + response_network (calls that record both), ``overhead`` =
    total - processing, in µs; ``calls_per_s`` = the bucket's calls / its length."""
    buckets = frame[frame["level"] == BUCKET].sort_values("bucket_ns")
    result = buckets.assign(
        bucket_start=pd.to_datetime(buckets["bucket_ns"], unit="ns", utc=True),
        calls_per_s=buckets["calls"] / buckets["bucket_s"],
    )
    return result[list(NETWORK_COLUMNS)].reset_index(drop=True)


def _first(quantiles: object, count: int, index: int) -> float:
    if not int(count) or quantiles is None or len(quantiles) <= index:  # type: ignore[arg-type]
        return math.nan
    return float(quantiles[index])  # type: ignore[index]


def _missing_where(frame: pd.DataFrame, columns: list[str], counts: pd.Series) -> None:
    """An aggregate over no value comes back as 0 or NaN; make it NaN (shown as missing)."""
    for column in columns:
        frame[column] = frame[column].astype("float64").where(counts.astype("int64") > 0)


def _timestamp(ns: int) -> pd.Timestamp:
    return pd.Timestamp(ns, unit="ns", tz="UTC")


def source_mix(frame: pd.DataFrame) -> pd.DataFrame:
    """Calls per ``SOURCE_KEYS`` from ``overview``'s ``source`` rows, busiest first: what
    ``sources.source_mix`` answers, from the Overview's own pass."""
    rows = frame[frame["level"] == SOURCE][[*SOURCE_KEYS, "calls"]]
    return rows.sort_values("calls", ascending=False, kind="stable").reset_index(drop=True)


def statuses(frame: pd.DataFrame) -> pd.DataFrame:
    """Calls per (service, method, status code) from ``overview``'s ``status`` rows
    (``status.STATUS_COLUMNS``: the code's name, and its share of the method's calls)."""
    rows = frame[frame["level"] == STATUS][["service", "method", "status_code", "calls"]]
    rows = rows.sort_values(["service", "method", "calls"], ascending=[True, True, False])
    return with_names(rows)

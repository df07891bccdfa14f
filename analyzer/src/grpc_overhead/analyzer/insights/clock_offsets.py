"""Clock offsets per (client host, server host) pair over time, and the calls they corrected.

The estimates are ``clock_offsets``'s (NTP-style: the tightest round trip of
each window, uncertainty = half that round trip); this module arranges them
for the page. ``offset_timeline`` reads settled minutes from the offset
rollup (``rollup``) when the clock options are the defaults, so it stays
cheap over long ranges. Offsets are a property of two clocks, so only the
time part of the filters applies to them; ``window_calls`` counts calls
under every filter, and ``pairs`` joins the two without another query.
``corrected_calls`` shows a sample, one window at a time.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from grpc_overhead.analyzer import call_rollup, weighted
from grpc_overhead.analyzer.clock_offsets import (
    OFFSET_CTES,
    ClockOptions,
    merged_cte,
    query_parameters,
    window_sources,
)
from grpc_overhead.analyzer.insights.rows import rows_for
from grpc_overhead.analyzer.options import (
    CALL_FILTER,
    CallFilters,
    CallsOptions,
    time_parameters,
    unix_ns,
)
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.rollup import settled_range, settled_until
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import IS_STREAM

#: Windows shown per pair at most (the most recent); 10 080 = a week of minutes.
MAX_WINDOWS = 10_080

TIMELINE_COLUMNS = (
    "client_host",
    "server_host",
    "pair",
    "window_start",
    "offset_us",
    "uncertainty_us",
    "low_us",
    "high_us",
    "calls",
)


def pair_label(client: str, server: str) -> str:
    return f"{client} → {server}"


def offset_timeline(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """One row per (pair, window): offset, uncertainty and the band it bounds.

    Columns ``TIMELINE_COLUMNS``: ``low_us``/``high_us`` = offset ∓
    uncertainty, the range the true offset is guaranteed to lie in (clock
    offset and path asymmetry cannot be told apart); ``calls`` = complete
    calls in the window. Same-host pairs report 0 ± 0. At most
    ``MAX_WINDOWS`` windows per pair, the most recent.
    """
    options = options or CallsOptions()
    settled = settled_range(store, filters, clock, options)
    parameters = {
        **query_parameters(filters, clock, settled),
        "max_windows": MAX_WINDOWS,
    }
    columns = (
        "client_domain, server_domain, window_start_ns, window_offset_ns,"
        " window_uncertainty_ns, window_calls"
    )
    sources = window_sources(store, options, parameters, settled, columns)
    sql = (
        f"WITH\n{merged_cte(options)},\n{OFFSET_CTES}\n"
        "SELECT client_domain AS client_host, server_domain AS server_host,\n"
        "    fromUnixTimestamp64Nano(window_start_ns, 'UTC') AS window_start,\n"
        "    window_offset_ns / 1000 AS offset_us,\n"
        "    window_uncertainty_ns / 1000 AS uncertainty_us,\n"
        "    offset_us - uncertainty_us AS low_us, offset_us + uncertainty_us AS high_us,\n"
        "    window_calls AS calls\n"
        f"FROM (\n{sources}\n)\n"
        "ORDER BY client_host, server_host, window_start DESC\n"
        "LIMIT {max_windows:UInt32} BY client_host, server_host"
    )
    frame = store.query(sql, parameters, readonly=True)
    frame = frame.sort_values(["client_host", "server_host", "window_start"], kind="stable")
    frame.insert(
        2,
        "pair",
        [pair_label(c, s) for c, s in zip(frame["client_host"], frame["server_host"], strict=True)],
    )
    return frame[list(TIMELINE_COLUMNS)].reset_index(drop=True)


COUNT_COLUMNS = ("client_host", "server_host", "window_start", "calls", "network_calls")


def window_calls(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Per (pair, window): ``calls`` matching every filter, and ``network_calls``, the
    cross-clock ones with a one-way network phase (the calls a clock offset corrects).

    One scan of the merged calls, no offset arithmetic; ``pairs`` combines it
    with ``offset_timeline`` to tell which calls each estimate corrected. Calls with both
    halves only: a one-sided call has one clock, no pair (it would read as a pseudo pair
    with a ``service:`` domain for its missing side).
    """
    options = options or CallsOptions()
    # Calls with the events of a one-way phase (the phases' own conditions also hold the
    # bounds of phase_bounds, which need the clock: these are the events only).
    network = (
        "((server_call_started_ns != 0 AND client_outbound_message_sent_ns != 0)"
        " OR (client_received_response_ns != 0 AND server_outbound_message_sent_ns != 0))"
        f" AND NOT {IS_STREAM}"
    )
    # Windows and domains only (no offset): stored rows of settled minutes, the rest raw.
    rows, bound = rows_for(store, filters, options, clock=False, clock_options=clock)
    sql = (
        "SELECT any(client_domain) AS client_host, any(server_domain) AS server_host,\n"
        "    fromUnixTimestamp64Nano(any(window_start_ns), 'UTC') AS window_start,\n"
        f"    {weighted.count()} AS calls,\n"  # weighted: the calls made, under sampling
        f"    {weighted.count_if(f'NOT same_domain AND ({network})')} AS network_calls\n"
        f"FROM ({rows})\nWHERE client_start_ns != 0 AND server_start_ns != 0\n"
        "GROUP BY window_key\nORDER BY client_host, server_host, window_start"
    )
    return store.query(sql, bound, readonly=True)[list(COUNT_COLUMNS)]


PAIR_COLUMNS = (
    "client_host",
    "server_host",
    "pair",
    "offset_us",
    "uncertainty_us",
    "offset_min_us",
    "offset_max_us",
    "windows",
    "calls",
    "corrected",
    "from_own_window",
    "from_pair",
    "uncorrected",
    "same_clock",
)


def pairs(timeline: pd.DataFrame, counts: pd.DataFrame) -> pd.DataFrame:
    """Per pair, from ``offset_timeline`` and ``window_calls`` (no query).

    ``offset_us``/``uncertainty_us``: the best window (smallest uncertainty),
    the estimate a call falls back on when its own window has none;
    ``offset_min_us``/``offset_max_us``: the spread of the window estimates
    (drift, or noise); ``calls`` matching the filters; ``corrected`` =
    cross-clock calls with a one-way network phase that got an offset, of
    which ``from_own_window`` (their window had an estimate) and
    ``from_pair`` (it had none: the best window's was used); ``uncorrected``
    = such calls of a pair with no estimate at all (shown raw only);
    ``same_clock`` = calls within one clock domain (exact, nothing to do).
    """
    keys = ["client_host", "server_host"]
    estimated = timeline.assign(estimated=True)[[*keys, "window_start", "estimated"]]
    joined = counts.merge(estimated, on=[*keys, "window_start"], how="left")
    joined["estimated"] = joined["estimated"].astype("boolean").fillna(False).astype(bool)
    same = joined["client_host"] == joined["server_host"]
    joined["same_clock"] = joined["calls"].where(same, 0)
    joined["own"] = joined["network_calls"].where(joined["estimated"], 0)
    joined["rest"] = joined["network_calls"].where(~joined["estimated"], 0)
    counted = joined.groupby(keys, as_index=False)[
        ["calls", "network_calls", "own", "rest", "same_clock"]
    ].sum()
    best = timeline.sort_values(["uncertainty_us", "window_start"], kind="stable")
    estimates = best.groupby(keys, as_index=False).agg(
        offset_us=("offset_us", "first"),
        uncertainty_us=("uncertainty_us", "first"),
        offset_min_us=("offset_us", "min"),
        offset_max_us=("offset_us", "max"),
        windows=("offset_us", "size"),
    )
    frame = counted.merge(estimates, on=keys, how="outer")
    has_estimate = frame["offset_us"].notna()
    for column in ("calls", "network_calls", "own", "rest", "same_clock", "windows"):
        frame[column] = frame[column].fillna(0).astype("int64")
    frame["from_own_window"] = frame["own"].where(has_estimate, 0)
    frame["from_pair"] = frame["rest"].where(has_estimate, 0)
    frame["corrected"] = frame["from_own_window"] + frame["from_pair"]
    frame["uncorrected"] = frame["network_calls"] - frame["corrected"]
    frame["pair"] = [
        pair_label(c, s) for c, s in zip(frame["client_host"], frame["server_host"], strict=True)
    ]
    frame = frame.sort_values(keys, kind="stable").reset_index(drop=True)
    for column in ("offset_us", "uncertainty_us", "offset_min_us", "offset_max_us"):
        frame[column] = frame[column].astype("float64")
    return frame[list(PAIR_COLUMNS)]


def latest_corrected_window(counts: pd.DataFrame) -> datetime | None:
    """Start of the most recent window with cross-clock calls to correct (``window_calls``)."""
    found = counts[counts["network_calls"] > 0]
    if found.empty:
        return None
    return pd.Timestamp(found["window_start"].max()).to_pydatetime()


CORRECTED_CALL_COLUMNS = (
    "start",
    "trace_id",
    "pair",
    "method",
    "clock_estimate",
    "clock_offset_us",
    "clock_uncertainty_us",
    "request_network_raw_us",
    "request_network_corrected_us",
    "response_network_raw_us",
    "response_network_corrected_us",
)


def corrected_calls(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    window_start: datetime | None = None,
    limit: int = 20,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Cross-clock calls whose one-way phases were corrected, raw next to corrected (µs),
    most recent first, at most ``limit``.

    ``window_start`` narrows the search to one estimation window (``latest_corrected_window``):
    an estimate depends only on its window's calls, so the numbers are those
    every page applies, for the cost of one window instead of the whole range.
    """
    options = options or CallsOptions()
    clock = clock or ClockOptions()
    parameters = query_parameters(filters, clock)
    source = per_call_sql(options)
    if window_start is not None:
        window_ns = clock.parameters()["window_ns"]
        start = unix_ns(window_start) // window_ns * window_ns
        since = max(parameters["since_ns"], start)
        until = min(parameters["until_ns"], start + window_ns)
        parameters.update(time_parameters(since, max(until, since)))
        if _whole_settled_window(store, clock, since, until, start, window_ns, options):
            # Stored rows of a settled minute, those its own estimate corrected: a
            # one-window computation corrects exactly these, with the same estimate.
            source = (
                f"SELECT * FROM {options.qualified(call_rollup.SETTLED_CALLS_TABLE)}"
                " WHERE call_start_ns >= {since_ns:Int64} AND call_start_ns < {until_ns:Int64}"
                f" AND {CALL_FILTER} AND NOT isNaN(own_window_offset_ns)"
            )
    pair = "concat(client_domain, ' → ', server_domain)"
    sql = (
        "SELECT fromUnixTimestamp64Nano(call_start_ns, 'UTC') AS start, TraceId AS trace_id,"
        f" {pair} AS pair, method,\n"
        "    if(NOT isNaN(own_window_offset_ns), 'own window', 'pair') AS clock_estimate,\n"
        "    clock_offset_ns / 1000 AS clock_offset_us,"
        " clock_uncertainty_ns / 1000 AS clock_uncertainty_us,\n"
        "    if(request_network_raw_defined, request_network_raw_value / 1000, NULL)"
        " AS request_network_raw_us,\n"
        "    if(request_network_corrected_defined, request_network_corrected_value / 1000, NULL)"
        " AS request_network_corrected_us,\n"
        "    if(response_network_raw_defined, response_network_raw_value / 1000, NULL)"
        " AS response_network_raw_us,\n"
        "    if(response_network_corrected_defined, response_network_corrected_value / 1000,"
        " NULL) AS response_network_corrected_us\n"
        f"FROM ({source})\n"
        "WHERE client_domain != server_domain AND clock_defined"
        " AND (request_network_defined OR response_network_defined)\n"
        "ORDER BY call_start_ns DESC LIMIT {limit:UInt32}"
    )
    parameters["limit"] = max(int(limit), 0)
    return store.query(sql, parameters, readonly=True)[list(CORRECTED_CALL_COLUMNS)]


def _whole_settled_window(
    store: Store,
    clock: ClockOptions,
    since: int,
    until: int,
    start: int,
    window_ns: int,
    options: CallsOptions,
) -> bool:
    """The filters keep the whole window, which the stored rows' estimates cover."""
    if clock != ClockOptions() or (since, until) != (start, start + window_ns):
        return False
    if not call_rollup.has_settled_calls(store, options):
        return False
    return until <= settled_until(store, options)

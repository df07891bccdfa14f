"""Clock offsets between the client's and the server's clocks, estimated the NTP way, in SQL.

A *clock domain* is the set of processes that read one clock: by default a
host (``host.name``), optionally a process (``service.instance.id``) for
setups where one host name hides several clocks (containers with their own
time namespace, a libfaketime'd server). Spans without ``host.name`` fall
back to their instance id, then to their service name, so two unnamed
machines are never mistaken for one clock.

Within one domain the offset is exactly 0 with no uncertainty: raw
timestamps are comparable and one-way phases are exact.

Across domains, each complete call gives the four NTP timestamps

    t1 = client outboundMessageSent (first)   t2 = server serverCallStarted
    t3 = server outboundMessageSent (last)    t4 = client clientReceivedResponse (last)

    offset     = ((t2 - t1) + (t3 - t4)) / 2      (positive: server clock ahead)
    round_trip = (t4 - t1) - (t3 - t2)

Causality (t1 before t2 in true time, t3 before t4) bounds the true offset
to ``offset ± round_trip / 2`` for *every* call; the estimate's only
assumption is that both directions took equal time, and path asymmetry is
indistinguishable from clock offset without a shared clock.

The message events bound the exchange only for unary calls: a streaming
call's server may start before the client serialised its first message. So
streaming calls, and calls without events (plain
``opentelemetry-instrumentation-grpc`` spans), use the span boundaries
instead (client start/end, server start/end), which nest for every call
type; their round trip is wider, so they win only when nothing better exists.

Per (client domain, server domain, window of ``ClockOptions.window``, default
60 s, by the call's client start) the estimate is the call with the smallest
round trip, as NTP's clock filter does: its bound is the tightest any single
call gives, so the reported ``uncertainty = round_trip / 2`` is a guarantee,
not a statistic. (A median over the lowest-rtt decile is steadier against
one lucky sample but has no such bound; with clocks that drift by
microseconds per minute, the guaranteed bound is the more useful number.)
Calls whose round trip is negative (timestamps that cannot be causal, e.g.
a clock stepped mid-call) are ignored.

Corrected one-way phases use the offset of the call's own window; a window
without an estimate uses the pair's best estimate over the whole range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.calls import calls_source, rows_to_scan
from grpc_overhead.analyzer.dispatch import DISPATCH_CANDIDATE_COLUMNS
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.options import (
    CALL_FILTER,
    CALL_START,
    SHOWN_FILTER,
    TIME_FILTER,
    CallFilters,
    CallsOptions,
)
from grpc_overhead.analyzer.phase_bounds import SERVER_REQUEST_SEEN
from grpc_overhead.analyzer.result_columns import CALL_WEIGHT
from grpc_overhead.analyzer.store.base import Store

DOMAIN_HOST = "host"
DOMAIN_PROCESS = "process"
DEFAULT_WINDOW = timedelta(seconds=60)


@dataclass(frozen=True)
class ClockOptions:
    """``window``: length of an estimation window; ``domain``: "host" or "process"."""

    window: timedelta = DEFAULT_WINDOW
    domain: str = DOMAIN_HOST

    def __post_init__(self) -> None:
        if self.window <= timedelta(0):
            raise BadInput(f"clock offset window must be positive, not {self.window}")
        if self.domain not in (DOMAIN_HOST, DOMAIN_PROCESS):
            raise BadInput(f"clock domain must be 'host' or 'process', not {self.domain!r}")

    def parameters(self) -> dict[str, Any]:
        window_ns = int(self.window / timedelta(microseconds=1)) * 1_000
        return {"window_ns": window_ns, "per_process": int(self.domain == DOMAIN_PROCESS)}


def _domain(side: str) -> str:
    host, instance, service = f"{side}_host", f"{side}_instance", f"{side}_service"
    return (
        f"multiIf({{per_process:UInt8}} = 1 AND {instance} != '', {instance}, "
        f"{host} != '', {host}, {instance} != '', concat('instance:', {instance}), "
        f"concat('service:', {service}))"
    )


#: Derived columns every analysis query adds to the merged calls. The keys
#: hash a domain pair (and window) into one UInt64, so grouping and lookups
#: never hash strings twice.
DERIVED_COLUMNS = (
    f"{CALL_START} AS call_start_ns",
    f"{_domain('client')} AS client_domain",
    f"{_domain('server')} AS server_domain",
    "client_domain = server_domain AS same_domain",
    "intDiv(call_start_ns, {window_ns:Int64}) * {window_ns:Int64} AS window_start_ns",
    "cityHash64(client_domain, server_domain) AS pair_key",
    "cityHash64(pair_key, window_start_ns) AS window_key",
    *DISPATCH_CANDIDATE_COLUMNS,
)

#: t2 is the server's first sight of the request that certainly follows t1: the call's
#: start for our clients, the request's read for grpc-go/grpc-java ones, which send the
#: headers before serializing (``phase_bounds``).
_USE_EVENTS = (
    "call_type IN ('unary_unary', '') AND client_outbound_message_sent_ns != 0"
    f" AND {SERVER_REQUEST_SEEN} != 0 AND server_outbound_message_sent_last_ns != 0"
    " AND client_received_response_last_ns != 0"
)


def merged_cte(options: CallsOptions, keys: str = "", where: str = "") -> str:
    """``merged``: complete calls in the time filter, with domains and windows (only the
    calls ``keys`` names, when given: ``calls.calls_source``). Calls, never halves: a
    call whose peer half may still arrive is held back (``SHOWN_FILTER``), here where
    every reader of merged calls (pages, ``report``, ``grpc_call_phases``) passes.
    ``where``: a further condition on the merged calls (e.g. ``CALL_FILTER``)."""
    also = f" AND {where}" if where else ""
    return (
        f"merged AS (\n    SELECT *, {', '.join(DERIVED_COLUMNS)}\n"
        f"    FROM ({calls_source(options, keys)})\n"
        f"    WHERE {TIME_FILTER} AND {SHOWN_FILTER}{also}\n)"
    )


#: ``samples`` (one per complete call) and ``windows`` (the estimate per pair
#: and window). Same-domain calls contribute offset 0 with round trip 0, so
#: they report 0 ± 0.
OFFSET_CTES = f"""\
samples AS (
    SELECT
        client_domain, server_domain, window_start_ns, same_domain, pair_key, window_key,
        {CALL_WEIGHT} AS call_weight,
        {_USE_EVENTS} AS use_events,
        if(use_events, client_outbound_message_sent_ns, client_start_ns) AS t1,
        if(use_events, {SERVER_REQUEST_SEEN}, server_start_ns) AS t2,
        if(use_events, server_outbound_message_sent_last_ns, server_end_ns) AS t3,
        if(use_events, client_received_response_last_ns, client_end_ns) AS t4,
        if(same_domain, 0., ((t2 - t1) + (t3 - t4)) / 2) AS offset_ns,
        if(same_domain, toInt64(0), (t4 - t1) - (t3 - t2)) AS round_trip_ns
    FROM merged
    WHERE client_start_ns != 0 AND server_start_ns != 0 AND round_trip_ns >= 0
),
windows AS (
    SELECT
        any(client_domain) AS client_domain,
        any(server_domain) AS server_domain,
        any(window_start_ns) AS window_start_ns,
        any(pair_key) AS pair_key,
        window_key,
        argMin(offset_ns, round_trip_ns) AS window_offset_ns,
        min(round_trip_ns) / 2 AS window_uncertainty_ns,
        toUInt64(round(sum(call_weight))) AS window_calls
    FROM samples
    GROUP BY window_key
)"""

#: One constant for the whole query (a scalar subquery runs once): the
#: estimate of every window, and each pair's best window for windows without
#: an estimate of their own. Calls look theirs up by key with ``transform``
#: (a hash lookup) instead of joining millions of rows.
CLOCK_TABLE = """\
(
    SELECT (
        groupArray(window_key), groupArray(window_offset_ns), groupArray(window_uncertainty_ns),
        groupArrayIf(pair_key, pair_rank = 1), groupArrayIf(window_offset_ns, pair_rank = 1),
        groupArrayIf(window_uncertainty_ns, pair_rank = 1)
    )
    FROM (
        SELECT *, row_number() OVER (
            PARTITION BY pair_key ORDER BY window_uncertainty_ns, window_start_ns
        ) AS pair_rank
        FROM windows
    )
) AS clock_table"""

#: Each call's offset (0 where none: see ``clock_defined``) and its uncertainty.
CALL_OFFSET_COLUMNS = (
    "transform(window_key, clock_table.1, clock_table.2, nan) AS own_window_offset_ns",
    "transform(pair_key, clock_table.4, clock_table.5, nan) AS pair_offset_ns",
    "same_domain OR NOT isNaN(own_window_offset_ns) OR NOT isNaN(pair_offset_ns) AS clock_defined",
    "multiIf(same_domain, 0., NOT isNaN(own_window_offset_ns), own_window_offset_ns,"
    " NOT isNaN(pair_offset_ns), pair_offset_ns, 0.) AS clock_offset_ns",
    "multiIf(same_domain, 0., NOT isNaN(own_window_offset_ns),"
    " transform(window_key, clock_table.1, clock_table.3, nan),"
    " NOT isNaN(pair_offset_ns), transform(pair_key, clock_table.4, clock_table.6, nan), 0.)"
    " AS clock_uncertainty_ns",
)


def query_parameters(
    filters: CallFilters | None,
    clock: ClockOptions | None,
    settled: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The bound values every analysis query takes: call filters plus clock options."""
    return {
        **(filters or CallFilters()).parameters(settled),
        **(clock or ClockOptions()).parameters(),
    }


def clock_offsets(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """One row per (client domain, server domain, window) that has complete calls.

    Columns: client_host, server_host (the domains), window_start (UTC),
    offset_us, uncertainty_us, calls. Only the time filters apply: an
    offset is a property of two clocks, not of a method.
    """
    sql = (
        f"WITH\n{merged_cte(options or CallsOptions())},\n{OFFSET_CTES}\n"
        "SELECT client_domain AS client_host, server_domain AS server_host,\n"
        "    fromUnixTimestamp64Nano(window_start_ns, 'UTC') AS window_start,\n"
        "    window_offset_ns / 1000 AS offset_us,\n"
        "    window_uncertainty_ns / 1000 AS uncertainty_us,\n"
        "    window_calls AS calls\n"
        "FROM windows ORDER BY client_host, server_host, window_start"
    )
    return store.query(sql, query_parameters(filters, clock), readonly=True)


def pair_offsets(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
    settled: tuple[int, int] | None = None,
    follow_filters: bool = False,
) -> pd.DataFrame:
    """One row per (client domain, server domain): the best window's estimate.

    Columns: client_host, server_host, offset_us, uncertainty_us, calls,
    windows, offset_min_us and offset_max_us (the spread of the per-window
    estimates: clock drift over the range, or noise). ``settled``: a range
    of whole minutes read from the offset rollup instead (``rollup.offsets``).

    Only the time filters apply (an offset is a property of two clocks), unless
    ``follow_filters``: then every filter does, as in ``report``'s table, whose
    ``calls`` must be the calls it reports on (a run's, a method's). The offset rollup
    is kept per domain pair only, so ``rollup.offsets`` passes no ``settled`` range
    with such a filter.
    """
    options = options or CallsOptions()
    columns = "client_domain, server_domain, window_offset_ns, window_uncertainty_ns, window_calls"
    parameters = query_parameters(filters, clock, settled)
    windows = window_sources(store, options, parameters, settled, columns)
    sql = (
        f"WITH\n{merged_cte(options, where=CALL_FILTER if follow_filters else '')},\n"
        f"{OFFSET_CTES}\n"
        "SELECT client_domain AS client_host, server_domain AS server_host,\n"
        "    argMin(window_offset_ns, window_uncertainty_ns) / 1000 AS offset_us,\n"
        "    min(window_uncertainty_ns) / 1000 AS uncertainty_us,\n"
        "    sum(window_calls) AS calls, count() AS windows,\n"
        "    min(window_offset_ns) / 1000 AS offset_min_us,\n"
        "    max(window_offset_ns) / 1000 AS offset_max_us\n"
        f"FROM (\n{windows}\n)\n"
        "GROUP BY client_domain, server_domain ORDER BY client_host, server_host"
    )
    return store.query(sql, parameters, readonly=True)


def window_sources(
    store: Store,
    options: CallsOptions,
    parameters: dict[str, Any],
    settled: tuple[int, int] | None,
    columns: str,
) -> str:
    """``columns`` of every window estimate: the ``windows`` CTE for calls computed raw,
    UNION ALL the offset rollup's rows for the ``settled`` minutes (``rollup``); the raw
    part is left out when no call outside the settled range can match."""
    sources = []
    if not settled or rows_to_scan(store, options, parameters):
        sources.append(f"SELECT {columns} FROM windows")
    if settled:
        sources.append(
            f"SELECT {columns} FROM {options.qualified(options.offset_rollup_table)}"
            " WHERE window_start_ns >= {settled_from_ns:Int64}"
            " AND window_start_ns < {settled_until_ns:Int64}"
        )
    return "\nUNION ALL\n".join(sources)

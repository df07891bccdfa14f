"""The phases of a gRPC call: one set of SQL expressions, used by every query.

Each phase (``PHASES``) is a pair of expressions over one merged
``grpc_calls`` row and the call's clock offset: its value in integer
nanoseconds and whether it is defined (the events it needs were recorded:
not for calls from instrumentation without transport events, nor for the
missing half of a call). ``calls`` returns NULL where undefined, and every
output is in microseconds. Differences are taken in ``Int64``: a skewed
clock yields a negative phase, never a wrapped one.

The consecutive phases of the design and ``unattributed`` add up to
``total`` exactly (integer nanoseconds): ``unattributed`` is defined as the
rest and shown, never hidden; the optional ones count 0 where not measured.
For streams they are NULL (``stream_phases.UNARY_ONLY``): the stream phases
(per-message medians, time to first response, stream duration) describe them.

One-way network phases exist raw (timestamps of two clocks subtracted as
they are) and clock-corrected (``clock_offsets``); their sum
``request_network + response_network`` is exact whatever the clocks do.

Quantiles are ``quantilesTDigest``: see ``QUANTILES``.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import pandas as pd

from grpc_overhead.analyzer import interceptor_chain as chain
from grpc_overhead.analyzer import phase_bounds as bounds
from grpc_overhead.analyzer import span_sources as src
from grpc_overhead.analyzer.analysis_cost import unchained_comparisons
from grpc_overhead.analyzer.breakdown_frame import long_breakdown
from grpc_overhead.analyzer.call_columns import CALL_STATUS
from grpc_overhead.analyzer.calls import rows_to_scan
from grpc_overhead.analyzer.client_waits import (
    CLIENT_DISPATCH_MEASURED,
    CONNECT_MEASURED,
    client_dispatch_value,
    connect_value,
)
from grpc_overhead.analyzer.clock_offsets import (
    CALL_OFFSET_COLUMNS,
    CLOCK_TABLE,
    OFFSET_CTES,
    ClockOptions,
    merged_cte,
    query_parameters,
)
from grpc_overhead.analyzer.dispatch import dispatch_estimate_sql
from grpc_overhead.analyzer.options import CALL_FILTER, ROLLUP_FILTER, CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_aggregates import (
    breakdown_figures,
    state_aggregates,
    state_columns,
)
from grpc_overhead.analyzer.phase_terms import Phase, inline_own_value, needed, references
from grpc_overhead.analyzer.phase_terms import between as _between
from grpc_overhead.analyzer.phase_terms import derived as _derived
from grpc_overhead.analyzer.result_columns import (
    ALL_PHASES,
    CALL_COLUMNS,
    CALL_WEIGHT,
    CONSECUTIVE_PHASES,
    OPTIONAL_PHASES,
    QUANTILE_LEVELS,
)
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import CALL_SHAPE, IS_STREAM, UNARY_ONLY, stream_phases

_RESIDENCE_EVENTS = _between(
    "residence_events", "server_outbound_message_sent_last_ns", "server_call_started_ns"
)

_REQUEST_GAP = _between("request_gap", "server_call_started_ns", "client_outbound_message_sent_ns")
_OFFSET = "if(clock_defined, clock_offset_ns, 0)"
#: Computed one level below the phases (``with_dispatch``): every phase after
#: request_network refers to it. It must fit in the gap after the connection wait.
DISPATCH_ESTIMATE = (
    dispatch_estimate_sql(
        f"({_REQUEST_GAP.value} - {_OFFSET} - greatest(client_connect_ns, toInt64(0)))",
        "least(greatest(client_connect_ns, toInt64(0)), toInt64(5000000))",
    )
    + " AS server_dispatch_estimate_ns"
)
_DISPATCH = "server_dispatch_estimate_ns"
_CONNECT_VALUE = connect_value(f"{_REQUEST_GAP.value} - {_OFFSET}", _REQUEST_GAP.defined)
# (greatest/least skip NULLs in ClickHouse: test for it first)
_DISPATCH_VALUE = (
    f"if({_DISPATCH} IS NULL, 0., greatest(0., least(assumeNotNull({_DISPATCH}),"
    f" {_REQUEST_GAP.value} - {_OFFSET} - {_CONNECT_VALUE})))"
)
_RESPONSE_GAP = _between(
    "response_gap", "client_received_response_ns", "server_outbound_message_sent_ns"
)
_CLIENT_DISPATCH_VALUE = client_dispatch_value(
    f"{_RESPONSE_GAP.value} + {_OFFSET}", _RESPONSE_GAP.defined
)


def with_dispatch(source: str) -> str:
    """``source`` (rows with the clock columns) plus the dispatch estimate."""
    return f"(SELECT *, {unchained_comparisons(DISPATCH_ESTIMATE)} FROM ({source}))"


def unclocked_calls(where: str) -> str:
    """The ``merged`` calls matching ``where``, ready for ``PHASES`` without an offset
    estimate: one-way phases are exact where both halves share a clock and raw
    otherwise (the pages that need corrected ones use ``per_call_sql``)."""
    return with_dispatch(
        f"SELECT *, same_domain AS clock_defined, 0. AS clock_offset_ns FROM merged WHERE {where}"
    )


#: Every phase, in ``ALL_PHASES`` order: the one expression set every query uses.
PHASES: tuple[Phase, ...] = (
    _between("client_serialize", "client_outbound_message_sent_ns", "client_outbound_message_ns"),
    # After the request was handed to gRPC, before a transport could send it.
    Phase("client_connect", _CONNECT_VALUE, CONNECT_MEASURED),
    # The best estimate: less the client's connection wait and the server's dispatch
    # wait, clock-corrected; only where the client serialized before the headers left
    # (phase_bounds: grpc-go and grpc-java send them first, request_receive bounds it).
    Phase(
        "request_network",
        f"{_REQUEST_GAP.value} - {_CONNECT_VALUE} - {_DISPATCH_VALUE} - {_OFFSET}",
        _REQUEST_GAP.defined,
    ),
    # Between the server's core seeing the call and serverCallStarted (GIL, serving
    # thread, event loop); 0 where not measured (no deadline on the call), and
    # never more than the request gap, so no phase is negative on a shared clock.
    Phase("server_dispatch", _DISPATCH_VALUE, f"{_DISPATCH} IS NOT NULL"),
    Phase("server_queue", *chain.SERVER_QUEUE),  # less the interceptors' intercept_service
    _between("request_deserialize", "server_inbound_message_read_ns", "server_inbound_message_ns"),
    Phase("server_interceptors", *chain.SERVER_INTERCEPTORS),  # see interceptor_chain
    Phase("processing", *chain.PROCESSING),
    Phase("post_processing", *chain.POST_PROCESSING),
    _between("response_serialize", "server_outbound_message_sent_ns", "server_outbound_message_ns"),
    Phase(
        "response_network",
        f"{_RESPONSE_GAP.value} + {_OFFSET} - {_CLIENT_DISPATCH_VALUE}",
        _RESPONSE_GAP.defined,
    ),
    # Between the response reaching the client's process and the caller running again
    # (GIL, event loop): an estimate from the process's lag probe, right on average.
    Phase("client_dispatch", _CLIENT_DISPATCH_VALUE, CLIENT_DISPATCH_MEASURED),
    _between("client_deserialize", "client_inbound_message_read_ns", "client_received_response_ns"),
    _between("total", "client_end_ns", "client_start_ns"),
    # The server's clock only: from its events, else from its residence
    # attribute (the client reads it from the trailer, so a call whose server
    # half is missing still has it).
    Phase(
        "server_residence",
        f"if({_RESIDENCE_EVENTS.defined}, {_RESIDENCE_EVENTS.value}, server_residence_ns)",
        f"{_RESIDENCE_EVENTS.defined} OR server_residence_ns >= 0",
    ),
    _derived("network_overhead", "total_value - processing_value", "total", "processing"),
    # The optional phases count as 0 where they were not measured: their time is then
    # inside a neighbour (client_connect and server_dispatch in request_network,
    # server_interceptors in server_queue and processing, post_processing in processing,
    # client_dispatch in response_network), and the phases still add up to total.
    _derived(
        "unattributed",
        "total_value - (" + " + ".join(f"{p}_value" for p in CONSECUTIVE_PHASES) + ")",
        "total",
        *(p for p in CONSECUTIVE_PHASES if p not in OPTIONAL_PHASES),
    ),
    Phase("pool_wait", *chain.POOL_WAIT),  # less the interceptors' intercept_service
    _between("server_duration", "server_end_ns", "server_start_ns"),
    _derived(
        "client_server_gap", "total_value - server_duration_value", "total", "server_duration"
    ),
    # Raw: the two clocks' timestamps as they are (the waits still taken out).
    Phase(
        "request_network_raw",
        f"{_REQUEST_GAP.value} - {_CONNECT_VALUE} - {_DISPATCH_VALUE}",
        _REQUEST_GAP.defined,
    ),
    Phase(
        "response_network_raw",
        f"{_RESPONSE_GAP.value} - {_CLIENT_DISPATCH_VALUE}",
        _RESPONSE_GAP.defined,
    ),
    # Aliases of the best estimates, kept for readers of the older names.
    _derived("request_network_corrected", "request_network_value", "request_network"),
    _derived("response_network_corrected", "response_network_value", "response_network"),
    # Attempt start (A72/semconv; ours: requestCreated) -> request handed to the
    # transport: LB pick, serialization, compression, enqueue.
    _between("client_pre_send", "client_outbound_message_sent_ns", src.PHASE_ATTEMPT_START),
    # Server call start -> request deserialized: body arrival, decompression, unmarshal
    # (ours: server_queue + request_deserialize).
    _between("server_receive", src.SERVER_READ, "server_call_started_ns"),
    # Request deserialized -> response handed to the transport: handler plus response
    # serialization (ours: processing + response_serialize).
    _between("server_handler", "server_outbound_message_sent_ns", src.SERVER_READ),
    # Last response handed to the transport -> server span end (status, trailers).
    _between("server_tail", "server_end_ns", "server_outbound_message_sent_last_ns"),
    # Request handed to the client's transport -> read by the server (less the connection).
    bounds.request_receive(_OFFSET, _CONNECT_VALUE),
    # Response handed to the server's transport -> read and deserialized by the client,
    # clock-corrected: response_network + client_deserialize where both are known.
    Phase(
        "response_receive",
        f"{src.CLIENT_READ} - server_outbound_message_sent_ns + {_OFFSET}",
        f"{src.CLIENT_READ} != 0 AND server_outbound_message_sent_ns != 0",
    ),
    # The network both ways from two durations on one clock each (no clock agreement).
    bounds.network_round_trip(),
)
# Streams: the phases that assume one message each way are NULL, the stream phases follow.
# No network phase is shown negative where its events cannot bound it (phase_bounds).
PHASES = (
    *(
        replace(p, defined=f"({p.defined}) AND NOT {IS_STREAM}") if p.name in UNARY_ONLY else p
        for p in map(bounds.bounded, PHASES)
    ),
    *(Phase(*phase) for phase in stream_phases()),
)
assert tuple(phase.name for phase in PHASES) == ALL_PHASES


#: Phases computed from other phases (``unattributed`` from a dozen): ``per_call_sql``
#: computes them one query level above the rest, from those columns, so the engine does
#: not expand each alias into its whole expression where it is used.
DERIVED_PHASES = frozenset(phase.name for phase in PHASES if references(phase))
assert not any(references(p) & DERIVED_PHASES for p in PHASES), "one level of derived phases"


def needed_phases(phases: Collection[str]) -> frozenset[str]:
    """``phases`` and the phases they are computed from; ValueError for an unknown name."""
    return needed(PHASES, phases)


def _status_columns() -> tuple[str, ...]:
    return (
        f"{CALL_STATUS} AS status_code",
        "client_status_code",
        "server_status_code",
        "client_error",
        "server_error",
        "toUInt8(client_error OR server_error) AS error",
        f"{CALL_SHAPE} AS call_shape",
        "client_start_ns != 0 AS has_client",
        "server_start_ns != 0 AS has_server",
    )


def per_call_sql(
    options: CallsOptions | None = None,
    *,
    clock: bool = True,
    columns: Sequence[str] | None = None,
    keys: str = "",
    phases: Collection[str] | None = None,
) -> str:
    """The one per-call query: a row per call, each phase as ``{name}_value`` and
    ``{name}_defined`` (ns), after ``columns`` (only the calls ``keys`` names, if
    given: ``calls.calls_source``). ``phases``: only these (and what they are
    computed from, ``needed_phases``), for a reader that knows what it reads:
    the engine analyzes every phase expression of a query, which costs more than
    reading a few thousand calls (the Overview: 1.2 s of analysis for all phases,
    0.5 s for its 19).

    ``clock=True`` estimates clock offsets (a second pass over every call) and,
    with the default ``columns``, adds the offset applied (``clock_offset_ns``,
    ``clock_defined``);
    ``clock=False`` skips the estimate, about three times cheaper: phases then
    use offset 0 (``unclocked_calls``: exact where both halves share a clock,
    raw otherwise), and a phase that exists only with an estimate
    (``Phase.only_with_clock``) is left out. ``columns`` default: ``CALL_COLUMNS``,
    ``call_start_ns`` and the status columns.

    Parameters: ``CallFilters.parameters()`` + ``ClockOptions.parameters()``.
    """
    wanted = needed_phases(phases) if phases is not None else frozenset(ALL_PHASES)
    selected, derived = [], []
    for phase in PHASES:
        if phase.name in wanted and (clock or not phase.only_with_clock):
            if phase.name in DERIVED_PHASES:
                selected += [f"0 AS {phase.name}_value", f"0 AS {phase.name}_defined"]
                derived += [
                    f"{phase.value} AS {phase.name}_value",
                    f"{inline_own_value(phase)} AS {phase.name}_defined",
                ]
            else:
                selected += [
                    f"{phase.value} AS {phase.name}_value",
                    f"{phase.defined} AS {phase.name}_defined",
                ]
    default = columns is None
    if columns is None:
        columns = (*CALL_COLUMNS, "call_start_ns", *_status_columns(), f"{CALL_WEIGHT} AS weight")
    ctes = [merged_cte(options or CallsOptions(), keys)]
    if clock:
        ctes += [OFFSET_CTES, CLOCK_TABLE]
        if default:  # given columns may select them already (``*``)
            columns = (*columns, *(column.split(" AS ")[-1] for column in CALL_OFFSET_COLUMNS))
        with_clock = f"SELECT *, {', '.join(CALL_OFFSET_COLUMNS)} FROM merged WHERE {CALL_FILTER}"
        source = with_dispatch(with_clock)
    else:
        source = unclocked_calls(CALL_FILTER)
    selected = [unchained_comparisons(expression) for expression in selected]
    sql = "SELECT\n    " + ",\n    ".join([*columns, *selected]) + f"\nFROM {source}"
    if derived:
        replaced = ",\n    ".join(unchained_comparisons(expression) for expression in derived)
        sql = f"SELECT * REPLACE (\n    {replaced}\n)\nFROM (\n{sql}\n)"
    return "WITH\n" + ",\n".join(ctes) + "\n" + sql


def calls(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    limit: int | None = None,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """One row per call, every phase in µs (``{phase}_us``, NaN where undefined), and the
    calls it stands for under sampling (``weight``, from ``per_call_sql``).

    Ordered by call start; ``limit`` keeps the most recent calls.
    """
    internal = [f"{name}_{part}" for name in ALL_PHASES for part in ("value", "defined")]
    sql = (
        f"SELECT * EXCEPT ({', '.join(internal)}, clock_offset_ns, clock_uncertainty_ns,"
        " own_window_offset_ns, pair_offset_ns),\n    "
        + ",\n    ".join(
            f"if({name}_defined, {name}_value / 1000, NULL) AS {name}_us" for name in ALL_PHASES
        )
        + ",\n    fromUnixTimestamp64Nano(call_start_ns, 'UTC') AS start"
        + ",\n    if(clock_defined, clock_offset_ns / 1000, NULL) AS clock_offset_us"
        + ",\n    if(clock_defined, clock_uncertainty_ns / 1000, NULL) AS clock_uncertainty_us"
        + f"\nFROM ({per_call_sql(options)})\nORDER BY call_start_ns DESC"
    )
    parameters = query_parameters(filters, clock)
    if limit is not None:
        sql += "\nLIMIT {limit:UInt64}"
        parameters["limit"] = int(limit)
    frame = store.query(sql, parameters, readonly=True)
    return frame.iloc[::-1].reset_index(drop=True)


def breakdown_sql(
    options: CallsOptions | None = None,
    *,
    rollup: bool = False,
    raw: bool = True,
) -> str:
    """Per (service, method): calls (weighted: the calls made, estimated under sampling)
    and stored_calls, and per phase count, p50/p90/p99 and mean in ns (weighted).

    With ``rollup``, minutes in ``[settled_from_ns, settled_until_ns)`` come from
    the rollup table and only the other calls are computed raw (the time filter
    leaves that range out); ``raw=False`` when no other call can match.
    """
    options = options or CallsOptions()
    per_call = per_call_sql(options)
    if not rollup:  # nothing to merge: finished quantiles (why: ``phase_aggregates``)
        finished = state_aggregates(finished_at=QUANTILE_LEVELS)
        return (
            "SELECT service, method, toUInt64(round(weighted_calls)) AS calls, stored_calls,\n    "
            + ",\n    ".join(breakdown_figures(finished=True))
            + "\nFROM (\nSELECT service, method, sum(weight) AS weighted_calls,"
            " count() AS stored_calls,\n    "
            + ",\n    ".join(finished)
            + f"\nFROM ({per_call})\nGROUP BY service, method\n)\nORDER BY service, method"
        )
    sources = [
        f"SELECT service, method, calls, stored_calls, {', '.join(state_columns())}\n"
        f"FROM {options.qualified(options.rollup_table)}\n"
        "WHERE window_start_ns >= {settled_from_ns:Int64}"
        " AND window_start_ns < {settled_until_ns:Int64}"
        f" AND calls > 0 AND {ROLLUP_FILTER}"
    ]
    if raw:
        sources.append(
            "SELECT service, method, sum(weight) AS calls, count() AS stored_calls,\n    "
            + ",\n    ".join(state_aggregates())
            + f"\nFROM ({per_call})\nGROUP BY service, method"
        )
    source = "\nUNION ALL\n".join(sources)
    merged = breakdown_figures()
    return (
        "SELECT service, method, toUInt64(round(sum(calls))) AS calls,"
        " sum(stored_calls) AS stored_calls,\n    "
        + ",\n    ".join(merged)
        + f"\nFROM (\n{source}\n)\nGROUP BY service, method\nORDER BY service, method"
    )


def phase_breakdown(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
    settled: tuple[int, int] | None = None,
) -> pd.DataFrame:
    """One row per (service, method, phase), phases in ``ALL_PHASES`` order.

    Columns ``BREAKDOWN_COLUMNS`` and ``stored_calls``: ``calls`` counts the method's
    calls (weighted: under sampling, the calls made; ``stored_calls`` those stored),
    ``phase_calls`` those for which the phase is defined; quantiles and
    mean are NaN where it is defined for none. ``settled``: a range of call
    starts (Unix ns, whole rollup windows) to read from the rollup table
    instead (``rollup.breakdown`` finds it).
    """
    options = options or CallsOptions()
    parameters = query_parameters(filters, clock, settled)
    raw = not settled or rows_to_scan(store, options, parameters)
    sql = breakdown_sql(options, rollup=bool(settled), raw=raw)
    return long_breakdown(store.query(sql, parameters, readonly=True))

"""What a query over the calls reads: where the tables are and which calls.

``CallsOptions`` names the tables (and how the halves of a call merge on
read), ``CallFilters`` the calls (time range, service, method, run); the SQL
fragments here (``ROW_FILTER``, ``TIME_FILTER``, ``CALL_FILTER``) take their
values as bound parameters, never formatted in. ``calls`` builds the table
these describe and re-exports every name, so ``from
grpc_overhead.analyzer.calls import CallFilters`` keeps working.
"""

from __future__ import annotations

import calendar
import math
import os
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.schema import DEFAULT_TRACES_TABLE, SchemaOptions
from grpc_overhead.analyzer.store.base import quote_identifier

CALLS_TABLE = "grpc_calls"
CALLS_VIEW = "grpc_calls_mv"


@dataclass(frozen=True)
class CallsOptions:
    """Where the tables live and how server mode creates them.

    ``database`` '' means the connection's current database (a ClickHouse
    URL's path, chDB's ``default``), where ``otel_traces`` is by default.

    ``cluster`` adds ``ON CLUSTER``; ``engine``/``engine_params`` replace
    ``AggregatingMergeTree()`` (e.g. ``ReplicatedAggregatingMergeTree`` with
    its ZooKeeper path) on a replicated cluster.
    """

    database: str = ""
    traces_table: str = DEFAULT_TRACES_TABLE
    calls_table: str = CALLS_TABLE
    view: str = CALLS_VIEW
    rollup_table: str = "grpc_phase_rollup"
    offset_rollup_table: str = "grpc_offset_rollup"
    cluster: str = ""
    engine: str = ""
    engine_params: str = ""
    #: How a query merges the two halves of each call (``READ_STRATEGIES``): ``final``
    #: (``FINAL``, the default) or ``group_by``; a knob for the analysis benchmark,
    #: carried here so that no query signature needs it.
    read: str = "final"

    @classmethod
    def from_schema(cls, schema: SchemaOptions) -> CallsOptions:
        """The same database, traces table and cluster as ``otel_traces``.

        A replicated ``otel_traces`` engine (``ReplicatedMergeTree``) becomes
        ``ReplicatedAggregatingMergeTree`` with the same parameters.
        """
        engine = ""
        if schema.engine.startswith("Replicated"):
            engine = "ReplicatedAggregatingMergeTree"
        return cls(
            database=schema.database_name,
            traces_table=schema.traces_table,
            cluster=schema.cluster,
            engine=engine,
            engine_params=schema.engine_params if engine else "",
        )

    def qualified(self, name: str) -> str:
        if not self.database:
            return quote_identifier(name)
        return f"{quote_identifier(self.database)}.{quote_identifier(name)}"

    @property
    def calls(self) -> str:
        return self.qualified(self.calls_table)

    @property
    def traces(self) -> str:
        return self.qualified(self.traces_table)

    def on_cluster(self) -> str:
        return f" ON CLUSTER {quote_identifier(self.cluster)}" if self.cluster else ""

    def engine_clause(self) -> str:
        if not self.engine:
            return "AggregatingMergeTree()"
        return f"{self.engine}({self.engine_params})"


INT64_MAX = (1 << 63) - 1

#: How a read merges the halves that background merges have not combined yet.
#: "final": ``SELECT ... FROM grpc_calls FINAL`` (the engine merges while
#: reading, by sorting key, streaming, and skips the merge for parts that
#: need none); "group_by": ``GROUP BY TraceId, ClientSpanId`` with ``max`` per
#: column (a hash table of every key in memory). Both give the same rows.
#: Measured on chDB at 1 M calls (bench/results/analysis.md): about as fast
#: on unmerged halves, FINAL 2.7x faster once parts are merged; FINAL it is.
READ_STRATEGIES = ("final", "group_by")
DEFAULT_READ = "final"


#: How far apart the starts of a call's two halves may be (clock disagreement
#: plus request latency) for ``ROW_FILTER`` to keep both halves of every call
#: it keeps. Beyond it, a call at the edge of a time filter may read as two
#: half calls.
HALF_MARGIN_NS = 60 * 1_000_000_000

_ROW_START = "greatest(client_start_ns, server_start_ns)"


#: A time pre-filter on unmerged halves, applied before they merge (PREWHERE
#: with FINAL, WHERE before GROUP BY), so rows far outside the time filter are
#: not merged at all. It widens the call-level ``TIME_FILTER`` by
#: ``HALF_MARGIN_NS`` on every edge, which keeps both halves of any call the
#: call-level filter can keep. Parameters: ``time_parameters``.
def _in_scan(start: str) -> str:
    return (
        f"{start} >= {{scan_since_ns:Int64}} AND {start} < {{scan_until_ns:Int64}}"
        f" AND NOT ({start} >= {{skip_from_ns:Int64}} AND {start} < {{skip_until_ns:Int64}})"
    )


#: A gRFC A72 attempt that reached no server (connection refused, a server restarting)
#: is a row with neither half's start: it is read with its call by the attempt's start
#: (the second branch; the index still skips parts without such rows).
ROW_FILTER = (
    f"(({_in_scan(_ROW_START)}) OR ({_ROW_START} = 0 AND {_in_scan('client_attempt_start_ns')}))"
)
#: Rows that stand for a call's start (not such an attempt): for first/last call times.
HAS_ROW_START = f"{_ROW_START} != 0"


#: Rows are ordered by trace id, so within a part every granule spans the
#: part's whole time range; but parts merge only with their neighbours in
#: insertion order, so each part covers a contiguous stretch of time. This
#: index lets a time-filtered read (``ROW_FILTER``) skip the parts entirely
#: outside its range: the last minutes of a long-lived store are read
#: without touching the older parts.
ROW_START_INDEX = (
    "INDEX row_start_idx greatest(client_start_ns, server_start_ns) TYPE minmax GRANULARITY 1"
)


def time_parameters(
    since_ns: int, until_ns: int, settled: tuple[int, int] | None = None
) -> dict[str, int]:
    """Bound values of ``TIME_FILTER`` and ``ROW_FILTER``: calls starting in
    ``[since_ns, until_ns)`` minus the ``settled`` range (rollups have it)."""
    settled_from, settled_until = settled or (0, 0)
    skip_from, skip_until = settled_from + HALF_MARGIN_NS, settled_until - HALF_MARGIN_NS
    if skip_until <= skip_from:
        skip_from = skip_until = 0
    return {
        "since_ns": since_ns,
        "until_ns": until_ns,
        "settled_from_ns": settled_from,
        "settled_until_ns": settled_until,
        "scan_since_ns": max(since_ns - HALF_MARGIN_NS, -INT64_MAX),
        "scan_until_ns": min(until_ns, INT64_MAX - HALF_MARGIN_NS) + HALF_MARGIN_NS,
        "skip_from_ns": skip_from,
        "skip_until_ns": skip_until,
    }


#: When a call happened: the client span's start, or the server span's for a
#: call whose client half never arrived.
CALL_START = "if(client_start_ns != 0, client_start_ns, server_start_ns)"

#: Filters on merged rows. Every value is a bound parameter (``CallFilters.parameters``);
#: '' means "any". ``[settled_from_ns, settled_until_ns)`` is a range left out because
#: rollups already cover it (``rollup``); empty by default.
TIME_FILTER = (
    "call_start_ns >= {since_ns:Int64} AND call_start_ns < {until_ns:Int64}"
    " AND NOT (call_start_ns >= {settled_from_ns:Int64}"
    " AND call_start_ns < {settled_until_ns:Int64})"
)
#: How long a call seen from one side only is held back from every live reader before it
#: counts as one-sided (``SHOWN_FILTER``). The two halves of a call end within the call's
#: own duration, then wait in their processes' export batches (our instrumentation: 0.25 s,
#: ``GRPC_OVERHEAD_EXPORT_INTERVAL_MS``; the OpenTelemetry SDK's BatchSpanProcessor: 5 s),
#: in the collector's exporter queue (embedded: 0.2 s; clickhouse: 5 s ``flush_timeout``)
#: and the intake's batch (50 ms): the peer of a half lands at most about 10 s after it.
HOLD_BACK_NS = 10 * 1_000_000_000
#: Seconds, to set it otherwise (a pipeline that batches longer, or 0 for none).
HOLD_BACK_ENV = "GRPC_OVERHEAD_HOLD_BACK_S"
_MAX_HOLD_BACK_S = 3600.0


def hold_back_ns() -> int:
    """``HOLD_BACK_NS``, or ``GRPC_OVERHEAD_HOLD_BACK_S`` seconds where set."""
    text = os.environ.get(HOLD_BACK_ENV, "").strip()
    if not text:
        return HOLD_BACK_NS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not (math.isfinite(seconds) and 0 <= seconds <= _MAX_HOLD_BACK_S):
        raise BadInput(
            f"bad {HOLD_BACK_ENV}={text!r}: must be seconds between 0 and {_MAX_HOLD_BACK_S:g}"
        )
    return int(seconds * 1_000_000_000)


#: The snapshot every read of one page or report takes: halves that arrived in the store
#: after it are not seen. ``{as_of_ns}`` 0 = the engine's clock at the query.
_AS_OF = "if({as_of_ns:Int64} = 0, toUnixTimestamp64Nano(now64(9)), {as_of_ns:Int64})"
_CLIENT_SEEN = f"(client_start_ns != 0 AND client_arrived_ns <= {_AS_OF})"
_SERVER_SEEN = f"(server_start_ns != 0 AND server_arrived_ns <= {_AS_OF})"

#: A half that reached the store this long after its span ended is history (an import,
#: a replay, a backfill, seeded data), not a live export: its peer is not in flight behind
#: it, so it is not held back. Live halves land within seconds (``HOLD_BACK_NS``).
HISTORY_NS = 60 * 1_000_000_000


def _settled_half(side: str) -> str:
    return (
        f"({side}_arrived_ns <= {_AS_OF} - {{grace_ns:Int64}}"
        f" OR {side}_end_ns < {side}_arrived_ns - {HISTORY_NS})"
    )


#: Calls, never halves (on merged rows): a call is shown once both halves arrived, or once
#: its only half has waited ``{grace_ns}`` for its peer (then it is a one-sided call:
#: server-only traffic from an uninstrumented client, client-only against an
#: uninstrumented server). Arrivals are the store's own clock at insert
#: (``client_arrived_ns``/``server_arrived_ns``, filled by the materialized view), not the
#: spans' times: imported, replayed and clock-skewed spans are judged by when they landed
#: (span times only tell history apart: ``HISTORY_NS``). Rows stored before those columns
#: existed read 0: long arrived. With one ``as_of_ns`` every query of a page sees the same
#: calls, so its counts agree. A client half whose server said it dropped its own half
#: (tail-aware sampling: the server's instance arrived with the client half, the only way
#: ``server_instance`` is set without a server half) waits for nothing: shown at once. Only
#: without a server half: a server half that arrived after the snapshot sets it too, and a
#: page's queries would count the call once that half is visible and not before.
SHOWN_FILTER = (
    f"(({_CLIENT_SEEN} AND {_SERVER_SEEN})"
    f" OR ({_CLIENT_SEEN} AND ({_settled_half('client')}"
    " OR (server_start_ns = 0 AND server_instance != '')))"
    f" OR ({_SERVER_SEEN} AND {_settled_half('server')}))"
)

#: ``ROLLUP_FILTER``: the part rollup rows can answer (they are kept per gRPC service,
#: method and run). ``CALL_FILTER`` adds the OpenTelemetry service name
#: (``OTEL_SERVICE_NAME``) of either side, which rollups do not keep: a query with it
#: computes everything raw (``rollup.settled_range``).
ROLLUP_FILTER = (
    "({service:String} = '' OR service = {service:String})"
    " AND ({method:String} = '' OR method = {method:String})"
    " AND ({run_id:String} = '' OR run_id = {run_id:String})"
)
CALL_FILTER = (
    f"{ROLLUP_FILTER} AND ({{otel_service:String}} = ''"
    " OR client_service = {otel_service:String} OR server_service = {otel_service:String})"
)


@dataclass(frozen=True)
class CallFilters:
    """Which calls a query covers; every field optional.

    ``since``/``until`` bound the call's start (client clock), ``until``
    exclusive; naive datetimes are taken as local time. ``service`` is the gRPC
    service (``rpc.service``, e.g. ``predict.Predictor``); ``otel_service`` the
    OpenTelemetry service name (``OTEL_SERVICE_NAME``) of the client or the server.

    ``as_of_ns`` (Unix ns, the store's clock): the snapshot of arrivals every query
    with these filters reads (``SHOWN_FILTER``); None = each query's own moment. A
    page or report that runs several queries sets it once (``snapshot``) so that its
    counts agree. ``grace_ns``: how long a one-sided call is held back.
    """

    since: datetime | None = None
    until: datetime | None = None
    service: str | None = None
    method: str | None = None
    run_id: str | None = None
    otel_service: str | None = None
    as_of_ns: int | None = None
    grace_ns: int = field(default_factory=hold_back_ns)

    def at_rest(self) -> CallFilters:
        """These filters on a store nothing writes to any more (a stopped store this process
        opened itself): no half is in flight, so nothing is held back."""
        return replace(self, grace_ns=0)

    def snapshot(self, as_of_ns: int) -> CallFilters:
        """These filters reading the arrivals up to ``as_of_ns`` (``SHOWN_FILTER``)."""
        return replace(self, as_of_ns=as_of_ns)

    def parameters(self, settled: tuple[int, int] | None = None) -> dict[str, Any]:
        """Bound values of every filter; ``settled``: a range rollups cover, left out."""
        return {
            **time_parameters(
                unix_ns(self.since) if self.since else 0,
                unix_ns(self.until) if self.until else INT64_MAX,
                settled,
            ),
            "service": self.service or "",
            "method": self.method or "",
            "run_id": self.run_id or "",
            "otel_service": self.otel_service or "",
            "as_of_ns": self.as_of_ns or 0,
            "grace_ns": self.grace_ns,
        }


def unix_ns(moment: datetime) -> int:
    """A datetime as Unix nanoseconds (naive = local time), exact to the microsecond."""
    moment = moment.astimezone(UTC)
    seconds = calendar.timegm(moment.utctimetuple())
    return seconds * 1_000_000_000 + moment.microsecond * 1_000

"""The calls a finding's query reads, in ``grpc_call_phases``' own column names.

Every kind's SQL is written once, over a relation with the view's columns
(``rpc_service``, ``rpc_method``, ``server_instance``, ``request_bytes``,
``<phase>_us`` ...), and runs over one of two sources:

* ``Source.run``: what the engine executes. The app's per-call rows
  (``insights.rows.rows_for``: settled minutes read stored, only the rest
  merged and computed; the same values as ``per_call_sql``) under the
  caller's filters and clock options, renamed to the view's columns, all
  values bound.
* ``Source.shown``: what a finding shows (``Finding.sql``): ``grpc_call_phases``
  restricted to the finding's method and the caller's run and time range,
  values bound too. Run with the view's defaults (host clock domains, 60 s
  windows) it reproduces the finding's numbers; that is tested.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.findings.model import SUBSET
from grpc_overhead.analyzer.insights.rows import rows_for
from grpc_overhead.analyzer.options import CallFilters, CallsOptions, unix_ns
from grpc_overhead.analyzer.phase_view import IDENTITY, PHASES_VIEW
from grpc_overhead.analyzer.phases import needed_phases
from grpc_overhead.analyzer.result_columns import ALL_PHASES
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import CALL_SHAPE

#: Calls whose phases describe one message each way: the unary-only phases are NULL for
#: streams, so the kinds read unary calls (and calls whose shape was not recorded).
UNARY = "call_shape IN ('unary', '')"

#: The view's identity columns the kinds read, with the view's own expressions; but the
#: call's shape, which the view takes from ``per_call_sql``'s status columns and
#: ``rows_for``'s rows lack: computed from the same columns as there.
_VIEW_COLUMNS = {name: expression for name, expression, _ in IDENTITY}
_IDENTITY: tuple[tuple[str, str], ...] = (
    *(
        (name, _VIEW_COLUMNS[name])
        for name in (
            "trace_id",
            "rpc_service",
            "rpc_method",
            "server_instance",
            "server_host",
            "client_host",
            "start_time",
            "request_bytes",
            "response_bytes",
            "weight",
        )
    ),
    ("call_shape", CALL_SHAPE),
    ("compression", "toString(compression)"),
)
_UNCERTAINTY = ("clock_uncertainty_us", "if(clock_defined, clock_uncertainty_ns / 1000, NULL)")


def phases_named(sql: str) -> frozenset[str]:
    """The phases SQL over the view's columns reads (``{name}_us``)."""
    return frozenset(name for name in re.findall(r"\b(\w+)_us\b", sql) if name in ALL_PHASES)


def _renamed(rows: str, *, uncertainty: bool, phases: frozenset[str] | None) -> str:
    columns = [f"{expression} AS {name}" for name, expression in _IDENTITY]
    if uncertainty:
        columns.append(f"{_UNCERTAINTY[1]} AS {_UNCERTAINTY[0]}")
    kept = ALL_PHASES if phases is None else needed_phases(phases)
    columns += [
        f"if({name}_defined, toFloat64({name}_value) / 1000, NULL) AS {name}_us"
        for name in ALL_PHASES
        if name in kept
    ]
    return "(SELECT " + ", ".join(columns) + f" FROM ({rows}))"


@dataclass(frozen=True)
class Source:
    """The caller's calls (``run``) and how a finding shows its own (``shown``)."""

    sql: str
    parameters: dict[str, Any]
    filters: CallFilters
    #: The same calls with only the phases a query reads (and those they are computed
    #: from); None once narrowed. The engine analyzes every phase expression of a query,
    #: which costs more than reading a few thousand calls, and the findings read 16 of
    #: the 36 phases: their one query on a run of 25 calls 2.9 s -> 2.1 s.
    narrowed: Callable[[frozenset[str]], Source] | None = field(default=None, compare=False)

    @classmethod
    def run(
        cls,
        store: Store,
        filters: CallFilters,
        clock: ClockOptions | None,
        options: CallsOptions,
    ) -> Source:
        """The calls ``filters`` keep, the view's columns (no clock uncertainty)."""
        return cls._calls(store, filters, clock, options, estimates=False)

    @classmethod
    def with_uncertainty(
        cls,
        store: Store,
        filters: CallFilters,
        clock: ClockOptions | None,
        options: CallsOptions,
    ) -> Source:
        """The same calls with their clock estimate and its uncertainty: settled minutes
        as the settle estimated them (stored), the rest computed with the estimate."""
        return cls._calls(store, filters, clock, options, estimates=True)

    @classmethod
    def _calls(
        cls,
        store: Store,
        filters: CallFilters,
        clock: ClockOptions | None,
        options: CallsOptions,
        *,
        estimates: bool,
        phases: frozenset[str] | None = None,
    ) -> Source:
        rows, bound = rows_for(
            store, filters, options, clock_options=clock, phases=phases, estimates=estimates
        )
        sql = _renamed(rows, uncertainty=estimates, phases=phases)
        if phases is not None:
            return cls(sql, bound, filters)

        def narrowed(read: frozenset[str]) -> Source:
            return cls._calls(store, filters, clock, options, estimates=estimates, phases=read)

        return cls(sql, bound, filters, narrowed)

    def shown(self, service: str, method: str) -> tuple[str, dict[str, Any]]:
        """(relation, values): ``grpc_call_phases`` for one method under this source's
        run and time filters, for a finding's ``sql``."""
        where = ["rpc_service = {service:String}", "rpc_method = {method:String}"]
        values: dict[str, Any] = {"service": service, "method": method}
        if self.filters.run_id:
            where.append("run_id = {run_id:String}")
            values["run_id"] = self.filters.run_id
        if self.filters.otel_service:
            where.append(
                "(client_service_name = {otel_service:String}"
                " OR server_service_name = {otel_service:String})"
            )
            values["otel_service"] = self.filters.otel_service
        if self.filters.since:
            where.append("start_time >= fromUnixTimestamp64Nano({since_ns:Int64}, 'UTC')")
            values["since_ns"] = unix_ns(self.filters.since)
        if self.filters.until:
            where.append("start_time < fromUnixTimestamp64Nano({until_ns:Int64}, 'UTC')")
            values["until_ns"] = unix_ns(self.filters.until)
        return f"(SELECT * FROM {PHASES_VIEW} WHERE {' AND '.join(where)})", values


#: A kind's query: SQL over a relation with the view's columns.
Query = Callable[[str], str]


@dataclass(frozen=True)
class Reader:
    """Runs a kind's query over the caller's calls, and says how a finding shows it."""

    store: Store
    source: Source

    def query(self, build: Query, source: Source | None = None) -> pd.DataFrame:
        source = source or self.source
        if source.narrowed is not None:
            source = source.narrowed(phases_named(build("calls")))
        return self.store.query(build(source.sql), source.parameters, readonly=True)

    def shown(self, build: Query, service: str, method: str) -> dict[str, Any]:
        """``Finding`` keywords: the query over ``grpc_call_phases`` for one method."""
        relation, values = self.source.shown(service, method)
        return {"sql": build(relation), "parameters": values}


#: Slow calls (the tail kind): slower than their method's p95. Time tenths of the method's
#: range (``bucket``): where in time a call falls.
SLOW_QUANTILE = 0.95
TIME_BUCKETS = 10
_PER_CALL = (
    "SELECT *, total_us >= slow_from AS slow,\n"
    f"        toUInt8(least({TIME_BUCKETS - 1}, intDiv((at - first) * {TIME_BUCKETS},"
    " greatest(last - first, 1)))) AS bucket\n"
    f"    FROM (SELECT *, {SUBSET} AS subset, toUnixTimestamp64Nano(start_time) AS at,\n"
    f"            {weighted.quantile(str(SLOW_QUANTILE), 'total_us')} OVER method AS slow_from,\n"
    "            min(at) OVER method AS first, max(at) OVER method AS last\n"
    "        FROM {relation} WHERE " + UNARY + " AND total_us IS NOT NULL\n"
    "        WINDOW method AS (PARTITION BY rpc_service, rpc_method))"
)


def per_method(aggregates: list[str]) -> Query:
    """One row per method of unary calls with a total: ``calls`` (weighted: the calls made,
    under sampling), ``stored_calls`` (the evidence a confidence rests on) and ``aggregates``, over
    per-call rows that also carry ``subset``, ``slow`` and ``bucket``. The kinds' queries
    all have this shape, so the engine runs them as one (``findings``)."""

    def build(relation: str) -> str:
        return (
            f"SELECT rpc_service, rpc_method, {weighted.count()} AS calls,"
            " count() AS stored_calls,\n    "
            + ",\n    ".join(aggregates)
            + "\nFROM ("
            + _PER_CALL.replace("{relation}", relation)
            + ")\nGROUP BY rpc_service, rpc_method\nORDER BY rpc_service, rpc_method"
        )

    return build


class Columns:
    """A row of a combined query as one kind sees it: ``row.calls`` reads ``{kind}__calls``
    where the kind has it, else the shared column (``rpc_service``, ``calls``)."""

    def __init__(self, row: Any, kind: str) -> None:
        self._row, self._prefix = row, f"{kind}__"

    def __getattr__(self, name: str) -> Any:
        own = self._prefix + name
        return getattr(self._row, own) if hasattr(self._row, own) else getattr(self._row, name)


def tuple_items(value: Any) -> list[Any]:
    """The items of a ClickHouse tuple as the store returns it: a tuple, or a dict (chDB
    returns a tuple's elements keyed by name or position)."""
    return list(value.values()) if isinstance(value, dict) else list(value)

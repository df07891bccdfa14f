"""The phase report: per method, every phase's p50/p90/p99/mean, and the clock offsets.

``build_report`` runs two queries (the breakdown, the per-pair offsets) and
returns a ``Report``; ``to_json``/``render_table``/``to_csv`` only format it.

``to_json`` is a stable contract (design brief, "Command line")::

    {"calls": N, "stored_calls": N,
     "methods": [{"service", "method", "calls", "stored_calls",
                  "phases": {PHASE: {"p50_us", "p90_us", "p99_us", "mean_us"}}}],
     "clock_offsets": [{"client_host", "server_host", "offset_us", "uncertainty_us", "calls"}],
     "status_codes": [{"code", "status", "calls", "share"}],
     "sides": {"two_sided", "server_only", "client_only", "client_only_sampled"},
     "store": {"calls", "parts", "rows", "bytes_on_disk", "uncompressed_bytes",
               "bytes_per_call", "tables": [{"table", ...the same}]}}

Every phase of the design table is present for every method, null where it
is undefined (e.g. calls without transport events). Each method also carries
its call ``shape`` (unary, client_streaming, server_streaming, bidi_streaming;
'' when nothing recorded it), the mean ``request_messages`` and
``response_messages`` per call, and ``undefined_for_shape``: the phases null
for every call of that shape (a stream: the unary-only phases, described by
the stream phases instead; a unary call: the stream phases). Counts, quantiles and
means are weighted by what each call stands for under sampling (``grpc_call_phases``'
``weight``; 1 unless sampled), so they estimate the calls made; ``stored_calls`` counts
the calls stored. Keys may be added, never
renamed: each phase also carries ``calls`` (how many calls define it), the
extra phases (``pool_wait``, ``server_duration``, ``client_server_gap``, the
clock-corrected one-way phases) follow the design's, and each offset carries
``windows``, ``offset_min_us`` and ``offset_max_us``. Each method also carries
``errors`` (calls whose status is neither OK nor unknown) and ``status_codes``
(its calls per gRPC status code, commonest first, ``status.py``); the top level
``status_codes`` sums them over methods. The CSV repeats a method's ``errors``
and ``status_codes`` (``OK=95;DEADLINE_EXCEEDED=5``) on each of its rows, after
the breakdown's columns.

Every table reads one snapshot of the store (``CallFilters.as_of_ns``: the store's
clock when the report starts, before any INSERT still committing: ``snapshot``) and
holds back calls whose other half may still arrive
(``options.SHOWN_FILTER``), so the header's count, the status codes' sum, ``sides`` and
the clock offsets' calls agree, live or not. Each method's ``sides`` counts its
two-sided, server-only (the caller is not instrumented: no client or network phase)
and client-only (the server is not) calls; ``missing`` names the half those calls lack
("client", "server", "client and server": some of each; null when none). The clock
offsets follow the filters too (``--run``, ``--method``...): their ``calls`` are the
filtered calls that yield an estimate.

``store`` is the whole store's size, whatever the filters (``store_size``): its
database's bytes on disk and per stored call, in total and per table, so a reader
sizing a disk for their traffic finds it where they read the rest; the table ends
with it, the CSV (phases only) leaves it out.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.breakdown_frame import BREAKDOWN_COLUMNS
from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.insights.rows import SIDES_COLUMNS, sides
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.result_columns import ALL_PHASES, DESIGN_PHASES
from grpc_overhead.analyzer.rollup import breakdown, offsets
from grpc_overhead.analyzer.shapes import SHAPE_COLUMNS, method_shapes, undefined_for
from grpc_overhead.analyzer.snapshot import snapshot_ns
from grpc_overhead.analyzer.status import NOT_RECORDED, overall, status_codes
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.store_size import SIZE_COLUMNS, size_json, size_text, store_size

STATISTICS = ("p50_us", "p90_us", "p99_us", "mean_us")
STATUS_FRAME = ("service", "method", "status_code", "status", "calls", "share")
SIDES_FRAME = ("service", "method", *SIDES_COLUMNS)
OFFSET_KEYS = ("client_host", "server_host", "offset_us", "uncertainty_us", "calls")
#: Columns the CSV adds after ``BREAKDOWN_COLUMNS`` (per method, repeated on its rows).
STATUS_CSV_COLUMNS = ("errors", "status_codes", "stored_calls")


@dataclass
class Report:
    breakdown: (
        pd.DataFrame
    )  # breakdown_frame.BREAKDOWN_COLUMNS, one row per (service, method, phase)
    offsets: pd.DataFrame  # clock_offsets.pair_offsets columns
    filters: CallFilters = field(default_factory=CallFilters)
    #: status.STATUS_COLUMNS: calls per (service, method, status code)
    status: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STATUS_FRAME))
    #: shapes.SHAPE_COLUMNS: per (service, method), its call shape and messages per call
    shapes: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SHAPE_COLUMNS))

    def method_shape(self, service: str, method: str) -> tuple[str, float | None, float | None]:
        """(shape, mean request messages, mean response messages) of one method."""
        rows = self.shapes[(self.shapes["service"] == service) & (self.shapes["method"] == method)]
        if rows.empty:
            return "", None, None
        row = rows.iloc[0]
        return (
            str(row["shape"]),
            _number(row["request_messages"]),
            _number(row["response_messages"]),
        )

    #: ``insights.rows.SIDES_COLUMNS``: per (service, method), calls by the halves they have
    sides: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SIDES_FRAME))

    def method_sides(self, service: str, method: str) -> dict[str, Any]:
        """{"two_sided", "server_only", "client_only", "missing"} of one method."""
        rows = self.sides[(self.sides["service"] == service) & (self.sides["method"] == method)]
        return _sides(rows)

    #: ``store_size.SIZE_COLUMNS``: the store's bytes per table and per call (empty: unknown)
    size: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=SIZE_COLUMNS))

    def method_status(self, service: str, method: str) -> pd.DataFrame:
        rows = self.status[(self.status["service"] == service) & (self.status["method"] == method)]
        return rows.reset_index(drop=True)

    @property
    def calls(self) -> int:
        per_method = self.breakdown.drop_duplicates(["service", "method"])
        return int(per_method["calls"].sum())

    @property
    def stored_calls(self) -> int:
        """The calls stored (``calls`` estimates the calls made, weighted under sampling)."""
        if "stored_calls" not in self.breakdown:
            return self.calls
        per_method = self.breakdown.drop_duplicates(["service", "method"])
        return int(per_method["stored_calls"].sum())


def build_report(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> Report:
    """Settled minutes come from the rollups (``rollup``), the rest is computed raw."""
    filters = filters or CallFilters()
    if filters.as_of_ns is None:  # one snapshot for every table, so that they agree
        filters = filters.snapshot(snapshot_ns(store))
    return Report(
        breakdown(store, filters, clock, options=options),
        offsets(store, filters, clock, options=options),
        filters,
        status_codes(store, filters, options=options),
        method_shapes(store, filters, options=options),
        sides(store, filters, options=options, by_method=True),
        store_size(store, filters, options=options),
    )


def _sides(rows: pd.DataFrame) -> dict[str, Any]:
    server_only = int(rows["server_only_calls"].sum()) if len(rows) else 0
    client_only = int(rows["client_only_calls"].sum()) if len(rows) else 0
    sampled = int(rows["client_only_sampled_calls"].sum()) if len(rows) else 0
    calls = int(rows["calls"].sum()) if len(rows) else 0
    missing = [half for half, n in (("client", server_only), ("server", client_only)) if n]
    return {
        "two_sided": calls - server_only - client_only,
        "server_only": server_only,
        "client_only": client_only,
        "client_only_sampled": sampled,
        "missing": " and ".join(missing) or None,
    }


def sides_text(counts: dict[str, Any]) -> str:
    """One line for the table: '' when every call has both halves."""
    if not counts["missing"]:
        return ""
    parts = [f"{counts['two_sided']:,} two-sided"]
    if counts["server_only"]:
        parts.append(
            f"{counts['server_only']:,} server side only (client half missing: the caller"
            " is not instrumented; no client or network phase)"
        )
    sampled = counts.get("client_only_sampled", 0)
    if counts["client_only"] - sampled:
        parts.append(
            f"{counts['client_only'] - sampled:,} client side only (server half missing: the"
            " server is not instrumented; no server phase)"
        )
    if sampled:
        parts.append(
            f"{sampled:,} client side only by sampling (the server dropped its half: slow for"
            " the client alone; no server phase)"
        )
    return "sides: " + ", ".join(parts)


def _number(value: Any, digits: int = 3) -> float | None:
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return None
    return round(value, digits)


def to_json(report: Report) -> dict[str, Any]:
    """The JSON contract (a dict ready for ``json.dumps``)."""
    methods = []
    for (service, method), rows in report.breakdown.groupby(
        ["service", "method"], sort=True, observed=True
    ):
        by_phase = {row.phase: row for row in rows.itertuples(index=False)}
        phases: dict[str, Any] = {}
        for name in ALL_PHASES:
            row = by_phase.get(name)
            phases[name] = {
                statistic: _number(getattr(row, statistic)) if row is not None else None
                for statistic in STATISTICS
            } | {"calls": int(row.phase_calls) if row is not None else 0}
        status = report.method_status(service, method)
        shape, request_messages, response_messages = report.method_shape(service, method)
        methods.append(
            {
                "service": service,
                "method": method,
                "calls": int(rows["calls"].iloc[0]),
                "stored_calls": int(rows["stored_calls"].iloc[0]),
                "phases": phases,
                "errors": _errors(status),
                "status_codes": _status_list(status),
                "shape": shape,
                "request_messages": request_messages,
                "response_messages": response_messages,
                "undefined_for_shape": undefined_for(shape),
                "sides": report.method_sides(service, method),
            }
        )
    offsets = [
        {
            "client_host": row.client_host,
            "server_host": row.server_host,
            "offset_us": _number(row.offset_us),
            "uncertainty_us": _number(row.uncertainty_us),
            "calls": int(row.calls),
            "windows": int(row.windows),
            "offset_min_us": _number(row.offset_min_us),
            "offset_max_us": _number(row.offset_max_us),
        }
        for row in report.offsets.itertuples(index=False)
    ]
    return {
        "calls": report.calls,
        "stored_calls": report.stored_calls,
        "methods": methods,
        "clock_offsets": offsets,
        "status_codes": _status_list(overall(report.status)) if len(report.status) else [],
        "sides": _sides(report.sides),
        "store": size_json(report.size) if len(report.size) else None,
    }


def _errors(status: pd.DataFrame) -> int:
    failed = status[(status["status_code"] != 0) & (status["status_code"] != NOT_RECORDED)]
    return int(failed["calls"].sum())


def _status_list(status: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {
            "code": int(row.status_code),
            "status": row.status,
            "calls": int(row.calls),
            "share": _number(row.share, 4),
        }
        for row in status.itertuples(index=False)
    ]


def _status_text(status: pd.DataFrame, separator: str = "=") -> list[str]:
    return [f"{row.status}{separator}{int(row.calls)}" for row in status.itertuples(index=False)]


def to_csv(report: Report) -> str:
    """One row per (method, phase): ``breakdown_frame.BREAKDOWN_COLUMNS``, µs, empty where
    undefined."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*BREAKDOWN_COLUMNS, *STATUS_CSV_COLUMNS])
    for row in report.breakdown.itertuples(index=False):
        status = report.method_status(row.service, row.method)
        values: list[Any] = []
        for column in BREAKDOWN_COLUMNS:
            value = getattr(row, column)
            if column in STATISTICS:
                value = _number(value)
            values.append("" if value is None else value)
        stored = getattr(row, "stored_calls", row.calls)
        writer.writerow([*values, _errors(status), ";".join(_status_text(status)), stored])
    return out.getvalue()


def _cell(value: Any) -> str:
    number = _number(value, 1)
    if number is None:
        return "-"
    return f"{number:,.1f}"


def render_table(report: Report, width: int | None = None) -> str:
    """Aligned text: one table per method (design phases, then extras), then the offsets."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=width or 100, force_terminal=False)
    for (service, method), rows in report.breakdown.groupby(
        ["service", "method"], sort=True, observed=True
    ):
        calls = int(rows["calls"].iloc[0])
        shape, request_messages, response_messages = report.method_shape(service, method)
        title = f"{service}/{method}: {calls:,} calls"
        stream = shape not in ("", "unary")
        if stream:
            title += (
                f" ({shape}, {request_messages or 0:,.1f} requests and"
                f" {response_messages or 0:,.1f} responses per call)"
            )
        table = Table(title=title, title_justify="left")
        table.add_column("phase")
        for header in ("p50 µs", "p90 µs", "p99 µs", "mean µs", "calls"):
            table.add_column(header, justify="right")
        for row in rows.itertuples(index=False):
            table.add_row(
                row.phase,
                _cell(row.p50_us),
                _cell(row.p90_us),
                _cell(row.p99_us),
                _cell(row.mean_us),
                f"{int(row.phase_calls):,}",
                end_section=row.phase == DESIGN_PHASES[-1],
            )
        console.print(table)
        if stream:
            console.print(
                "a stream: the phases that assume one message each way are undefined (-);"
                " request_message_* / response_message_* are per-call medians over its"
                " messages (grpc_message_phases has each one)",
                highlight=False,
            )
        status = report.method_status(service, method)
        if len(status):
            shares = [
                f"{row.status} {int(row.calls):,} ({row.share:.1%})"
                for row in status.itertuples(index=False)
            ]
            console.print(f"status codes: {', '.join(shares)}", highlight=False)
        one_sided = sides_text(report.method_sides(service, method))
        if one_sided:
            console.print(one_sided, highlight=False, soft_wrap=True)
        console.print()
    if len(report.offsets):
        table = Table(
            title="clock offsets (positive: server clock ahead; corrected one-way phases use them)",
            title_justify="left",
        )
        for header in ("client host", "server host"):
            table.add_column(header)
        for header in ("offset µs", "± µs", "calls", "windows"):
            table.add_column(header, justify="right")
        for row in report.offsets.itertuples(index=False):
            table.add_row(
                row.client_host,
                row.server_host,
                _cell(row.offset_us),
                _cell(row.uncertainty_us),
                f"{int(row.calls):,}",
                f"{int(row.windows):,}",
            )
        console.print(table)
        hint = no_host_hint(report.offsets)
        if hint:
            console.print(hint, highlight=False, soft_wrap=True)
    if len(report.size):
        console.print()
        console.print(size_text(report.size), highlight=False, soft_wrap=True, end="")
    return console.file.getvalue()  # type: ignore[attr-defined]


#: The clock domain of spans without ``host.name`` (``clock_offsets``: per service).
NO_HOST_DOMAIN = "service:"


def no_host_hint(offsets: pd.DataFrame) -> str:
    """What to do when some spans carry no ``host.name`` (the OpenTelemetry Java SDK never
    sets it, nor Go's default resource): their clock is then estimated per service, so
    services on one machine get an offset (and shifted one-way phases) instead of 0."""
    names = sorted(
        {
            str(host)[len(NO_HOST_DOMAIN) :]
            for column in ("client_host", "server_host")
            for host in offsets[column]
            if str(host).startswith(NO_HOST_DOMAIN)
        }
    )
    if not names:
        return ""
    return (
        f"no host.name on the spans of {', '.join(names)}: their clocks are estimated per"
        " service (an offset where there may be none). Set"
        " OTEL_RESOURCE_ATTRIBUTES=host.name=<host> in their environment (Java's SDK and Go's"
        " default resource leave it out): docs/reference.md, 'Attaching a Go or Java service'."
    )

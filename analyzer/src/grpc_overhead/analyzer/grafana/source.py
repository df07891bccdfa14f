"""The calls, one row per RPC with every phase in µs, as SQL for Grafana's ClickHouse datasource.

Grafana panels cannot bind query parameters: the datasource substitutes its
macros (``$__fromTime``, ``$__timeFilter(col)``...) and dashboard variables
into the SQL text before ClickHouse sees it. So the one per-call query the
analyzer runs everywhere (``phases.per_call_sql``, clock offsets included)
is rendered here with each bound parameter replaced by a fixed SQL
expression: the time bounds by the datasource's time macros, every filter by
"any" (panels filter outside, with ``$__conditionalAll``), the clock options
by their defaults. The result is the same rows ``report`` computes from, so
a dashboard's numbers are the report's (tests/dashboards checks it on a real
store), on chDB and on a ClickHouse server fed by the collector's exporter
(after ``serve --clickhouse`` created ``grpc_calls``).

Its columns follow the ``grpc_call_phases`` contract of the design brief
(``CALL_COLUMNS``), so a panel reads like SQL over that view. The panels still
carry the query rather than select from the view: a view takes no parameters,
so it merges every call of the table (``FINAL``) and estimates clock offsets
over all time on each refresh, where this query reads only the halves near the
time picker's range (the ``ROW_FILTER`` pre-filter, which uses the table's
minmax index).
"""

from __future__ import annotations

import re

from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.options import HALF_MARGIN_NS, HOLD_BACK_NS, CallsOptions
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.result_columns import ALL_PHASES

#: The dashboards' database variable, as the datasource's own OTel dashboards name it.
DATABASE = "${database}"
_SECOND_NS = 1_000_000_000
_MARGIN_S = HALF_MARGIN_NS // _SECOND_NS
# $__fromTime / $__toTime expand to toDateTime(<unix seconds>) (pkg/macros/macros.go). Each is
# followed directly by ")" so the SDK's macro parser (sqlutil.getMacroMatches) takes no
# argument list after it.
_FROM_S = "toInt64(toUnixTimestamp($__fromTime))"
_TO_S = "toInt64(toUnixTimestamp($__toTime))"

#: Bound parameter -> the SQL that stands for it in a panel.
PARAMETER_SQL: dict[str, str] = {
    # The calls of the time picker's range. $__timeFilter keeps `to` itself, whole
    # seconds: the call-level range ends one second after it, the panels' own
    # $__timeFilter(start_time) decides.
    "since_ns": f"{_FROM_S} * {_SECOND_NS}",
    "until_ns": f"({_TO_S} + 1) * {_SECOND_NS}",
    # The halves' pre-filter (options.ROW_FILTER), widened as the analyzer widens it.
    "scan_since_ns": f"({_FROM_S} - {_MARGIN_S}) * {_SECOND_NS}",
    "scan_until_ns": f"({_TO_S} + 1 + {_MARGIN_S}) * {_SECOND_NS}",
    # No rollup range is left out: the panels compute everything raw.
    "skip_from_ns": "0",
    "skip_until_ns": "0",
    "settled_from_ns": "0",
    "settled_until_ns": "0",
    # Every call: the panels filter on the result's columns.
    "service": "''",
    "method": "''",
    "run_id": "''",
    "otel_service": "''",
    # Calls, never halves (options.SHOWN_FILTER): the engine's clock at each refresh.
    "as_of_ns": "0",
    "grace_ns": str(HOLD_BACK_NS),
    **{name: str(value) for name, value in ClockOptions().parameters().items()},
}

#: The columns of a call row, named as the design's ``grpc_call_phases`` view names them.
CALL_COLUMNS: tuple[str, ...] = (
    "TraceId AS trace_id",
    "ClientSpanId AS client_span_id",
    "ServerSpanId AS server_span_id",
    "fromUnixTimestamp64Nano(call_start_ns, 'UTC') AS start_time",
    "if(client_service != '', client_service, server_service) AS service_name",
    "service AS rpc_service",
    "method AS rpc_method",
    "call_type",
    "run_id",
    "client_service",
    "server_service",
    "client_instance",
    "server_instance",
    "client_host",
    "server_host",
    "status_code",
    "error",
    "compression",
    "payload_codec",
    "request_uncompressed_bytes AS request_bytes",
    "response_uncompressed_bytes AS response_bytes",
    "request_compressed_bytes",
    "response_compressed_bytes",
    # How many calls this one stands for under sampling: every panel's aggregate weighs it.
    "weight",
    "if(clock_defined, clock_offset_ns / 1000, NULL) AS clock_offset_us",
    "if(clock_defined, clock_uncertainty_ns / 1000, NULL) AS clock_uncertainty_us",
    *(f"if({name}_defined, {name}_value / 1000, NULL) AS {name}_us" for name in ALL_PHASES),
)

_PARAMETER = re.compile(r"\{(\w+):(\w+)\}")


def calls_sql(database: str = DATABASE) -> str:
    """SELECT of every call whose halves may fall in the time picker's range.

    Panels wrap it (``FROM (...) WHERE $__timeFilter(start_time)``). ``database``
    '' reads the connection's database; the default is the dashboards' variable.
    """
    options = CallsOptions(database=database)
    inner = per_call_sql(options)

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in PARAMETER_SQL:
            raise KeyError(f"no Grafana expression for the query parameter {name!r}")
        return PARAMETER_SQL[name]

    inner = _PARAMETER.sub(substitute, inner)
    return "SELECT\n    " + ",\n    ".join(CALL_COLUMNS) + f"\nFROM (\n{inner}\n)"


def calls_from(database: str = DATABASE) -> str:
    """``FROM (calls) AS calls``: what every phase panel selects from."""
    return f"FROM (\n{calls_sql(database)}\n) AS calls"

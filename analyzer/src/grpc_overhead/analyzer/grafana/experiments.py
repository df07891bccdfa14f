"""The experiments dashboard: an experiment's cells (``grpc_runs`` rows) side by side.

The cells' own numbers (throughput, errors, config) come from ``grpc_runs``;
their phases from the calls themselves, read through ``source.calls_from``
(the report's per-call query) and joined by run id to the selected
experiment's runs, so a cell's p50/p99 total is what ``report --run`` prints.
"""

from __future__ import annotations

from typing import Any

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.grafana.panels import DATASOURCE, barchart, dashboard, table
from grpc_overhead.analyzer.grafana.source import DATABASE, calls_from
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES
from grpc_overhead.analyzer.runs import RUNS_TABLE

_STACKED = (*CONSECUTIVE_PHASES, "unattributed")
#: The selected experiment's runs (invocation All = every invocation of it).
RUNS_WHERE = (
    "WHERE experiment IN (${experiment:singlequote})\n"
    "  AND $__conditionalAll(invocation IN (${invocation:singlequote}), $invocation)"
)
_RUNS = f"FROM {DATABASE}.{RUNS_TABLE} FINAL\n{RUNS_WHERE}"
#: Calls of those runs in the time picker's range.
CALLS_WHERE = f"WHERE $__timeFilter(start_time)\n  AND run_id IN (SELECT run_id {_RUNS})"
VARIABLE_QUERIES: dict[str, str] = {
    "experiment": f"SELECT DISTINCT experiment FROM {DATABASE}.{RUNS_TABLE} FINAL"
    " ORDER BY experiment",
    "invocation": f"SELECT DISTINCT invocation FROM {DATABASE}.{RUNS_TABLE} FINAL\n"
    "WHERE experiment IN (${experiment:singlequote}) ORDER BY invocation",
}


def _variable(name: str, label: str, *, multi: bool) -> dict[str, Any]:
    sql = VARIABLE_QUERIES[name]
    current = ["$__all"] if multi else ""
    return {
        "current": {"selected": True, "text": current, "value": current},
        "datasource": DATASOURCE,
        "definition": sql,
        "hide": 0,
        "includeAll": multi,
        "label": label,
        "multi": multi,
        "name": name,
        "options": [],
        "query": {"editorType": "sql", "rawSql": sql},
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


def experiments() -> dict[str, Any]:
    cells = (
        "SELECT run_id, invocation, cell, transport, started, ended, calls, errors,\n"
        "  calls_per_s, predictions_per_s, p50_us, p99_us,\n"
        "  JSONExtractString(comparison, 'baseline_label') AS against,\n"
        "  JSONExtractString(comparison, 'verdict') AS verdict,\n"
        "  JSONExtractFloat(comparison, 'diff_us') AS diff_us,\n"
        "  JSONExtract(comparison, 'ci_us', 'Array(Float64)') AS interval_us,\n"
        "  JSONLength(rounds) AS rounds, under_load, config\n"
        f"{_RUNS}\n  AND started <= $__toTime AND ended >= $__fromTime\n"
        "ORDER BY started, cell"
    )
    throughput = (
        "SELECT run_id, calls_per_s, predictions_per_s, errors\n"
        f"{_RUNS}\n  AND started <= $__toTime AND ended >= $__fromTime\n"
        "ORDER BY started, cell"
    )
    per_run = (
        "SELECT run_id, rpc_service AS service, rpc_method AS method,"
        f" {weighted.count()} AS calls,\n"
        f"  {weighted.quantiles('0.5', 'total_us')}[1] AS total_p50_us,\n"
        f"  {weighted.quantiles('0.99', 'total_us')}[1] AS total_p99_us,\n  "
        + ", ".join(f"avgWeighted({name}_us, weight) AS {name}_mean_us" for name in _STACKED)
        + f"\n{calls_from()}\n{CALLS_WHERE}\n"
        "GROUP BY run_id, service, method ORDER BY run_id, service, method"
    )
    means = ", ".join(f"avgWeighted({name}_us, weight) AS {name}" for name in _STACKED)
    model = dashboard(
        "grpc-overhead-experiments",
        "gRPC experiments",
        "One experiment's cells side by side: what each ran (config), what the load"
        " generator saw (throughput, errors) and where the time went (phases from the spans).",
        [
            table(
                "Cells",
                "One row per cell (grpc_runs): config JSON, calls/s, predictions/s, errors,"
                " the client-measured p50/p99 of OK calls, the verdict against its baseline"
                " cell (p50 difference from the spans and its interval, as the experiment"
                " took it), its rounds and whether the machine was busy (under_load).",
                cells,
                (0, 0, 24, 9),
                unit="µs",
            ),
            barchart(
                "Throughput per cell",
                "calls/s and predictions/s as the load generator measured them.",
                throughput,
                (0, 9, 12, 9),
                unit="none",
            ),
            table(
                "Per cell and method: total p50 / p99 and mean phases (µs)",
                "From the cell's spans, as `grpc-overhead report --run RUN` computes them.",
                per_run,
                (12, 9, 12, 9),
                unit="µs",
            ),
            barchart(
                "Mean phases per cell (stacked)",
                "The consecutive phases add up to the mean total.",
                f"SELECT run_id, {means}\n{calls_from()}\n{CALLS_WHERE}\n"
                "GROUP BY run_id ORDER BY run_id",
                (0, 18, 24, 10),
                unit="µs",
            ),
        ],
    )
    variables = model["templating"]["list"]
    model["templating"]["list"] = [
        *(item for item in variables if item["name"] in ("datasource", "database")),
        _variable("experiment", "Experiment", multi=False),
        _variable("invocation", "Invocation", multi=True),
    ]
    return model

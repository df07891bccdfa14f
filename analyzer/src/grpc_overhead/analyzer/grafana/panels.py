"""Grafana dashboard JSON for the ClickHouse datasource, the way its own OTel dashboards write it.

Conventions taken from grafana/clickhouse-datasource ``src/dashboards/otel-service-dashboard.json``
and ``otel-traces-explorer.json``: a ``datasource`` variable (``${datasource}`` in
every panel), a ``database`` variable, ``editorType: sql`` targets with
``rawSql``, ``format`` 0 (time series) or 1 (table), ``$__timeFilter``,
``$__interval_s`` and ``$__conditionalAll(cond, $var)`` for All-able variables.
"""

from __future__ import annotations

from typing import Any

PLUGIN = "grafana-clickhouse-datasource"
DATASOURCE = {"type": PLUGIN, "uid": "${datasource}"}
SCHEMA_VERSION = 39
FORMAT_TIME_SERIES = 0
FORMAT_TABLE = 1
#: Dashboards share this tag, so each one's link menu lists the others.
TAG = "grpc-overhead"
#: Where trace ids link (a Jaeger UI; /trace/<id> is its trace page).
JAEGER_VARIABLE = "jaeger_url"
DEFAULT_JAEGER_URL = "http://localhost:16686"

#: The four filters every panel applies; ``$__conditionalAll`` drops one whose
#: variable is All. An instance matches either side of a call.
FILTERS = (
    "$__conditionalAll(rpc_service IN (${service:singlequote}), $service)",
    "$__conditionalAll(rpc_method IN (${method:singlequote}), $method)",
    "$__conditionalAll(run_id IN (${run:singlequote}), $run)",
    "$__conditionalAll((client_instance IN (${instance:singlequote})"
    " OR server_instance IN (${instance:singlequote})), $instance)",
)
WHERE = "WHERE $__timeFilter(start_time)\n  AND " + "\n  AND ".join(FILTERS)


def target(sql: str, fmt: int) -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "editorType": "sql",
        "format": fmt,
        "rawSql": sql,
        "refId": "A",
    }


def _panel(
    kind: str, title: str, description: str, sql: str, fmt: int, grid: tuple[int, int, int, int]
) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "datasource": DATASOURCE,
        "description": description,
        "fieldConfig": {"defaults": {}, "overrides": []},
        "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "options": {},
        "targets": [target(sql, fmt)],
        "title": title,
        "type": kind,
    }


def trace_links() -> list[dict[str, Any]]:
    """Links on a ``trace_id`` cell: Jaeger's trace page. (The datasource adds its own
    "View trace" link, Grafana's trace view, to any field named ``trace_id``.)"""
    return [
        {
            "targetBlank": True,
            "title": "Open the trace in Jaeger",
            "url": "${" + JAEGER_VARIABLE + "}/trace/${__value.raw}",
        }
    ]


def table(
    title: str, description: str, sql: str, grid: tuple[int, int, int, int], *, unit: str = ""
) -> dict[str, Any]:
    panel = _panel("table", title, description, sql, FORMAT_TABLE, grid)
    panel["options"] = {"showHeader": True, "cellHeight": "sm"}
    if unit:
        panel["fieldConfig"]["overrides"].append(
            {
                "matcher": {"id": "byRegexp", "options": ".*_us$"},
                "properties": [{"id": "unit", "value": unit}, {"id": "decimals", "value": 1}],
            }
        )
    if "trace_id" in sql:
        panel["fieldConfig"]["overrides"].append(
            {
                "matcher": {"id": "byName", "options": "trace_id"},
                "properties": [{"id": "links", "value": trace_links()}],
            }
        )
    return panel


def timeseries(
    title: str,
    description: str,
    sql: str,
    grid: tuple[int, int, int, int],
    *,
    unit: str,
    stacked: bool = False,
) -> dict[str, Any]:
    panel = _panel("timeseries", title, description, sql, FORMAT_TIME_SERIES, grid)
    custom: dict[str, Any] = {"drawStyle": "line", "lineWidth": 2, "showPoints": "never"}
    if stacked:
        custom.update({"stacking": {"group": "A", "mode": "normal"}, "fillOpacity": 60})
    panel["fieldConfig"]["defaults"] = {
        "color": {"mode": "palette-classic"},
        "custom": custom,
        "unit": unit,
    }
    panel["options"] = {"legend": {"displayMode": "table", "placement": "right"}}
    return panel


def barchart(
    title: str, description: str, sql: str, grid: tuple[int, int, int, int], *, unit: str
) -> dict[str, Any]:
    panel = _panel("barchart", title, description, sql, FORMAT_TABLE, grid)
    panel["fieldConfig"]["defaults"] = {"color": {"mode": "palette-classic"}, "unit": unit}
    panel["options"] = {
        "orientation": "horizontal",
        "stacking": "normal",
        "showValue": "never",
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
    }
    return panel


def stat(
    title: str, description: str, sql: str, grid: tuple[int, int, int, int], *, unit: str
) -> dict[str, Any]:
    panel = _panel("stat", title, description, sql, FORMAT_TABLE, grid)
    panel["fieldConfig"]["defaults"] = {"unit": unit}
    panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "none"}
    return panel


def _query_variable(name: str, label: str, sql: str) -> dict[str, Any]:
    return {
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE,
        "definition": sql,
        "hide": 0,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"editorType": "sql", "rawSql": sql},
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }


#: Halves of calls in the time picker's range (grpc_calls has Unix-ns columns only).
_CALLS_IN_RANGE = (
    "FROM ${database}.grpc_calls\n"
    "WHERE greatest(client_start_ns, server_start_ns)"
    " >= toInt64(toUnixTimestamp($__fromTime)) * 1000000000\n"
    "  AND greatest(client_start_ns, server_start_ns)"
    " < (toInt64(toUnixTimestamp($__toTime)) + 1) * 1000000000"
)

VARIABLE_QUERIES: dict[str, str] = {
    "service": f"SELECT DISTINCT service {_CALLS_IN_RANGE}\n  AND service != '' ORDER BY service",
    "method": f"SELECT DISTINCT method {_CALLS_IN_RANGE}\n  AND method != ''\n"
    "  AND $__conditionalAll(service IN (${service:singlequote}), $service) ORDER BY method",
    "run": f"SELECT DISTINCT run_id {_CALLS_IN_RANGE}\n  AND run_id != '' ORDER BY run_id",
    "instance": "SELECT DISTINCT instance FROM (SELECT arrayJoin([client_instance,"
    f" server_instance]) AS instance\n{_CALLS_IN_RANGE})\nWHERE instance != '' ORDER BY instance",
}


def variables() -> list[dict[str, Any]]:
    return [
        {
            "current": {},
            "hide": 0,
            "includeAll": False,
            "label": "Data source",
            "multi": False,
            "name": "datasource",
            "options": [],
            "query": PLUGIN,
            "refresh": 1,
            "regex": "",
            "type": "datasource",
        },
        {
            "current": {},
            "datasource": DATASOURCE,
            "definition": "",
            "hide": 0,
            "includeAll": False,
            "label": "Database",
            "multi": False,
            "name": "database",
            "options": [],
            "query": {
                "editorType": "sql",
                "rawSql": "SELECT database FROM system.tables WHERE name = 'grpc_calls'"
                " ORDER BY database = 'default' DESC, database",
            },
            "refresh": 1,
            "regex": "",
            "sort": 0,
            "type": "query",
        },
        _query_variable("service", "gRPC service", VARIABLE_QUERIES["service"]),
        _query_variable("method", "Method", VARIABLE_QUERIES["method"]),
        _query_variable("run", "Run", VARIABLE_QUERIES["run"]),
        _query_variable("instance", "Instance", VARIABLE_QUERIES["instance"]),
        {
            "current": {"text": DEFAULT_JAEGER_URL, "value": DEFAULT_JAEGER_URL},
            "description": "Base URL of a Jaeger UI: trace ids link to <url>/trace/<id>.",
            "hide": 0,
            "label": "Jaeger URL",
            "name": JAEGER_VARIABLE,
            "options": [
                {"selected": True, "text": DEFAULT_JAEGER_URL, "value": DEFAULT_JAEGER_URL}
            ],
            "query": DEFAULT_JAEGER_URL,
            "type": "textbox",
        },
    ]


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]]) -> dict:
    for number, panel in enumerate(panels, start=1):
        panel["id"] = number
    return {
        "__inputs": [],
        "__requires": [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": ">=11.0.0"},
            {"type": "datasource", "id": PLUGIN, "name": "ClickHouse", "version": "4.19.0"},
        ],
        "annotations": {"list": []},
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [
            {
                "asDropdown": True,
                "includeVars": True,
                "keepTime": True,
                "tags": [TAG],
                "title": "grpc-overhead dashboards",
                "type": "dashboards",
            }
        ],
        "panels": panels,
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": [TAG, "grpc", "clickhouse"],
        "templating": {"list": variables()},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": title,
        "uid": uid,
        "version": 1,
    }

"""The findings dashboard: the kinds a panel can compute in SQL, per method.

``grpc-overhead findings`` ranks every kind; a Grafana panel can only run SQL, so
this dashboard carries the kinds that are one per-call value against a threshold
(``findings.waits``: post_processing, server_pool_saturated, server_cpu_saturated,
client_busy, connection_setup, serialization_cost, network_latency), with the same
quantiles, floors and thresholds (``waits.material_sql``), one row per (kind,
method), found ones first. What needs a step SQL alone cannot take (a fitted cost
per MB for slow_upload / slow_download / compression, the hot instance of
load_imbalance, what the tail's slow calls share, the clock's uncertainty against
both one-way phases, and every kind's confidence) stays with the command and the
app's Findings page, and the dashboard's description says so.
"""

from __future__ import annotations

from typing import Any

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings import waits
from grpc_overhead.analyzer.grafana.panels import WHERE, dashboard, table
from grpc_overhead.analyzer.grafana.source import calls_from

#: Unary calls with a total: the kinds read unary calls only (streams have the unary-only
#: phases NULL; their stream phases are defined).
_UNARY = "total_us IS NOT NULL AND stream_duration_us IS NULL"
_METHOD = "concat(rpc_service, '/', rpc_method) AS method"


_FIELDS = (
    "kind",
    "calls",
    "found",
    "saving_p50_us",
    "saving_p99_us",
    "p50_us",
    "p99_us",
    "floor_us",
    "total_p50_us",
    "total_p99_us",
    "bytes_p50",
)


def waits_sql() -> str:
    """Every wait kind per method, found first, then by saving at p50: one scan of the
    calls (each kind's value a column), one aggregate per method, a row per kind."""
    kinds = [(index, kind) for index, kind in enumerate(waits.KINDS)]
    values = ", ".join(f"toNullable(toFloat64({kind.value})) AS x{i}" for i, kind in kinds)
    aggregates = []
    for i, _ in kinds:
        size = f"if(x{i} IS NULL, NULL, toFloat64(request_bytes + response_bytes))"
        aggregates += [  # weighted: every call made, estimated under sampling
            f"{weighted.count(f'x{i}')} AS calls{i}",
            f"{weighted.quantiles('0.05, 0.5, 0.99', f'x{i}')} AS q{i}",
            f"{weighted.quantiles('0.5, 0.99', f'if(x{i} IS NULL, NULL, total_us)')} AS t{i}",
            f"{weighted.quantile('0.5', size)} AS b{i}",
        ]
    savings = []
    for i, kind in kinds:
        floor = f"least(q{i}[1], {kind.floor_us})" if kind.floor_from_p5 else f"{kind.floor_us}"
        savings += [
            f"toFloat64({floor}) AS floor{i}",
            f"greatest(0., q{i}[2] - floor{i}) AS s50_{i}",
            f"greatest(0., q{i}[3] - floor{i}) AS s99_{i}",
        ]
    rows = []
    for i, kind in kinds:
        found = waits.material_sql(
            kind, (f"s50_{i}", f"s99_{i}"), (f"t{i}[1]", f"t{i}[2]"), f"b{i}"
        )
        # A finding made at p99 alone saves 0 at p50 (``waits.find``): it ranks by p99.
        at_p50 = waits.material_at_p50_sql(kind, f"s50_{i}", f"t{i}[1]")
        rows.append(
            f"('{kind.kind}', calls{i}, toUInt8{found}, if({found} AND NOT {at_p50}, 0., s50_{i}),"
            f" s99_{i}, q{i}[2], q{i}[3],"
            f" floor{i}, t{i}[1], t{i}[2], b{i})"
        )
    named = ", ".join(f"row.{n + 1} AS {name}" for n, name in enumerate(_FIELDS))
    return (
        f"SELECT {named.replace('row.1 AS kind', 'row.1 AS kind, method')},\n"
        "  round(100 * saving_p50_us / total_p50_us, 1) AS share_of_total_p50_pct\n"
        "FROM (\n  SELECT *, " + ", ".join(savings) + "\n  FROM (\n"
        f"    SELECT {_METHOD},\n      " + ",\n      ".join(aggregates) + "\n"
        f"    FROM (SELECT *, {values}\n    {calls_from()}\n    {WHERE}\n    AND {_UNARY})\n"
        "    GROUP BY method))\n"
        "ARRAY JOIN [\n  " + ",\n  ".join(rows) + "\n] AS row\n"
        "ORDER BY found DESC, saving_p50_us DESC, kind, method"
    )


def findings() -> dict[str, Any]:
    return dashboard(
        "grpc-overhead-findings",
        "gRPC findings",
        "What to change, for the kinds SQL alone can compute: one per-call wait or cost against"
        " its threshold, as `grpc-overhead findings` judges it. slow_upload, slow_download,"
        " compression_would_help, compression_costs_more (a fitted cost per MB), load_imbalance"
        " (the hot instance), tail (what the slow calls share), clock_uncertain and every"
        " finding's confidence need a step a panel cannot run: see `grpc-overhead findings`"
        " or the app's Findings page.",
        [
            table(
                "Wait and cost kinds per method (found first)",
                "found = 1: the saving (the value's p50/p99 above its floor) is material, by the"
                " thresholds in docs/reference.md (Findings); calls = 0: no call of the method"
                " measures it. Confidence is not computed here.",
                waits_sql(),
                (0, 0, 24, 14),
                unit="µs",
            ),
        ],
    )

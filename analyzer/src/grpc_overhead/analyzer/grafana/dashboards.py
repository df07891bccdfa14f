"""The dashboards of ``dashboards/``: phases, tail, payload, instances, clock offsets, errors.

Every panel reads the calls of ``source.calls_from`` (the report's own per-call
query), filtered by the time picker and the service, method, run and instance
variables, and aggregates with the report's quantile function, so a number a
panel shows for a method is the number ``report`` prints for it.
"""

from __future__ import annotations

from typing import Any

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.grafana.experiments import experiments
from grpc_overhead.analyzer.grafana.findings import findings
from grpc_overhead.analyzer.grafana.panels import (
    WHERE,
    barchart,
    dashboard,
    stat,
    table,
    timeseries,
)
from grpc_overhead.analyzer.grafana.source import calls_from
from grpc_overhead.analyzer.result_columns import ALL_PHASES, CONSECUTIVE_PHASES

#: Phases a table lists: all but the ``*_corrected`` aliases of the best estimates.
TABLE_PHASES = tuple(name for name in ALL_PHASES if not name.endswith("_corrected"))
#: What the stacked views stack: the consecutive phases and the rest; they add up to total.
STACKED_PHASES = (*CONSECUTIVE_PHASES, "unattributed")
_INTERVAL = "toStartOfInterval(start_time, INTERVAL $__interval_s second) AS time"
_METHOD = "concat(rpc_service, '/', rpc_method) AS method"
#: Calls weighted by what each stands for under sampling (``weighted``): the calls made.
_CALLS = f"{weighted.count()} AS calls"


def _quantile(level: float, expression: str) -> str:
    """One quantile, computed exactly as the report computes it (same function, same digest,
    each call weighted by the calls it stands for under sampling)."""
    return f"{weighted.quantiles(str(level), expression)}[1]"


def _filtered() -> str:
    return f"{calls_from()}\n{WHERE}"


def _phase_tuples(statistic: str) -> str:
    """An array of (phase, ...) tuples, one per table phase, for ARRAY JOIN."""
    return "[\n    " + ",\n    ".join(statistic.format(p=name) for name in TABLE_PHASES) + "\n  ]"


def phases() -> dict[str, Any]:
    per_phase = _phase_tuples(
        f"tuple('{{p}}', {weighted.count('{p}_us')},"
        f" {weighted.quantiles('0.5, 0.9, 0.99', '{p}_us')}, avgWeighted({{p}}_us, weight))"
    )
    breakdown = (
        "SELECT service, method, calls, item.1 AS phase, item.2 AS phase_calls,\n"
        "  item.3[1] AS p50_us, item.3[2] AS p90_us, item.3[3] AS p99_us, item.4 AS mean_us\n"
        "FROM (\n"
        f"SELECT rpc_service AS service, rpc_method AS method, {_CALLS},\n"
        f"  {per_phase} AS items\n{_filtered()}\nGROUP BY service, method\n)\n"
        "ARRAY JOIN items AS item\nORDER BY service, method"
    )
    means = ", ".join(f"avgWeighted({name}_us, weight) AS {name}" for name in STACKED_PHASES)
    return dashboard(
        "grpc-overhead-phases",
        "gRPC phases per method",
        "Where each method's time goes: every phase's p50/p90/p99 and mean, the mean phases"
        " stacked per method and over time.",
        [
            table(
                "Phase breakdown (p50 / p90 / p99 / mean, µs)",
                "Per method and phase, as `grpc-overhead report` computes it (weighted t-digest"
                " over the calls that define the phase; phase_calls counts them).",
                breakdown,
                (0, 0, 24, 12),
                unit="µs",
            ),
            barchart(
                "Mean phases per method (stacked)",
                "The consecutive phases add up to the mean total.",
                f"SELECT {_METHOD}, {means}\n{_filtered()}\nGROUP BY method ORDER BY method",
                (0, 12, 12, 10),
                unit="µs",
            ),
            timeseries(
                "Mean phases over time (stacked)",
                "Mean of each consecutive phase per interval; the stack is the mean total.",
                f"SELECT {_INTERVAL}, {means}\n{_filtered()}\nGROUP BY time ORDER BY time",
                (12, 12, 12, 10),
                unit="µs",
                stacked=True,
            ),
            timeseries(
                "Total p50 / p90 / p99",
                "Client-observed call duration per interval.",
                f"SELECT {_INTERVAL}, {_quantile(0.5, 'total_us')} AS p50,"
                f" {_quantile(0.9, 'total_us')} AS p90,"
                f" {_quantile(0.99, 'total_us')} AS p99\n{_filtered()}\n"
                "GROUP BY time ORDER BY time",
                (0, 22, 24, 8),
                unit="µs",
            ),
        ],
    )


def tail() -> dict[str, Any]:
    per_phase = _phase_tuples(
        f"tuple('{{p}}', {_quantile(0.5, '{p}_us')},"
        " avgWeightedIf({p}_us, weight, total_us >= p99))"
    )
    comparison = (
        "SELECT service, method, calls, tail_from_us, item.1 AS phase,\n"
        "  item.2 AS median_us, item.3 AS slowest_1pct_mean_us,\n"
        "  item.3 - item.2 AS extra_in_tail_us\n"
        "FROM (\n"
        f"SELECT rpc_service AS service, rpc_method AS method, {_CALLS},\n"
        f"  any(p99) AS tail_from_us,\n  {per_phase} AS items\n"
        f"FROM (\nSELECT *, ({weighted.quantiles('0.99', 'total_us')}"
        " OVER (PARTITION BY rpc_service, rpc_method))[1] AS p99\n"
        f"{_filtered()}\n)\nGROUP BY service, method\n)\n"
        "ARRAY JOIN items AS item\nORDER BY service, method"
    )
    slowest = (
        "SELECT trace_id, start_time, "
        + _METHOD
        + ", server_instance, total_us, "
        + ", ".join(f"{name}_us" for name in STACKED_PHASES)
        + f"\n{_filtered()}\nORDER BY total_us DESC LIMIT 50"
    )
    return dashboard(
        "grpc-overhead-tail",
        "gRPC tail: slowest 1% vs median",
        "Which phases make the slowest 1% of calls slow: each phase's median over all calls"
        " against its mean over the calls at or above the method's p99 total.",
        [
            table(
                "Slowest 1% vs median, per phase (µs)",
                "tail_from_us is the method's p99 total; extra_in_tail_us what the tail adds.",
                comparison,
                (0, 0, 24, 12),
                unit="µs",
            ),
            table(
                "Slowest calls",
                "The 50 slowest calls of the range; trace ids open Jaeger or Grafana's trace view.",
                slowest,
                (0, 12, 24, 10),
                unit="µs",
            ),
            timeseries(
                "p50 vs p99: total and all but processing",
                "Per interval. network_overhead is total - processing (the seed article's "
                "name): network, but also queuing, (de)serialization and dispatch waits; the "
                "wire alone is request_network + response_network.",
                f"SELECT {_INTERVAL},\n"
                f"  {_quantile(0.5, 'total_us')} AS total_p50,"
                f" {_quantile(0.99, 'total_us')} AS total_p99,\n"
                f"  {_quantile(0.5, 'network_overhead_us')} AS network_overhead_p50,"
                f" {_quantile(0.99, 'network_overhead_us')} AS network_overhead_p99\n"
                f"{_filtered()}\nGROUP BY time ORDER BY time",
                (0, 22, 24, 8),
                unit="µs",
            ),
        ],
    )


_COMPRESSION = (
    "multiIf(compression != '', compression, payload_codec != '',"
    " concat('payload:', payload_codec), 'none') AS compression_used"
)


def payload() -> dict[str, Any]:
    by_compression = (
        f"SELECT {_METHOD}, {_COMPRESSION}, toUInt64(round(sum(weight))) AS calls,\n"
        "  avgWeighted(request_bytes, weight) AS request_bytes,"
        " avgWeighted(response_bytes, weight) AS response_bytes,\n"
        "  avgWeightedIf(request_compressed_bytes, weight, request_compressed_bytes > 0)"
        " AS request_compressed_bytes,\n"
        "  avgWeightedIf(response_compressed_bytes, weight, response_compressed_bytes > 0)"
        " AS response_compressed_bytes,\n"
        + ",\n".join(
            f"  {_quantile(0.5, name + '_us')} AS {name}_p50_us"
            for name in (
                "client_serialize",
                "request_network",
                "request_deserialize",
                "response_serialize",
                "response_network",
                "client_deserialize",
                "total",
            )
        )
        + f"\n{_filtered()}\nGROUP BY method, compression_used ORDER BY method, compression_used"
    )
    by_size = (
        "SELECT size_class, toUInt64(round(sum(weight))) AS calls,\n"
        + ",\n".join(
            f"  {_quantile(0.5, name + '_us')} AS {name}_p50_us"
            for name in ("client_serialize", "request_network", "request_deserialize", "total")
        )
        + "\nFROM (SELECT *, formatReadableSize(exp2(floor(log2(greatest(request_bytes, 1)))))"
        " AS size_class, floor(log2(greatest(request_bytes, 1))) AS size_order\n"
        + _filtered()
        + ")\nGROUP BY size_class, size_order ORDER BY size_order"
    )
    return dashboard(
        "grpc-overhead-payload",
        "gRPC payload and compression",
        "Message sizes, what compression saves on the wire, and what the bytes cost in"
        " (de)serialization and network time.",
        [
            table(
                "Per method and compression",
                "Bytes are uncompressed means; compressed sizes where the sender recorded them.",
                by_compression,
                (0, 0, 24, 10),
                unit="µs",
            ),
            table(
                "Request size class (power of two) vs phase p50",
                "Calls grouped by request size rounded down to a power of two.",
                by_size,
                (0, 10, 12, 10),
                unit="µs",
            ),
            timeseries(
                "Mean message size",
                "Uncompressed bytes per call.",
                f"SELECT {_INTERVAL}, avgWeighted(request_bytes, weight) AS request,"
                " avgWeighted(response_bytes, weight)"
                f" AS response\n{_filtered()}\nGROUP BY time ORDER BY time",
                (12, 10, 12, 10),
                unit="bytes",
            ),
        ],
    )


def instances() -> dict[str, Any]:
    per_instance = (
        f"SELECT server_instance, any(server_host) AS server_host, {_CALLS},\n"
        "  round(100 * sum(weight) / sum(sum(weight)) OVER (), 2) AS share_pct,\n"
        "  toUInt64(round(sumIf(weight, error = 1))) AS errors,\n"
        + ",\n".join(
            f"  {_quantile(0.5, name + '_us')} AS {name}_p50_us,"
            f" {_quantile(0.99, name + '_us')} AS {name}_p99_us"
            for name in ("server_residence", "server_queue", "processing", "total")
        )
        + f"\n{_filtered()}\nGROUP BY server_instance ORDER BY server_instance"
    )
    return dashboard(
        "grpc-overhead-instances",
        "gRPC instances and load balance",
        "How calls spread over server instances and how each instance serves them.",
        [
            table(
                "Per server instance",
                "share_pct: the instance's share of the calls in range.",
                per_instance,
                (0, 0, 24, 9),
                unit="µs",
            ),
            timeseries(
                "Calls per second per server instance",
                "Load balance over time.",
                f"SELECT {_INTERVAL}, server_instance, sum(weight) / $__interval_s AS calls\n"
                f"{_filtered()}\nGROUP BY time, server_instance ORDER BY time",
                (0, 9, 12, 9),
                unit="reqps",
            ),
            table(
                "Client instance -> server instance",
                "Calls per pair: a client pinned to one server shows as one row.",
                "SELECT client_instance, server_instance, toUInt64(round(sum(weight))) AS calls,"
                f" {_quantile(0.5, 'total_us')} AS total_p50_us\n"
                f"{_filtered()}\nGROUP BY client_instance, server_instance"
                " ORDER BY client_instance, server_instance",
                (12, 9, 12, 9),
                unit="µs",
            ),
        ],
    )


def clock_offsets() -> dict[str, Any]:
    per_pair = (
        "SELECT client_host, server_host, toUInt64(round(sum(weight))) AS calls,\n"
        "  avgWeighted(clock_offset_us, weight) AS offset_us,"
        " min(clock_offset_us) AS offset_min_us, max(clock_offset_us) AS offset_max_us,"
        " avgWeighted(clock_uncertainty_us, weight) AS uncertainty_us,\n"
        "  avgWeighted(request_network_raw_us, weight) AS request_network_raw_mean_us,"
        " avgWeighted(request_network_us, weight) AS request_network_mean_us,\n"
        "  avgWeighted(response_network_raw_us, weight) AS response_network_raw_mean_us,"
        " avgWeighted(response_network_us, weight) AS response_network_mean_us,\n"
        "  avgWeighted(request_network_us + response_network_us, weight)"
        " AS both_directions_mean_us\n"
        f"{_filtered()}\nGROUP BY client_host, server_host ORDER BY client_host, server_host"
    )
    return dashboard(
        "grpc-overhead-clock-offsets",
        "gRPC clock offsets",
        "Per (client host, server host): the estimated clock offset with its uncertainty,"
        " and the one-way network phases raw and corrected (their sum is exact either way).",
        [
            table(
                "Offset per host pair",
                "offset_us: server clock minus client clock (NTP-style estimate, ± uncertainty).",
                per_pair,
                (0, 0, 24, 8),
                unit="µs",
            ),
            timeseries(
                "Offset over time",
                "Mean applied offset per interval and host pair.",
                f"SELECT {_INTERVAL}, concat(client_host, ' -> ', server_host) AS pair,"
                f" avgWeighted(clock_offset_us, weight) AS offset\n{_filtered()}\n"
                "GROUP BY time, pair ORDER BY time",
                (0, 8, 12, 9),
                unit="µs",
            ),
            stat(
                "Calls without an offset estimate",
                "Cross-host calls whose one-way phases stay raw.",
                f"SELECT {weighted.count_if('clock_offset_us IS NULL')} AS calls\n{_filtered()}",
                (12, 8, 12, 9),
                unit="none",
            ),
        ],
    )


def errors() -> dict[str, Any]:
    by_status = (
        f"SELECT {_METHOD}, status_code, toUInt64(round(sum(weight))) AS calls,\n"
        "  round(100 * sum(weight) / sum(sum(weight)) OVER (PARTITION BY method), 2)"
        " AS share_pct,\n"
        f"  {_quantile(0.5, 'total_us')} AS total_p50_us\n"
        f"{_filtered()}\nGROUP BY method, status_code ORDER BY method, status_code"
    )
    failed = (
        f"SELECT trace_id, start_time, {_METHOD}, status_code, server_instance, total_us\n"
        f"{_filtered()}\n  AND (error = 1 OR status_code > 0)\nORDER BY start_time DESC LIMIT 100"
    )
    return dashboard(
        "grpc-overhead-errors",
        "gRPC errors",
        "Status codes per method, the error rate over time and the failed calls.",
        [
            table(
                "Status codes per method",
                "gRPC status code (0 = OK, -1 = not reported, -2 = failed, no code named).",
                by_status,
                (0, 0, 12, 9),
                unit="µs",
            ),
            timeseries(
                "Error rate",
                "Share of calls with an error status per interval.",
                f"SELECT {_INTERVAL}, sumIf(weight, error = 1 OR status_code > 0) / sum(weight)"
                f" AS error_rate\n{_filtered()}\nGROUP BY time ORDER BY time",
                (12, 0, 12, 9),
                unit="percentunit",
            ),
            table(
                "Failed calls",
                "The latest 100; trace ids open Jaeger or Grafana's trace view.",
                failed,
                (0, 9, 24, 10),
                unit="µs",
            ),
        ],
    )


#: File name (in dashboards/) -> builder.
DASHBOARDS = {
    "grpc-overhead-findings.json": findings,
    "grpc-overhead-phases.json": phases,
    "grpc-overhead-tail.json": tail,
    "grpc-overhead-payload.json": payload,
    "grpc-overhead-instances.json": instances,
    "grpc-overhead-clock-offsets.json": clock_offsets,
    "grpc-overhead-errors.json": errors,
    "grpc-overhead-experiments.json": experiments,
}

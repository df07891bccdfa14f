"""The analysis target: the full per-method phase breakdown over 1 M and 10 M calls, in SQL
(chDB) and in pandas, side by side in one run.

Calls are generated inside the engine (``INSERT INTO grpc_calls SELECT ... FROM
numbers(N)``), never through Python rows, as the two *halves* the materialized
view writes: one INSERT of client halves, one of server halves, so a read
must really merge them. Every value is a deterministic function of the call
number (hashes, not ``rand()``), so both halves of a call agree and reruns
see the same data. Distributions are latency-shaped (log-normal) and
realistic for a prediction service: four methods with different payloads,
four client hosts and three server hosts, one of which shares a host (and a
clock) with a client; the other two servers' clocks run +37 ms and -5 ms off.

Timed, median of ``--repeats`` (5) interleaved rounds, for each size:

* ``sql``: ``phases.phase_breakdown`` (every phase, p50/p90/p99/mean per
  method, clock offsets estimated and applied), reading the unmerged
  halves (``FINAL``), then the same after ``OPTIMIZE TABLE ... FINAL``;
* ``sql_group_by``: the same query merging halves with ``GROUP BY`` instead;
* ``pandas``: the same breakdown from the same merged rows already loaded in
  a DataFrame (loading is not timed): phases, offsets per host pair and
  window (minimum round trip), corrected phases, groupby quantiles and mean.

Results: bench/results/analysis.json and analysis.md. Peak memory is the
process's maximum resident set (chDB runs in-process) after each stage.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

from bench.analysis_pandas import (
    agreement,
    load_rows,
    pandas_breakdown,
)
from bench.common import log, machine_info, markdown_table, median, publish
from grpc_overhead.analyzer.calls import CallsOptions, create_calls
from grpc_overhead.analyzer.phases import ALL_PHASES, QUANTILES, phase_breakdown
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.rollup import breakdown, settle
from grpc_overhead.analyzer.schema import create_schema
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store

TARGET_SECONDS = 1.0
BASE_NS = 1_790_000_000 * 1_000_000_000
CALL_SPACING_NS = 1_000_000  # 1k calls/s: 1 M calls span 17 minutes, 10 M 2.8 hours

# One deterministic uniform (0, 1) per (call, stream k).
_U = "((cityHash64(number, {k}) % 1000000) + 0.5) / 1000000"


def _lognormal(median_us: str, sigma: float, k: int) -> str:
    """A log-normal duration in ns with the given median (µs), from two uniforms (Box-Muller)."""
    u1, u2 = _U.format(k=k), _U.format(k=k + 1)
    z = f"sqrt(-2 * log({u1})) * cos(2 * pi() * {u2})"
    return f"toInt64(({median_us}) * 1000 * exp({sigma} * {z}))"


# Per call: method mix and its payload scale, hosts, clock skew, and the timeline.
_CALL = f"""
    number,
    {BASE_NS} + number * {CALL_SPACING_NS} AS t0,
    cityHash64(number, 1) % 100 AS pick,
    multiIf(pick < 60, 0, pick < 75, 1, pick < 90, 2, 3) AS m,
    ['predict.Predictor', 'predict.Predictor', 'predict.Predictor', 'features.FeatureStore'][m + 1]
        AS service,
    ['Predict', 'PredictBatch', 'Health', 'Lookup'][m + 1] AS method,
    [1., 20., 0.05, 0.5][m + 1] AS size_scale,
    toUInt64(1000 * size_scale * 64) AS request_bytes,
    toUInt64(1000 * size_scale * 8) AS response_bytes,
    cityHash64(number, 2) % 4 AS client_index,
    cityHash64(number, 3) % 3 AS server_index,
    if(client_index = 0, 'node-0', concat('client-', toString(client_index))) AS client_host,
    ['node-0', 'server-1', 'server-2'][server_index + 1] AS server_host,
    [0, 37000000, -5000000][server_index + 1] AS skew,
    t0 AS created,
    created + {_lognormal("20", 0.3, 10)} AS outbound,
    outbound + {_lognormal("15 * size_scale", 0.4, 12)} AS sent,
    sent + {_lognormal("150 + 2 * size_scale", 0.5, 14)} AS started,
    started + {_lognormal("20", 1.0, 16)} AS scheduled,
    scheduled + {_lognormal("10", 0.5, 18)} AS inbound,
    inbound + {_lognormal("12 * size_scale", 0.4, 20)} AS read,
    read + {_lognormal("2000 * size_scale", 0.6, 22)} AS made,
    made + {_lognormal("5", 0.3, 24)} AS server_outbound,
    server_outbound + {_lognormal("9 * size_scale", 0.4, 26)} AS server_sent,
    server_sent + {_lognormal("120 + size_scale", 0.5, 28)} AS received,
    received + {_lognormal("11 * size_scale", 0.4, 30)} AS client_read,
    client_read + {_lognormal("7", 0.3, 32)} AS client_end
"""

_IDS = """
    lower(concat(hex(cityHash64(number, 101)), hex(cityHash64(number, 102)))) AS TraceId,
    lower(hex(cityHash64(number, 103))) AS ClientSpanId"""

CLIENT_HALVES = f"""
INSERT INTO grpc_calls (TraceId, ClientSpanId, service, method, call_type, run_id,
    client_service, client_host, client_instance, server_address, compression,
    client_status_code, client_start_ns, client_end_ns, client_events, request_created_ns,
    client_outbound_message_ns, client_outbound_message_sent_ns,
    client_outbound_message_sent_last_ns, client_received_response_ns,
    client_received_response_last_ns, client_inbound_message_read_ns,
    client_inbound_message_read_last_ns, request_messages, request_uncompressed_bytes,
    request_compressed_bytes, response_messages, response_uncompressed_bytes,
    server_residence_ns)
SELECT {_IDS}, service, method, 'unary_unary', 'bench', 'load-generator', client_host,
    concat(client_host, '-load'), concat(server_host, ':50051'), '', toInt16(0), created,
    client_end, 1, created, outbound, sent, sent, received, received, client_read,
    client_read, 1, request_bytes, request_bytes, 1, response_bytes, server_sent - started
FROM (SELECT {_CALL} FROM numbers({{offset:UInt64}}, {{count:UInt64}}))
"""

SERVER_HALVES = f"""
INSERT INTO grpc_calls (TraceId, ClientSpanId, ServerSpanId, service, method, call_type,
    run_id, server_service, server_host, server_instance, client_address, compression,
    server_status_code, server_start_ns, server_end_ns, server_events, server_call_started_ns,
    call_scheduled_ns, server_inbound_message_ns, server_inbound_message_read_ns,
    server_inbound_message_read_last_ns, predictions_made_ns, server_outbound_message_ns,
    server_outbound_message_sent_ns, server_outbound_message_sent_last_ns, request_messages,
    request_uncompressed_bytes, response_messages, response_uncompressed_bytes,
    response_compressed_bytes, server_residence_ns)
SELECT {_IDS}, lower(hex(cityHash64(number, 104))), service, method, 'unary_unary', 'bench',
    'prediction-service', server_host, concat(server_host, '-svc'), '10.0.0.1', '',
    toInt16(0), started + skew, server_sent + skew, 1, started + skew, scheduled + skew,
    inbound + skew, read + skew, read + skew, made + skew, server_outbound + skew,
    server_sent + skew, server_sent + skew, 1, request_bytes, 1, response_bytes,
    response_bytes, server_sent - started
FROM (SELECT {_CALL} FROM numbers({{offset:UInt64}}, {{count:UInt64}}))
"""

_CHUNK = 60_000  # one minute of calls per INSERT pair


def generate(store: Store, calls: int) -> None:
    """``calls`` calls as the view writes them: per chunk of consecutive calls (one
    minute at 1k calls/s), one INSERT of client halves, then one of server halves, in
    time order, so parts hold contiguous time ranges as in a live store."""
    for table in ("grpc_calls", "grpc_phase_rollup", "grpc_offset_rollup", "grpc_settled_calls"):
        store.command(f"TRUNCATE TABLE IF EXISTS {table}")
    for offset in range(0, calls, _CHUNK):
        count = min(_CHUNK, calls - offset)
        for statement in (CLIENT_HALVES, SERVER_HALVES):
            store.command(statement, {"offset": offset, "count": count})


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(function: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


# -- pandas: the same breakdown from the same rows -----------------------------------------


def _median(values: list[float]) -> float:
    return round(median(values) or 0.0, 4)


def run_size(store: Store, calls: int, repeats: int) -> dict[str, Any]:
    log(f"generating {calls:,} calls (two halves each)")
    generate_s = timed(lambda: generate(store, calls))
    parts = int(
        store.query("SELECT count() AS n FROM system.parts WHERE table = 'grpc_calls' AND active")[
            "n"
        ].iloc[0]
    )
    end_ns = BASE_NS + calls * CALL_SPACING_NS
    result: dict[str, Any] = {
        "calls": calls,
        "span_minutes": round(calls * CALL_SPACING_NS / 60e9, 1),
        "generate_s": round(generate_s, 1),
        "parts_unmerged": parts,
    }
    runs: dict[str, list[float]] = {}

    def measure(name: str, function: Callable[[], Any], times: int = repeats) -> None:
        runs.setdefault(name, []).extend(timed(function) for _ in range(times))

    log("raw SQL on unmerged halves: FINAL vs GROUP BY, interleaved")
    # GROUP BY loses clearly at 1 M (see the results) and takes minutes at 10 M: 1 M only.
    group_by_repeats = repeats if calls <= 1_000_000 else 0
    for index in range(repeats):
        measure(
            "raw_final_unmerged",
            lambda: phase_breakdown(store, options=CallsOptions(read="final")),
            1,
        )
        if index < group_by_repeats:
            measure(
                "raw_group_by_unmerged",
                lambda: phase_breakdown(store, options=CallsOptions(read="group_by")),
                1,
            )

    log("settle all but the last 5 minutes, then the rest")
    result["settle_live_s"] = round(timed(lambda: settle(store, now_ns=end_ns)), 2)
    measure("rollup_live_tail", lambda: breakdown(store))
    measure("report_live_tail", lambda: build_report(store))
    result["settle_rest_s"] = round(
        timed(lambda: settle(store, now_ns=end_ns + 3_600_000_000_000)), 2
    )
    measure("rollup_settled", lambda: breakdown(store))
    measure("report_settled", lambda: build_report(store))
    result["rss_mb_after_unmerged"] = round(peak_rss_mb())

    log("OPTIMIZE TABLE grpc_calls FINAL")
    result["optimize_s"] = round(timed(lambda: store.command("OPTIMIZE TABLE grpc_calls FINAL")), 1)
    log("loading rows for pandas")
    rows = load_rows(store)
    result["pandas_rows_mb"] = round(rows.memory_usage(deep=True).sum() / 2**20)
    result["sql_vs_pandas_max_relative_difference"] = agreement(
        phase_breakdown(store), pandas_breakdown(rows)
    )
    log("raw SQL on merged rows and pandas, interleaved")
    for index in range(repeats):
        measure(
            "raw_final_merged",
            lambda: phase_breakdown(store, options=CallsOptions(read="final")),
            1,
        )
        if index < group_by_repeats:
            measure(
                "raw_group_by_merged",
                lambda: phase_breakdown(store, options=CallsOptions(read="group_by")),
                1,
            )
        measure("pandas_merged", lambda: pandas_breakdown(rows), 1)
        gc.collect()
    result["rss_mb_peak"] = round(peak_rss_mb())
    rows = pd.DataFrame()  # free the copy before the next size
    gc.collect()

    result["seconds"] = {name: _median(values) for name, values in runs.items()}
    result["runs"] = {name: [round(v, 4) for v in values] for name, values in runs.items()}
    seconds = result["seconds"]
    result["pandas_over_raw_sql"] = round(seconds["pandas_merged"] / seconds["raw_final_merged"], 1)
    result["pandas_over_rollup_sql"] = round(
        seconds["pandas_merged"] / seconds["rollup_live_tail"], 1
    )
    return result


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(results: dict[str, Any]) -> str:
    machine = results["machine"]
    lines = [
        "# Analysis: per-method phase breakdown, SQL (chDB) vs pandas",
        "",
        f"{machine['date']}; {machine['cpu_count']} CPUs, {machine['cpu_model']}; "
        f"Python {machine['python']}; chDB {machine['versions'].get('chdb')}, "
        f"pandas {machine['versions'].get('pandas')}.",
        "",
        f"Median of {results['repeats']} interleaved rounds (GROUP BY: 1 M only). "
        f"Every phase ({len(ALL_PHASES)}), `{QUANTILES}` + mean per method, clock offsets "
        "estimated per host pair and 60 s window and applied. Calls are generated at "
        f"{1e9 / CALL_SPACING_NS:,.0f} calls/s of wall time.",
        "",
        "- **raw**: every call computed from `grpc_calls` (`phases.phase_breakdown`). "
        '"unmerged": client and server halves inserted separately (what the materialized '
        "view writes), merged while reading (`FINAL`, or `GROUP BY TraceId, ClientSpanId`); "
        '"merged": after `OPTIMIZE TABLE grpc_calls FINAL`.',
        "- **rollup**: `rollup.breakdown`: settled minutes from `grpc_phase_rollup`, the last "
        '5 minutes ("live tail") computed raw in the same query; "settled": '
        "everything rolled up. `report` = breakdown + clock offsets (what `grpc-overhead "
        "report` runs).",
        "- **pandas**: the same breakdown from the merged rows already in a DataFrame (load "
        "not timed), exact quantiles.",
        "",
    ]
    names = [
        ("raw_final_unmerged", "raw FINAL, unmerged"),
        ("raw_group_by_unmerged", "raw GROUP BY, unmerged"),
        ("raw_final_merged", "raw FINAL, merged"),
        ("raw_group_by_merged", "raw GROUP BY, merged"),
        ("rollup_live_tail", "rollup + live tail"),
        ("rollup_settled", "rollup, settled"),
        ("report_live_tail", "report, live tail"),
        ("report_settled", "report, settled"),
        ("pandas_merged", "pandas, merged"),
    ]
    sizes = results["sizes"]
    headers = ["seconds (median)"] + [f"{size['calls']:,} calls" for size in sizes]
    rows = [
        [label] + [_seconds(size["seconds"].get(name)) for size in sizes] for name, label in names
    ]
    rows.append(["pandas / raw FINAL merged"] + [f"{s['pandas_over_raw_sql']}x" for s in sizes])
    rows.append(
        ["pandas / rollup + live tail"] + [f"{s['pandas_over_rollup_sql']}x" for s in sizes]
    )
    rows.append(
        ["settle (one-off, s)"] + [f"{s['settle_live_s']} + {s['settle_rest_s']}" for s in sizes]
    )
    rows.append(["OPTIMIZE FINAL (s)"] + [str(s["optimize_s"]) for s in sizes])
    rows.append(
        ["peak RSS after SQL, before pandas (MB)"]
        + [str(s["rss_mb_after_unmerged"]) for s in sizes]
    )
    rows.append(["peak RSS (MB)"] + [str(s["rss_mb_peak"]) for s in sizes])
    rows.append(["pandas rows (MB)"] + [str(s["pandas_rows_mb"]) for s in sizes])
    for statistic in ("mean_us", "p50_us", "p99_us"):
        rows.append(
            [f"SQL vs pandas, largest relative difference, {statistic}"]
            + [str(s["sql_vs_pandas_max_relative_difference"][statistic]) for s in sizes]
        )
    lines.append(markdown_table(headers, rows))
    largest = sizes[-1]
    seconds = largest["seconds"]

    def verdict(value: float) -> str:
        return f"**{'met' if value < TARGET_SECONDS else 'not met'}** ({value:.3f} s)"

    lines.append(
        f"Target: full breakdown over {largest['calls']:,} calls in under "
        f"{TARGET_SECONDS:.0f} s. Settled calls (rollups): "
        f"{verdict(seconds['rollup_settled'])}. With the last 5 minutes live (computed raw "
        f"from unmerged halves): {verdict(seconds['rollup_live_tail'])}; that part grows "
        "with the call rate of the last minutes, not with the calls stored. Every call "
        f"computed raw: {verdict(seconds['raw_final_unmerged'])} from unmerged halves, "
        f"{verdict(seconds['raw_final_merged'])} merged."
    )
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.analysis", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes", default="1000000,10000000", help="calls per size, comma-separated"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="100k calls, 3 repeats, results printed only"
    )
    parser.add_argument("--keep", help="store directory to keep (default: a temporary one)")
    args = parser.parse_args(argv)
    sizes = [100_000] if args.quick else [int(size) for size in args.sizes.split(",")]
    repeats = 3 if args.quick else args.repeats

    directory = args.keep or tempfile.mkdtemp(prefix="grpc-overhead-bench-analysis-")
    results: dict[str, Any] = {
        "machine": machine_info(("chdb", "pandas", "numpy")),
        "repeats": repeats,
        "quantiles": QUANTILES,
        "target_seconds": TARGET_SECONDS,
        "sizes": [],
    }
    try:
        with open_store(directory) as store:
            create_schema(store)
            create_calls(store, CallsOptions())
            for calls in sizes:
                results["sizes"].append(run_size(store, calls, repeats))
                log(json.dumps(results["sizes"][-1]["seconds"]))
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    return publish("analysis", results, markdown(results), quick=args.quick)


if __name__ == "__main__":
    raise SystemExit(main())

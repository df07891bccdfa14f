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
from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phases import phase_breakdown
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.result_columns import ALL_PHASES, QUANTILES
from grpc_overhead.analyzer.rollup import breakdown, settle
from grpc_overhead.analyzer.schema import create_schema
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store
from harness.generated_calls import BASE_NS, CALL_SPACING_NS, generate

TARGET_SECONDS = 1.0


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

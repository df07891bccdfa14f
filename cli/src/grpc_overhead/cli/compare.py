"""``grpc-overhead compare RUN_A RUN_B [...]``: phase-by-phase difference of runs, with noise.

    grpc-overhead compare RUN_A RUN_B [RUN_C ...] [--store DIR | --clickhouse URL]
                          [--format table|json] [--resamples 400]
                          [--expect-saving-us US [--expect-phase PHASE]]

RUN_A is the baseline; every other run is compared with it: per phase the
p50s, the difference, the ratio and a 95% bootstrap interval on the
difference of the p50s (``analyzer.compare``, ``analyzer.verdicts``) and a
verdict: faster, slower or no measurable difference. ``--expect-saving-us``
(a finding's predicted saving) says whether it materialized in each other run
(``expectation``). Runs are any run ids in the
store: experiment cells (then throughput is compared too, from ``grpc_runs``)
or plain ``load --run-id`` runs. ``--format json``::

    {"baseline", "comparisons": [{"baseline", "run_id", "summary",
      "explained_by": {"phase", "diff_us", "share"} | null,
      "basis", "expectation": {"phase", "predicted_us", "measured_us", "ci_us", "outcome"},
      "throughput": {...}, "phases": {PHASE: {"phase", "baseline_p50_us", "other_p50_us",
      "diff_us", "ratio", "ci_low_us", "ci_high_us", "ci_us", "verdict", "confidence",
      "significant", "baseline_calls", "other_calls"}}}]}
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from typing import Any

from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.store import Store
from grpc_overhead.analyzer.verdicts import saving_outcome
from grpc_overhead.cli.report import (
    EXIT_USAGE,
    ReportInputError,
    add_store_arguments,
    open_for_reading,
    prepare,
)

MAX_RESAMPLES = 100_000


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead compare",
        description="Compare runs phase by phase against the first (the baseline), with a "
        "bootstrap interval on each p50 difference.",
    )
    result.add_argument("runs", nargs="+", metavar="RUN", help="run ids; the first is the baseline")
    add_store_arguments(result)
    result.add_argument("--format", choices=("table", "json"), default="table")
    result.add_argument(
        "--resamples", type=int, default=400, help="bootstrap resamples (default 400)"
    )
    result.add_argument(
        "--expect-saving-us",
        type=float,
        metavar="US",
        help="a predicted saving (a finding's): say whether each run after the first shows it",
    )
    result.add_argument(
        "--expect-phase",
        default="total",
        metavar="PHASE",
        help="the phase the saving is expected on (default total)",
    )
    return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        if len(args.runs) < 2:
            raise ReportInputError("name at least two runs: RUN_A (the baseline) and RUN_B")
        if len(set(args.runs)) != len(args.runs):
            raise ReportInputError("a run is named twice")
        if not 100 <= args.resamples <= MAX_RESAMPLES:
            raise ReportInputError(f"--resamples must be 100..{MAX_RESAMPLES:,}")
        _check_expectation(args)
        with open_for_reading(args) as store:
            document = compare_runs(store, args.runs, args.resamples)
        if args.expect_saving_us is not None:
            for comparison in document["comparisons"]:
                phase = comparison["phases"].get(args.expect_phase)
                comparison["expectation"] = {
                    "phase": args.expect_phase,
                    **saving_outcome(phase, args.expect_saving_us),
                }
    except AnalyzerError as error:
        print(f"grpc-overhead compare: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(render_table(document))
    return 0


def _check_expectation(args: argparse.Namespace) -> None:
    from grpc_overhead.analyzer.runs import CELL_PHASES

    if args.expect_saving_us is not None and not args.expect_saving_us > 0:
        raise ReportInputError("--expect-saving-us must be a number of µs above 0")
    if args.expect_phase not in CELL_PHASES:
        raise ReportInputError(
            f"--expect-phase {args.expect_phase!r} is not a phase; known: {', '.join(CELL_PHASES)}"
        )


def compare_runs(store: Store, run_ids: list[str], resamples: int) -> dict[str, Any]:
    from grpc_overhead.analyzer.compare import compare
    from grpc_overhead.analyzer.runs import list_runs, run_calls

    options, missing = prepare(store)
    if missing:
        raise ReportInputError(missing)
    frames = {}
    for run_id in run_ids:
        frame = run_calls(store, run_id, options)
        if frame.empty:
            raise ReportInputError(
                f"no calls of run {run_id!r} in {store.description} (run ids: `grpc-overhead "
                'sql "SELECT DISTINCT run_id FROM grpc_calls"`, or the experiment\'s output)'
            )
        frames[run_id] = frame
    runs = list_runs(store, options=options)
    comparisons = compare(frames, runs, resamples=resamples)
    return {"baseline": run_ids[0], "comparisons": [c.to_json() for c in comparisons]}


def _cell(value: Any, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+,.0f}" if signed else f"{value:,.0f}"


def render_table(document: dict[str, Any]) -> str:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=140, force_terminal=False, soft_wrap=True)
    for comparison in document["comparisons"]:
        table = Table(
            title=f"{comparison['run_id']} vs {comparison['baseline']} (p50 µs)",
            title_justify="left",
        )
        for header in ("phase", "baseline", "other", "diff", "interval", "ratio", "verdict"):
            table.add_column(header, justify="left" if header == "phase" else "right")
        for name, delta in comparison["phases"].items():
            if delta["baseline_p50_us"] is None and delta["other_p50_us"] is None:
                continue
            interval = (
                "-"
                if delta["ci_low_us"] is None
                else f"{delta['ci_low_us']:+,.0f}..{delta['ci_high_us']:+,.0f}"
            )
            table.add_row(
                name,
                _cell(delta["baseline_p50_us"]),
                _cell(delta["other_p50_us"]),
                _cell(delta["diff_us"], signed=True),
                interval,
                "-" if delta["ratio"] is None else f"{delta['ratio']:.2f}x",
                "" if delta["diff_us"] is None else delta["verdict"],
            )
        console.print(table)
        throughput = comparison["throughput"]
        if throughput.get("calls_per_s_ratio") is not None:
            console.print(
                f"throughput: {throughput['other_calls_per_s']:,.0f} vs "
                f"{throughput['baseline_calls_per_s']:,.0f} calls/s "
                f"({throughput['calls_per_s_ratio']:.2f}x)"
            )
        console.print(comparison["summary"])
        expected = comparison.get("expectation")
        if expected:
            console.print(
                f"expected saving on {expected['phase']}: {expected['predicted_us']:,.0f} µs; "
                f"measured: {_cell(expected['measured_us'])} µs: {expected['outcome']}"
            )
        console.print(
            f"intervals: {comparison['basis']}; simultaneous 95 % over the phases (each "
            "phase's at a higher level); a verdict needs the interval to exclude 0 and a move "
            "of at least 2 µs and 1 % of the baseline"
        )
        console.print()
    return console.file.getvalue()  # type: ignore[attr-defined]

"""``grpc-overhead experiment FILE``: run a matrix of configurations, one run per cell.

    grpc-overhead experiment FILE [--store DIR | --clickhouse URL] [--format table|json]
                                  [--dry-run]

The command is its own ``serve``: it holds the store (chDB directory or
ClickHouse server) and runs the intake in this process on a free port, so
every cell's spans land where its row of ``grpc_runs`` is written, and the
phases of a cell are read back as soon as its processes stopped. Progress goes
to stderr (one line when a cell starts, one when it ends); the comparison goes
to stdout at the end. ``--format json`` is a contract::

    {"experiment", "store", "cells": [{"run_id", "cell", "config", "varied", "calls",
      "errors", "calls_per_s", "predictions_per_s", "p50_us", "p99_us", "traced_calls",
      "phases": {PHASE: {"p50_us", "mean_us", "calls"}}}], "failed": [{"cell", "error"}],
     "winners": [{"metric", "cell", "value", "worst_cell", "worst_value", "factor"}],
     "explanation"}

Exit codes: 0 every cell ran, 1 some cell failed (the others are reported),
2 the file or the store cannot be used, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from grpc_overhead.analyzer.calls import CallsOptions, create_calls
from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.insights import experiments as insights
from grpc_overhead.analyzer.runs import create_runs, list_runs, record_run
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR
from grpc_overhead.cli.experiment_spec import Experiment, SpecError, load
from grpc_overhead.cli.report import add_store_arguments

EXIT_USAGE = 2
#: phase -> its short column header
TABLE_PHASES = {"client_serialize": "cli ser", "request_network": "req net",
                "server_queue": "queue", "request_deserialize": "req deser",
                "processing": "proc", "response_serialize": "resp ser",
                "response_network": "resp net", "client_deserialize": "cli deser"}  # fmt: skip


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead experiment",
        description="Run every cell of an experiment FILE (YAML: settings + matrix:) against "
        "fresh prediction services, record each as a run in grpc_runs, and compare them.",
    )
    result.add_argument("file", metavar="FILE", help="experiment YAML (see experiments/)")
    add_store_arguments(result)
    result.add_argument("--format", choices=("table", "json"), default="table")
    result.add_argument(
        "--dry-run", action="store_true", help="check FILE and list its cells, run nothing"
    )
    return result


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        experiment = load(args.file)
    except SpecError as error:
        print(f"grpc-overhead experiment: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.dry_run:
        for cell in experiment.cells:
            print(f"cell {cell.index}: {cell.label()}")
        print(f"{len(experiment.cells)} cells")
        return 0
    try:
        return _run(args, experiment)
    except AnalyzerError as error:
        print(f"grpc-overhead experiment: {error}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace, experiment: Experiment) -> int:
    from grpc_overhead.analyzer.intake import Intake, IntakeConfig
    from grpc_overhead.analyzer.store import open_store
    from grpc_overhead.cli.experiment_run import CellFailed, run_cell
    from grpc_overhead.cli.toxiproxy import ToxiproxyError

    store = open_store(None if args.clickhouse else (args.store or DEFAULT_STORE_DIR),
                       args.clickhouse)  # fmt: skip
    results: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    interrupted = False
    try:
        intake = Intake(store, IntakeConfig(host="127.0.0.1", port=0))
        options = CallsOptions.from_schema(intake.schema)
        try:
            intake.start()
            create_calls(store, options)
            create_runs(store, options)
            endpoint = f"http://{intake.address}"
            invocation = f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            total = len(experiment.cells)
            _say(f"experiment {experiment.name}: {total} cells, store {store.description}")
            for cell in experiment.cells:
                run_id = f"{invocation}-c{cell.index:02d}"
                _say(f"[{cell.index + 1}/{total}] {cell.label()} ...")
                started = time.monotonic()
                try:
                    outcome = run_cell(
                        cell, experiment.name, invocation, run_id, store, options, endpoint
                    )
                except (CellFailed, ToxiproxyError) as error:
                    failed.append({"cell": cell.index, "label": cell.label(), "error": str(error)})
                    _say(f"[{cell.index + 1}/{total}] failed: {error}")
                    continue
                except KeyboardInterrupt:
                    interrupted = True
                    _say("interrupted: the cells run so far are kept")
                    break
                record_run(store, outcome.record, options)
                results.append(_cell_json(outcome, cell.varied))
                _say(f"[{cell.index + 1}/{total}] {_brief(results[-1])} "
                     f"({time.monotonic() - started:.1f} s)")  # fmt: skip
        finally:
            intake.stop()
        rows = list_runs(store, experiment.name, options)
        rows = rows[rows["run_id"].isin([cell["run_id"] for cell in results])]
    finally:
        store.close()
    document = _document(experiment, store.description, results, failed, rows)
    if args.format == "json":
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(render_table(document))
    if interrupted:
        return 130
    return 1 if failed else 0


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _cell_json(outcome: Any, varied: dict[str, Any]) -> dict[str, Any]:
    record = outcome.record
    return {
        "run_id": record.run_id,
        "cell": record.cell,
        "config": record.config,
        "varied": varied,
        "calls": record.calls,
        "errors": record.errors,
        "calls_per_s": round(record.calls_per_s, 3),
        "predictions_per_s": round(record.predictions_per_s, 3),
        "p50_us": None if record.p50_us is None else round(record.p50_us, 1),
        "p99_us": None if record.p99_us is None else round(record.p99_us, 1),
        "traced_calls": outcome.traced_calls,
        "phases": record.phases,
    }


def _brief(cell: dict[str, Any]) -> str:
    p50 = "-" if cell["p50_us"] is None else f"{cell['p50_us']:,.0f} µs"
    return (
        f"{cell['calls']:,} calls, {cell['errors']} errors, {cell['calls_per_s']:,.0f} calls/s, "
        f"p50 {p50}"
    )


def _document(experiment: Experiment, store: str, results: list[dict[str, Any]],
              failed: list[dict[str, Any]], rows: Any) -> dict[str, Any]:  # fmt: skip
    frame = insights.cells(rows)
    labels = dict(zip(frame.get("run_id", []), frame.get("label", []), strict=True))
    for cell in results:
        cell["label"] = labels.get(cell["run_id"], f"cell {cell['cell']}")
    found = insights.winners(frame) if len(frame) else []
    return {
        "experiment": experiment.name,
        "description": experiment.description,
        "store": store,
        "cells": results,
        "failed": failed,
        "winners": [
            {
                "metric": w.metric,
                "cell": w.label,
                "value": round(w.value, 1),
                "worst_cell": w.worst_label,
                "worst_value": round(w.worst_value, 1),
                "factor": round(w.factor, 3),
            }
            for w in found
        ],
        "explanation": insights.explain(frame) if len(frame) else "",
    }


def _us(value: Any) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render_table(document: dict[str, Any]) -> str:
    """The cells side by side, then the winners and the explanation."""
    import io

    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=220, force_terminal=False, soft_wrap=True)
    table = Table(title=f"experiment {document['experiment']}", title_justify="left")
    table.add_column("cell", no_wrap=True)
    for header in ("calls/s", "pred/s", "p50 µs", "p99 µs", "errors", *TABLE_PHASES.values()):
        table.add_column(header, justify="right")
    for cell in document["cells"]:
        phases = cell["phases"]
        table.add_row(
            cell.get("label", str(cell["cell"])),
            f"{cell['calls_per_s']:,.0f}",
            f"{cell['predictions_per_s']:,.0f}",
            _us(cell["p50_us"]),
            _us(cell["p99_us"]),
            str(cell["errors"]),
            *(_us((phases.get(phase) or {}).get("p50_us")) for phase in TABLE_PHASES),
        )
    console.print(table)
    console.print(
        "p50/p99: the load generator's clock; phases (cli ser ... cli deser): p50 µs from the "
        "spans (client serialize, request network, server queue, request deserialize, "
        "processing, response serialize, response network, client deserialize)"
    )
    for winner in document["winners"]:
        name, higher, unit = insights.METRICS[winner["metric"]]
        direction = "above" if higher else "below"
        console.print(
            f"{name}: [b]{winner['cell']}[/b] wins, {winner['factor']:.2f}x {direction} "
            f"{winner['worst_cell']} ({winner['value']:,.0f} vs "
            f"{winner['worst_value']:,.0f} {unit})"
        )
    if document["explanation"]:
        console.print(document["explanation"])
    for failure in document["failed"]:
        console.print(
            f"[red]cell {failure['cell']} ({failure['label']}) failed:[/] {failure['error']}"
        )
    return console.file.getvalue()  # type: ignore[attr-defined]

"""``grpc-overhead experiment FILE``: run a matrix of configurations in interleaved rounds.

    grpc-overhead experiment FILE [--store DIR | --clickhouse URL] [--format table|json]
                                  [--rounds N] [--require-quiet [LOAD]] [--dry-run]

The command is its own ``serve``: it holds the store (chDB directory or
ClickHouse server) and runs the intake in this process on a free port, so
every cell's spans land where its row of ``grpc_runs`` is written. Every cell
runs once per round, with fresh processes, in the order A B C, C B A, ...; a
cell's rounds share its run id. Before the first round and all along, the
machine is checked (``machine``): a busy machine is warned about and its
results marked ``under_load``; ``--require-quiet`` refuses to start on one.
Progress goes to stderr (one line per round of a cell); the comparison goes to
stdout at the end (``experiment_report``, whose JSON is a contract).

Exit codes: 0 every cell ran, 1 some cell failed (the others are reported),
2 the file or the store cannot be used, 3 ``--require-quiet`` and the machine
is busy, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.runs import create_runs, list_runs, record_run
from grpc_overhead.analyzer.store import DEFAULT_STORE_DIR
from grpc_overhead.cli import experiment_report as report
from grpc_overhead.cli.experiment_spec import MAX_ROUNDS, Experiment, SpecError, load
from grpc_overhead.cli.report import add_store_arguments

EXIT_USAGE = 2
EXIT_BUSY = 3


def _within(convert: type, low: float, high: float, expected: str) -> Any:
    """An argparse type: ``convert(text)`` within [low, high], else one line naming it."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


_rounds = _within(int, 1, MAX_ROUNDS, f"an integer 1..{MAX_ROUNDS}")
_load = _within(float, 1e-9, float("inf"), "a load average above 0")


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="grpc-overhead experiment",
        description="Run every cell of an experiment FILE (YAML: settings + matrix:) against "
        "fresh prediction services, in interleaved rounds, record each as a run in grpc_runs, "
        "and compare them with intervals and verdicts.",
    )
    result.add_argument("file", metavar="FILE", help="experiment YAML (see experiments/)")
    add_store_arguments(result)
    result.add_argument("--format", choices=("table", "json"), default="table")
    result.add_argument(
        "--rounds", type=_rounds, help="rounds per cell (default: the file's rounds:, else 3)"
    )
    result.add_argument(
        "--require-quiet",
        nargs="?",
        const=1.5,
        type=_load,
        metavar="LOAD",
        help="refuse to start when the load average is above LOAD (default 1.5) or other "
        "processes use the CPU",
    )
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
        rounds = args.rounds or experiment.rounds
        print(f"{len(experiment.cells)} cells x {rounds} rounds")
        return 0
    try:
        return _run(args, experiment)
    except AnalyzerError as error:
        print(f"grpc-overhead experiment: {error}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace, experiment: Experiment) -> int:
    from grpc_overhead.analyzer.intake import Intake, IntakeConfig
    from grpc_overhead.analyzer.store import open_store
    from grpc_overhead.cli import machine
    from grpc_overhead.cli.experiment_run import (
        CellFailed,
        cell_result,
        run_round,
        wait_rounds_stored,
    )
    from grpc_overhead.cli.toxiproxy import ToxiproxyError

    rounds = args.rounds or experiment.rounds
    check = machine.MachineCheck()
    before = machine.before_start(check, quiet_load=args.require_quiet or machine.QUIET_LOAD)
    check.samples.clear()
    if before["under_load"]:
        reasons = "; ".join(before["warnings"])
        if args.require_quiet is not None:
            _say(
                f"grpc-overhead experiment: the machine is busy ({reasons}): nothing was run; "
                "wait until it is quiet, or drop --require-quiet to run and mark the "
                "results"
            )
            return EXIT_BUSY
        _say(f"warning: the machine is busy ({reasons}): the results will be marked under_load")
    store = open_store(
        None if args.clickhouse else (args.store or DEFAULT_STORE_DIR), args.clickhouse
    )
    done: dict[int, list[Any]] = {cell.index: [] for cell in experiment.cells}
    failed: dict[int, dict[str, Any]] = {}
    results: dict[int, Any] = {}
    compared: list[dict[str, Any]] = []
    interrupted = False
    check.start()
    try:
        intake = Intake(store, IntakeConfig(host="127.0.0.1", port=0))
        options = CallsOptions.from_schema(intake.schema)
        try:
            intake.start()
            create_calls(store, options)
            create_runs(store, options)
            endpoint = f"http://{intake.address}"
            invocation = f"{experiment.name}-{time.strftime('%Y%m%d-%H%M%S')}"
            run_ids = {cell.index: f"{invocation}-c{cell.index:02d}" for cell in experiment.cells}
            schedule = interleaved(experiment.cells, rounds)
            _say(
                f"experiment {experiment.name}: {len(experiment.cells)} cells x {rounds} "
                f"rounds, interleaved; store {store.description}"
            )
            for step, (round_number, cell) in enumerate(schedule, start=1):
                if cell.index in failed:
                    continue
                where = f"[{step}/{len(schedule)} round {round_number + 1}]"
                _say(f"{where} {cell.label()} ...")
                started = time.time()
                try:
                    outcome = run_round(cell, round_number, run_ids[cell.index], endpoint)
                    done[cell.index].append(outcome)
                    wait_rounds_stored(store, run_ids[cell.index], done[cell.index], options)
                except (CellFailed, ToxiproxyError) as error:
                    failed[cell.index] = {
                        "cell": cell.index,
                        "label": cell.label(),
                        "error": str(error),
                    }
                    _say(f"{where} failed: {error}")
                    continue
                except KeyboardInterrupt:
                    interrupted = True
                    _say("interrupted: the rounds run so far are kept")
                    break
                outcome.machine = check.window(started, time.time())
                marked = " (under load: " + "; ".join(outcome.machine["warnings"]) + ")"
                _say(
                    f"{where} {_brief(outcome.summary)} ({time.time() - started:.1f} s)"
                    + (marked if outcome.machine["under_load"] else "")
                )
            for cell in experiment.cells:
                if cell.index in failed or not done[cell.index]:
                    continue
                result = cell_result(
                    cell,
                    experiment.name,
                    invocation,
                    run_ids[cell.index],
                    done[cell.index],
                    store,
                    options,
                )
                result.record.machine["before"] = before
                result.record.under_load = result.record.under_load or before["under_load"]
                results[cell.index] = result
            _say("comparing the cells with their baselines ...")
            compared = report.compare_cells(experiment, results)
            for result in results.values():
                record_run(store, result.record, options)
        finally:
            intake.stop()
            check.stop()
        rows = list_runs(store, experiment.name, options)
        rows = rows[rows["run_id"].isin([r.record.run_id for r in results.values()])]
    finally:
        store.close()
    during = machine.summarize(check.samples)
    document = report.document(
        experiment,
        store.description,
        results,
        list(failed.values()),
        rows,
        rounds,
        {"before": before, "during": during},
        compared,
    )
    if args.format == "json":
        print(json.dumps(document, indent=2))
    else:
        sys.stdout.write(report.render_table(document))
    if interrupted:
        return 130
    return 1 if failed else 0


def interleaved(cells: list[Any], rounds: int) -> list[tuple[int, Any]]:
    """(round, cell) in running order: A B C, C B A, A B C, ... so a drift of the machine
    (warming, a neighbour's burst) reaches every cell alike over the rounds."""
    order = []
    for round_number in range(rounds):
        ordered = cells if round_number % 2 == 0 else list(reversed(cells))
        order += [(round_number, cell) for cell in ordered]
    return order


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _brief(summary: dict[str, Any]) -> str:
    latency = summary.get("latency_ms") or {}
    p50 = "-" if latency.get("p50") is None else f"{latency['p50'] * 1000:,.0f} µs"
    return (
        f"{int(summary['calls']):,} calls, {summary['errors']} errors, "
        f"{float(summary['rps']):,.0f} calls/s, p50 {p50}"
    )

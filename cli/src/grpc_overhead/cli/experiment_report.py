"""What ``grpc-overhead experiment`` says at the end: the cells, each against its baseline
with intervals and verdicts, what a finding predicted, and the machine they ran on.

``--format json`` is a contract (keys may be added, never renamed)::

    {"experiment", "description", "store", "rounds",
     "machine": {"before": {...}, "during": {...}, "under_load", "warnings"},
     "cells": [{"run_id", "cell", "label", "config", "varied", "calls", "errors",
                "calls_per_s", "predictions_per_s", "p50_us", "p99_us", "traced_calls",
                "under_load", "rounds": [{"round", "calls", "errors", "calls_per_s",
                "p50_us", "p99_us", "connect_ms", "under_load", ...}], "connect_ms",
                "instances": [[calls per instance, most first] per round], "imbalance",
                "connections": {INSTANCE_INDEX: count} | null (one_address: via the balancer),
                "phases": {PHASE: {"p50_us", "mean_us", "calls", "ci_us"}}}],
     "comparisons": [{"cell", "label", "run_id", "baseline_cell", "baseline_label",
                      "baseline_run_id", "phase": "total", "verdict", "diff_us", "ci_us",
                      "summary", "explained_by", "basis", "throughput",
                      "phases": [{"phase", "verdict", "diff_us", "ci_us",
                                  "baseline_p50_us", "p50_us", "ratio", "confidence"}]}],
     "expectation": [{"cell", "baseline_cell", "phase", "predicted_us", "measured_us",
                      "ci_us", "outcome"}] | null,
     "failed": [{"cell", "label", "error"}],
     "winners": [{"metric", "cell", "value", "worst_cell", "worst_value", "factor"}],
     "explanation"}

``verdict`` is ``faster``, ``slower`` or ``no measurable difference`` (the cell
against its baseline); ``ci_us`` the interval of the difference of the p50s
(cell - baseline, µs), ``analyzer.verdicts`` says how it is taken.
"""

from __future__ import annotations

import io
import statistics
from typing import Any

from grpc_overhead.analyzer.compare import Comparison, compare_phases
from grpc_overhead.analyzer.insights import experiments as insights
from grpc_overhead.analyzer.verdicts import RoundsShape, saving_outcome
from grpc_overhead.cli.experiment_spec import Experiment

#: phase -> its short column header
TABLE_PHASES = {
    "client_serialize": "cli ser",
    "request_network": "req net",
    "server_queue": "queue",
    "request_deserialize": "req deser",
    "processing": "proc",
    "response_serialize": "resp ser",
    "response_network": "resp net",
    "client_deserialize": "cli deser",
}


def cell_json(result: Any, varied: dict[str, Any]) -> dict[str, Any]:
    record = result.record
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
        "traced_calls": result.traced_calls,
        "untraced_calls": sum(item.untraced_calls for item in result.rounds),
        "under_load": bool(record.under_load),
        "rounds": record.rounds,
        "connect_ms": _median([item.get("connect_ms") for item in record.rounds]),
        "instances": result.instances,
        "connections": _connections(record.rounds),
        "imbalance": _median([imbalance(calls) for calls in result.instances]),
        "phases": record.phases,
    }


def _connections(rounds: list[dict[str, Any]]) -> dict[str, int] | None:
    """Connections each instance (by index) got through the balancer, over the rounds."""
    if not any(item.get("connections") for item in rounds):
        return None
    total: dict[str, int] = {}
    for item in rounds:
        for instance, count in (item.get("connections") or {}).items():
            total[instance] = total.get(instance, 0) + count
    return dict(sorted(total.items()))


def _median(values: list[Any]) -> float | None:
    present = sorted(float(value) for value in values if value is not None)
    return None if not present else round(statistics.median(present), 3)


def imbalance(calls: list[int]) -> float | None:
    """The busiest instance's calls over a fair share (1.0: even; every instance counted,
    those that got no call too): how unevenly a round's load spread."""
    total = sum(calls)
    if not total or len(calls) < 2:
        return None
    return round(max(calls) / (total / len(calls)), 3)


def comparisons(experiment: Experiment, results: dict[int, Any]) -> list[Comparison]:
    """Every cell that ran against its baseline (``Experiment.baseline_of``) that ran."""
    found = []
    for cell in experiment.cells:
        base = experiment.baseline_of(cell)
        if cell.index not in results or base is None or base.index not in results:
            continue
        a, b = results[base.index], results[cell.index]
        paired = a.labels is not None and b.labels is not None and len(a.rounds) == len(b.rounds)
        deltas = compare_phases(
            a.frame, b.frame, baseline_rounds=a.labels, other_rounds=b.labels, paired=paired
        )
        shape = RoundsShape(min(len(a.rounds), len(b.rounds)), paired)
        comparison = Comparison(a.record.run_id, b.record.run_id, deltas, basis=shape)
        comparison.throughput = {
            "baseline_calls_per_s": a.record.calls_per_s,
            "other_calls_per_s": b.record.calls_per_s,
            "calls_per_s_ratio": b.record.calls_per_s / a.record.calls_per_s
            if a.record.calls_per_s
            else None,
        }
        found.append(comparison)
    return found


def comparison_json(comparison: Comparison, labels: dict[str, tuple[int, str]]) -> dict[str, Any]:
    document = comparison.to_json()
    total = document["phases"].get("total") or {}
    cell, label = labels[comparison.other]
    baseline_cell, baseline_label = labels[comparison.baseline]
    return {
        "cell": cell,
        "label": label,
        "run_id": comparison.other,
        "baseline_cell": baseline_cell,
        "baseline_label": baseline_label,
        "baseline_run_id": comparison.baseline,
        "phase": "total",
        "verdict": total.get("verdict"),
        "diff_us": total.get("diff_us"),
        "ci_us": total.get("ci_us"),
        "summary": _summary(document["summary"], labels),
        "explained_by": document["explained_by"],
        "basis": document["basis"],
        "throughput": document["throughput"],
        "phases": [
            {
                "phase": name,
                "verdict": delta["verdict"],
                "diff_us": delta["diff_us"],
                "ci_us": delta["ci_us"],
                "baseline_p50_us": delta["baseline_p50_us"],
                "p50_us": delta["other_p50_us"],
                "ratio": delta["ratio"],
                "confidence": delta["confidence"],
            }
            for name, delta in document["phases"].items()
            if delta["diff_us"] is not None
        ],
    }


def compare_cells(experiment: Experiment, results: dict[int, Any]) -> list[dict[str, Any]]:
    """Every cell against its baseline, as JSON; each compared cell's record carries its own
    (``grpc_runs.comparison``), so the app and SQL read the verdicts without recomputing."""
    labels = {
        result.record.run_id: (index, _label(experiment, index))
        for index, result in results.items()
    }
    compared = [comparison_json(c, labels) for c in comparisons(experiment, results)]
    for item in compared:
        results[item["cell"]].record.comparison = item
    return compared


def _label(experiment: Experiment, index: int) -> str:
    return next(cell.label() for cell in experiment.cells if cell.index == index)


def _summary(text: str, labels: dict[str, tuple[int, str]]) -> str:
    """The comparison's sentence with cells' labels for their run ids."""
    for run_id, (_, label) in labels.items():
        text = text.replace(run_id, label)
    return text


def expectation(experiment: Experiment, compared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Did the saving a finding predicted show? Per compared cell: the measured saving on
    the expected phase (baseline - cell) with its interval and the outcome
    (``verdicts.saving_outcome``)."""
    expect = experiment.expect
    if expect is None:
        return []
    out = []
    for item in compared:
        delta = next((p for p in item["phases"] if p["phase"] == expect.phase), None)
        out.append(
            {
                "cell": item["cell"],
                "label": item["label"],
                "baseline_cell": item["baseline_cell"],
                "phase": expect.phase,
                **saving_outcome(delta, expect.saving_us),
            }
        )
    return out


def document(
    experiment: Experiment,
    store: str,
    results: dict[int, Any],
    failed: list[dict[str, Any]],
    rows: Any,
    rounds: int,
    machine: dict[str, Any],
    compared: list[dict[str, Any]],
) -> dict[str, Any]:
    frame = insights.cells(rows)
    labels_by_run = dict(zip(frame.get("run_id", []), frame.get("label", []), strict=True))
    cells = []
    for index in sorted(results):
        cell = next(c for c in experiment.cells if c.index == index)
        entry = cell_json(results[index], cell.varied)
        entry["label"] = labels_by_run.get(entry["run_id"], f"cell {index}")
        cells.append(entry)
    found = insights.winners(frame) if len(frame) else []
    warnings = list(machine["before"].get("warnings", [])) + list(
        machine["during"].get("warnings", [])
    )
    under_load = bool(machine["before"].get("under_load")) or any(c["under_load"] for c in cells)
    return {
        "experiment": experiment.name,
        "description": experiment.description,
        "store": store,
        "rounds": rounds,
        "machine": {**machine, "under_load": under_load, "warnings": warnings},
        "cells": cells,
        "comparisons": compared,
        "expectation": expectation(experiment, compared) or None,
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


def _interval(ci: list[float] | None) -> str:
    return "-" if not ci else f"{ci[0]:+,.0f}..{ci[1]:+,.0f}"


def render_table(document: dict[str, Any]) -> str:
    """The cells side by side, each against its baseline, then the winners and why."""
    from rich.console import Console
    from rich.table import Table

    console = Console(file=io.StringIO(), width=220, force_terminal=False, soft_wrap=True)
    title = f"experiment {document['experiment']} ({document['rounds']} rounds per cell)"
    table = Table(title=title, title_justify="left")
    table.add_column("cell", no_wrap=True)
    for header in ("calls/s", "pred/s", "p50 µs", "p99 µs", "errors", *TABLE_PHASES.values()):
        table.add_column(header, justify="right")
    for cell in document["cells"]:
        phases = cell["phases"]
        table.add_row(
            cell.get("label", str(cell["cell"])) + (" [busy]" if cell["under_load"] else ""),
            f"{cell['calls_per_s']:,.0f}",
            f"{cell['predictions_per_s']:,.0f}",
            _us(cell["p50_us"]),
            _us(cell["p99_us"]),
            str(cell["errors"]),
            *(_us((phases.get(phase) or {}).get("p50_us")) for phase in TABLE_PHASES),
        )
    console.print(table)
    console.print(
        "p50/p99: the load generator's clock (median of the rounds'); phases (cli ser ... cli "
        "deser): p50 µs from the spans over all rounds (client serialize, request network, "
        "server queue, request deserialize, processing, response serialize, response network, "
        "client deserialize)"
    )
    if document["comparisons"]:
        verdicts = Table(title="against the baseline (p50, µs)", title_justify="left")
        for header in ("cell", "baseline", "verdict", "diff", "interval", "phase that moved"):
            right = header in ("diff", "interval")
            verdicts.add_column(header, justify="right" if right else "left")
        for item in document["comparisons"]:
            cause = item["explained_by"]
            verdicts.add_row(
                item["label"],
                item["baseline_label"],
                item["verdict"] or "-",
                "-" if item["diff_us"] is None else f"{item['diff_us']:+,.0f}",
                _interval(item["ci_us"]),
                "-" if cause is None else f"{cause['phase']} {cause['diff_us']:+,.0f}",
            )
        console.print(verdicts)
        console.print(
            f"intervals: {document['comparisons'][0]['basis']}; simultaneous 95 % "
            "over a comparison's phases"
        )
    for item in document.get("expectation") or []:
        console.print(
            f"expected saving on {item['phase']}: {item['predicted_us']:,.0f} µs; measured for "
            f"{item['label']}: {_us(item['measured_us'])} µs ({_interval(item['ci_us'])}): "
            f"[b]{item['outcome']}[/b]"
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
    for warning in document["machine"]["warnings"]:
        console.print(f"[yellow]machine under load:[/] {warning}")
    for cell in document["cells"]:
        if cell.get("untraced_calls"):
            console.print(
                f"[yellow]{cell.get('label', cell['cell'])}: {cell['untraced_calls']:,} of "
                f"{cell['calls']:,} calls' client spans never left the load generator[/] "
                "(its export failed or timed out: is the intake keeping up?); the phases "
                f"stand on the {cell['traced_calls']:,} traced calls"
            )
    for failure in document["failed"]:
        console.print(
            f"[red]cell {failure['cell']} ({failure['label']}) failed:[/] {failure['error']}"
        )
    return console.file.getvalue()  # type: ignore[attr-defined]

"""The Experiments page's answers: cells side by side, the winner per metric, and why.

Cells are ``grpc_runs`` rows (``runs.list_runs``): what the load generator
measured (throughput, client-side p50/p99) and the phase summary taken from
the run's spans. ``winners`` names the best cell per metric and by how much it
beats the worst; ``explain`` says in words which phase carries the difference
between the fastest and the slowest cell (the consecutive phase whose p50
moved most in the direction of the total's move).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES

#: metric -> (label, higher is better, unit)
METRICS: dict[str, tuple[str, bool, str]] = {
    "calls_per_s": ("calls/s", True, "calls/s"),
    "predictions_per_s": ("predictions/s", True, "predictions/s"),
    "p50_us": ("p50 latency", False, "µs"),
    "p99_us": ("p99 latency", False, "µs"),
}


def cells(runs: pd.DataFrame) -> pd.DataFrame:
    """``grpc_runs`` rows with the config and phase JSON unpacked.

    Adds ``label`` (the settings that differ between the experiment's cells,
    ``k=v, ...``), ``config_json`` parsed as ``settings`` and one
    ``<phase>_p50_us`` column per phase.
    """
    if runs.empty:
        return runs.assign(label=pd.Series(dtype=str))
    frame = runs.reset_index(drop=True).copy()
    configs = [json.loads(text) for text in frame["config"]]
    varied = [key for key in configs[0] if len({json.dumps(c.get(key)) for c in configs}) > 1]
    frame["label"] = [
        ", ".join(f"{key}={_show(config.get(key))}" for key in varied) or f"cell {cell}"
        for config, cell in zip(configs, frame["cell"], strict=True)
    ]
    frame["settings"] = configs
    phases = [json.loads(text or "{}") for text in frame["phases"]]
    names = list(dict.fromkeys(name for summary in phases for name in summary))
    for name in names:
        frame[f"{name}_p50_us"] = [_get(summary, name, "p50_us") for summary in phases]
        frame[f"{name}_mean_us"] = [_get(summary, name, "mean_us") for summary in phases]
    intervals = [(summary.get("total") or {}).get("ci_us") or [None, None] for summary in phases]
    frame["total_ci_low_us"] = [_float(low) for low, _ in intervals]
    frame["total_ci_high_us"] = [_float(high) for _, high in intervals]
    frame["rounds_run"] = [len(json.loads(text or "[]")) or 1 for text in _column(frame, "rounds")]
    frame["under_load"] = [bool(value) for value in _column(frame, "under_load", 0)]
    return frame


def _column(frame: pd.DataFrame, name: str, default: Any = None) -> list[Any]:
    return list(frame[name]) if name in frame else [default] * len(frame)


def _float(value: Any) -> float:
    return float("nan") if value is None else float(value)


def verdicts(cells_frame: pd.DataFrame) -> pd.DataFrame:
    """One row per cell compared with its baseline at run time (``grpc_runs.comparison``):
    ``label``, ``baseline``, ``verdict``, ``diff_us``, ``ci_low_us``, ``ci_high_us``,
    ``explained_by`` (the phase that moved, or ''), ``summary``."""
    columns = [
        "label",
        "baseline",
        "verdict",
        "diff_us",
        "ci_low_us",
        "ci_high_us",
        "explained_by",
        "summary",
    ]
    if cells_frame.empty or "comparison" not in cells_frame:
        return pd.DataFrame(columns=columns)
    labels = dict(zip(cells_frame["run_id"], cells_frame["label"], strict=True))
    rows = []
    for label, text in zip(cells_frame["label"], cells_frame["comparison"], strict=True):
        item = json.loads(text or "{}")
        if not item or item.get("baseline_run_id") not in labels:
            continue
        low, high = item.get("ci_us") or [None, None]
        cause = item.get("explained_by") or {}
        rows.append(
            [
                label,
                labels[item["baseline_run_id"]],
                item.get("verdict"),
                _float(item.get("diff_us")),
                _float(low),
                _float(high),
                cause.get("phase", ""),
                item.get("summary", ""),
            ]
        )
    return pd.DataFrame(rows, columns=columns)


def verdict_phases(cells_frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """The phases of one cell's comparison with its baseline: ``phase``, ``verdict``,
    ``diff_us``, ``ci_low_us``, ``ci_high_us``, ``baseline_p50_us``, ``p50_us``."""
    columns = [
        "phase",
        "verdict",
        "diff_us",
        "ci_low_us",
        "ci_high_us",
        "baseline_p50_us",
        "p50_us",
    ]
    chosen = cells_frame[cells_frame["label"] == label] if "comparison" in cells_frame else None
    if chosen is None or chosen.empty:
        return pd.DataFrame(columns=columns)
    item = json.loads(chosen["comparison"].iloc[0] or "{}")
    rows = []
    for phase in item.get("phases", []):
        low, high = phase.get("ci_us") or [None, None]
        rows.append(
            [
                phase["phase"],
                phase["verdict"],
                _float(phase.get("diff_us")),
                _float(low),
                _float(high),
                _float(phase.get("baseline_p50_us")),
                _float(phase.get("p50_us")),
            ]
        )
    return pd.DataFrame(rows, columns=columns)


def _show(value: Any) -> str:
    if value is None:
        return "off"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _get(summary: dict[str, Any], name: str, key: str) -> float:
    value = (summary.get(name) or {}).get(key)
    return float("nan") if value is None else float(value)


@dataclass(frozen=True)
class Winner:
    metric: str
    label: str  # the winning cell
    value: float
    worst_label: str
    worst_value: float

    @property
    def factor(self) -> float:
        """How many times better than the worst cell (>= 1)."""
        higher = METRICS[self.metric][1]
        if higher:
            return self.value / self.worst_value if self.worst_value else math.inf
        return self.worst_value / self.value if self.value else math.inf

    def sentence(self) -> str:
        name, higher, unit = METRICS[self.metric]
        better = "above" if higher else "below"
        return (
            f"{name}: {self.label} wins with {self.value:,.0f} {unit}, {self.factor:.2f}x "
            f"{better} {self.worst_label} ({self.worst_value:,.0f} {unit})"
        )


def winners(frame: pd.DataFrame) -> list[Winner]:
    """The best cell per metric (``METRICS``), against the worst; metrics with no value skipped."""
    found = []
    for metric, (_, higher, _) in METRICS.items():
        if metric not in frame:
            continue
        values = frame[["label", metric]].dropna()
        if len(values) < 2:
            continue
        ordered = values.sort_values(metric, ascending=not higher)
        best, worst = ordered.iloc[0], ordered.iloc[-1]
        found.append(
            Winner(
                metric, str(best.label), float(best[metric]), str(worst.label), float(worst[metric])
            )
        )
    return found


def explain(frame: pd.DataFrame) -> str:
    """Which phase explains the difference between the fastest and slowest cell, in words."""
    if "total_p50_us" not in frame or frame["total_p50_us"].notna().sum() < 2:
        return "Not enough traced cells to say which phase explains the difference."
    traced = frame[frame["total_p50_us"].notna()]
    fastest = traced.loc[traced["total_p50_us"].idxmin()]
    slowest = traced.loc[traced["total_p50_us"].idxmax()]
    return explain_pair(fastest, slowest)


def explain_pair(fast: pd.Series, slow: pd.Series) -> str:
    """'<slow> takes N µs longer than <fast> at the p50; <phase> explains most of it (...)'."""
    difference = float(slow["total_p50_us"]) - float(fast["total_p50_us"])
    if difference == 0:
        return f"{slow['label']} and {fast['label']} take the same time at the p50."
    moves = {}
    for phase in CONSECUTIVE_PHASES:
        column = f"{phase}_p50_us"
        if column in slow and not (pd.isna(slow[column]) or pd.isna(fast[column])):
            moves[phase] = float(slow[column]) - float(fast[column])
    text = (
        f"{slow['label']} takes {difference:,.0f} µs longer than {fast['label']} at the p50 "
        f"({float(slow['total_p50_us']):,.0f} vs {float(fast['total_p50_us']):,.0f} µs)"
    )
    if not moves:
        return text + "; its spans carry no transport events to split it."
    phase, move = max(moves.items(), key=lambda item: item[1])
    if move <= 0:
        return text + "; no single phase explains it (the difference is spread)."
    share = move / difference
    if share > 1:  # p50s do not add up: a phase's p50 can move more than the total's
        return text + f"; {phase} explains it ({move:+,.0f} µs at its own p50)."
    verb = "explains most of it" if share >= 0.5 else "moved most"
    return text + f"; {phase} {verb} ({move:+,.0f} µs, {share:.0%} of it)."

"""Phase-by-phase comparison of runs, with an honest noise estimate (ghz-compare style).

Every run is compared with the first (the baseline): per phase, the p50 of
each, the difference (other - baseline), the ratio (other / baseline), an
interval on the difference of the p50s and a verdict (``verdicts``: the runs'
rounds and calls resampled, paired when two cells of one experiment ran side
by side; the phases one family). A difference the verdict calls "no
measurable difference" is never a finding. The phase that *explains* the total's
difference is the consecutive phase (``CONSECUTIVE_PHASES``) whose p50 moved
most in the total's direction; its share is that move over the total's move
(p50s do not add up exactly, so a share is a guide, not an identity).

Computation over per-call frames (``runs.run_calls``) and ``grpc_runs`` rows;
the SQL stays in ``runs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from grpc_overhead.analyzer import verdicts
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES
from grpc_overhead.analyzer.runs import (
    CELL_PHASES,
    list_runs,
    round_labels,
    round_windows,
    run_calls,
)
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.verdicts import CONFIDENCE, DEFAULT_RESAMPLES, RoundsShape


@dataclass
class PhaseDelta:
    phase: str
    baseline_p50_us: float | None
    other_p50_us: float | None
    diff_us: float | None
    ratio: float | None
    ci_low_us: float | None
    ci_high_us: float | None
    baseline_calls: int
    other_calls: int
    confidence: float = CONFIDENCE

    @property
    def verdict(self) -> str:
        """faster, slower or no measurable difference (``verdicts.verdict``)."""
        return verdicts.verdict(self.diff_us, self.ci_low_us, self.ci_high_us, self.baseline_p50_us)

    @property
    def significant(self) -> bool:
        """The interval excludes 0 and the move is worth a verdict: more than noise."""
        return self.verdict != verdicts.NO_DIFFERENCE

    def to_json(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "baseline_p50_us": _round(self.baseline_p50_us),
            "other_p50_us": _round(self.other_p50_us),
            "diff_us": _round(self.diff_us),
            "ratio": _round(self.ratio, 4),
            "ci_low_us": _round(self.ci_low_us),
            "ci_high_us": _round(self.ci_high_us),
            "significant": self.significant,
            "verdict": self.verdict,
            "ci_us": None
            if self.ci_low_us is None or self.ci_high_us is None
            else [_round(self.ci_low_us), _round(self.ci_high_us)],
            "confidence": _round(self.confidence, 5),
            "baseline_calls": self.baseline_calls,
            "other_calls": self.other_calls,
        }


@dataclass
class Comparison:
    baseline: str
    other: str
    phases: list[PhaseDelta]
    throughput: dict[str, float | None] = field(default_factory=dict)
    basis: RoundsShape = field(default_factory=lambda: RoundsShape(1, False))

    def phase(self, name: str) -> PhaseDelta | None:
        return next((delta for delta in self.phases if delta.phase == name), None)

    def explained_by(self) -> PhaseDelta | None:
        """The consecutive phase whose p50 moved most in the direction of the total's move."""
        total = self.phase("total")
        if total is None or total.diff_us is None or total.diff_us == 0:
            return None
        sign = 1.0 if total.diff_us > 0 else -1.0
        candidates = [
            delta
            for delta in self.phases
            if delta.phase in CONSECUTIVE_PHASES and delta.diff_us is not None
        ]
        # A move within noise explains nothing while another phase's is beyond it.
        candidates = [delta for delta in candidates if delta.significant] or candidates
        if not candidates:
            return None
        best = max(candidates, key=lambda delta: sign * (delta.diff_us or 0.0))
        return best if sign * (best.diff_us or 0.0) > 0 else None

    def summary(self) -> str:
        """The comparison in one or two sentences."""
        total = self.phase("total")
        if total is None or total.diff_us is None or total.ratio is None:
            return f"{self.other} vs {self.baseline}: no calls with a total to compare"
        direction = "slower" if total.diff_us > 0 else "faster"
        factor = total.ratio if total.ratio >= 1 else (1 / total.ratio if total.ratio else 0)
        interval = (
            f"{total.confidence:.1%} interval {total.ci_low_us:+,.0f}..{total.ci_high_us:+,.0f}"
        )
        if not total.significant:
            return (
                f"{self.other} vs {self.baseline}: no measurable difference at the p50 "
                f"({total.diff_us:+,.0f} µs, {interval})"
            )
        text = (
            f"{self.other} is {direction} than {self.baseline} by {abs(total.diff_us):,.0f} µs "
            f"at the p50, {factor:.2f}x ({interval})"
        )
        cause = self.explained_by()
        if cause is not None and cause.diff_us is not None:
            share = cause.diff_us / total.diff_us
            if share > 1:  # p50s do not add up
                text += f"; {cause.phase} explains it ({cause.diff_us:+,.0f} µs at its own p50)"
            else:
                verb = "explains most of it" if share >= 0.5 else "moved most"
                text += f"; {cause.phase} {verb} ({cause.diff_us:+,.0f} µs, {share:.0%} of it)"
        return text

    def to_json(self) -> dict[str, Any]:
        cause = self.explained_by()
        total = self.phase("total")
        return {
            "baseline": self.baseline,
            "run_id": self.other,
            "phases": {delta.phase: delta.to_json() for delta in self.phases},
            "throughput": {key: _round(value, 3) for key, value in self.throughput.items()},
            "explained_by": None
            if cause is None or total is None or not total.diff_us
            else {
                "phase": cause.phase,
                "diff_us": _round(cause.diff_us),
                "share": _round((cause.diff_us or 0) / total.diff_us, 4),
            },
            "summary": self.summary(),
            "basis": self.basis.describe(),
        }

    def verdicts(self) -> list[dict[str, Any]]:
        """One object per phase: ``phase``, ``verdict`` and ``ci_us`` (the JSON contract),
        with the medians and the difference they come from."""
        return [
            {
                "phase": delta.phase,
                "verdict": delta.verdict,
                "diff_us": _round(delta.diff_us),
                "ci_us": delta.to_json()["ci_us"],
                "baseline_p50_us": _round(delta.baseline_p50_us),
                "other_p50_us": _round(delta.other_p50_us),
                "confidence": _round(delta.confidence, 5),
            }
            for delta in self.phases
            if delta.diff_us is not None
        ]


def _round(value: float | None, digits: int = 3) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(float(value), digits)


def bootstrap_median_diff(
    baseline: np.ndarray,
    other: np.ndarray,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:
    """(low, high) interval of median(other) - median(baseline), calls resampled."""
    return verdicts.difference_interval(
        verdicts.rounds_of(baseline, None),
        verdicts.rounds_of(other, None),
        paired=False,
        resamples=resamples,
        confidence=confidence,
        seed=seed,
    )


def compare_phases(
    baseline: pd.DataFrame,
    other: pd.DataFrame,
    phases: tuple[str, ...] = CELL_PHASES,
    resamples: int = DEFAULT_RESAMPLES,
    *,
    baseline_rounds: np.ndarray | None = None,
    other_rounds: np.ndarray | None = None,
    paired: bool = False,
) -> list[PhaseDelta]:
    """Per phase: p50s, difference, ratio and bootstrap interval of two per-call frames.

    ``*_rounds``: each call's round (``runs.round_labels``); ``paired``: the two ran the
    same rounds side by side. The phases' intervals are one family (``verdicts``)."""
    # The family: phases with values on both sides that vary at all (a phase that is 0 in
    # every call, client_connect on warm channels, tests nothing).
    present = [phase for phase in phases if _varies(baseline, other, f"{phase}_us")]
    confidence = verdicts.family_confidence(len(present))
    deltas = []
    for phase in phases:
        column = f"{phase}_us"
        # Each side's calls by round, with their weights where sampling gave some.
        a, a_weights = verdicts.weighted_rounds_of(
            _column(baseline, column), _weights(baseline), baseline_rounds
        )
        b, b_weights = verdicts.weighted_rounds_of(
            _column(other, column), _weights(other), other_rounds
        )
        a_calls, b_calls = verdicts.calls_made(a, a_weights), verdicts.calls_made(b, b_weights)
        if not a or not b:
            deltas.append(
                PhaseDelta(
                    phase,
                    _median(a, a_weights),
                    _median(b, b_weights),
                    None,
                    None,
                    None,
                    None,
                    a_calls,
                    b_calls,
                )
            )
            continue
        a50, b50 = _median(a, a_weights), _median(b, b_weights)
        low, high = verdicts.difference_interval(
            a,
            b,
            paired=paired,
            resamples=resamples,
            confidence=confidence,
            seed=len(deltas),
            baseline_weights=a_weights,
            other_weights=b_weights,
        )
        ratio = b50 / a50 if a50 else None
        deltas.append(
            PhaseDelta(phase, a50, b50, b50 - a50, ratio, low, high, a_calls, b_calls, confidence)
        )
    return deltas


def _varies(baseline: pd.DataFrame, other: pd.DataFrame, column: str) -> bool:
    a, b = _values(baseline, column), _values(other, column)
    return bool(a.size and b.size and np.ptp(np.concatenate([a, b])) > 0)


def _column(frame: pd.DataFrame, column: str) -> np.ndarray:
    """The column's values, one per row (all NaN where the frame lacks it)."""
    if column not in frame:
        return np.full(len(frame), np.nan)
    return frame[column].to_numpy(dtype=np.float64, na_value=np.nan)


def _values(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.zeros(0)
    return frame[column].dropna().to_numpy(dtype=np.float64)


def _weights(frame: pd.DataFrame) -> np.ndarray | None:
    """The calls each row stands for (``weight``; none: every row is one call)."""
    if "weight" not in frame:
        return None
    return frame["weight"].to_numpy(dtype=np.float64, na_value=1.0)


def _median(groups: list[np.ndarray], weights: verdicts.Weights) -> float | None:
    """The (weighted) median of a side's rounds pooled; None without values."""
    if not groups:
        return None
    pooled = None if weights is None else np.concatenate(weights)
    return verdicts.median(np.concatenate(groups), pooled)


def compare(
    frames: dict[str, pd.DataFrame],
    runs: pd.DataFrame | None = None,
    resamples: int = DEFAULT_RESAMPLES,
) -> list[Comparison]:
    """Each run after the first against the first (dict order = the user's order).

    ``runs``: ``grpc_runs`` rows (``runs.list_runs``) for the throughput ratios;
    runs without a row (plain ``load`` runs) compare by phases only.
    """
    names = list(frames)
    baseline = names[0]
    rows = {} if runs is None else {row.run_id: row for row in runs.itertuples(index=False)}
    labels = {
        name: round_labels(frame, [] if runs is None else round_windows(runs, name))
        for name, frame in frames.items()
    }
    comparisons = []
    for other in names[1:]:
        a, b = rows.get(baseline), rows.get(other)
        # Round k of each ran side by side only within one experiment command.
        paired = bool(
            a is not None
            and b is not None
            and getattr(a, "invocation", None) == getattr(b, "invocation", None)
            and _rounds(labels[baseline]) == _rounds(labels[other]) > 1
        )
        deltas = compare_phases(
            frames[baseline],
            frames[other],
            resamples=resamples,
            baseline_rounds=labels[baseline],
            other_rounds=labels[other],
            paired=paired,
        )
        rounds = min(_rounds(labels[baseline]), _rounds(labels[other]))
        comparison = Comparison(baseline, other, deltas, basis=RoundsShape(rounds, paired))
        if a is not None and b is not None:
            for key in ("calls_per_s", "predictions_per_s"):
                first, second = float(getattr(a, key)), float(getattr(b, key))
                comparison.throughput[f"baseline_{key}"] = first
                comparison.throughput[f"other_{key}"] = second
                comparison.throughput[f"{key}_ratio"] = second / first if first else None
        comparisons.append(comparison)
    return comparisons


def _rounds(labels: np.ndarray | None) -> int:
    return 1 if labels is None else len(np.unique(labels))


def compare_stored(
    store: Store,
    baseline: str,
    other: str,
    *,
    options: CallsOptions | None = None,
    resamples: int = DEFAULT_RESAMPLES,
) -> pd.DataFrame:
    """Two stored runs compared (the app's two-run compare): one row per phase, the
    ``PhaseDelta.to_json`` columns, and the comparison's ``summary`` on every row.

    Empty when either run has no calls in the store.
    """
    frames = {run_id: run_calls(store, run_id, options) for run_id in (baseline, other)}
    if any(frame.empty for frame in frames.values()):
        return pd.DataFrame(columns=["phase", "summary"])
    (comparison,) = compare(frames, list_runs(store, options=options), resamples=resamples)
    frame = pd.DataFrame([{"phase": d.phase, **d.to_json()} for d in comparison.phases])
    frame["summary"] = comparison.summary()
    return frame

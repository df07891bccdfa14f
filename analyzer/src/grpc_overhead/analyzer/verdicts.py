"""Telling a real difference from noise: medians, their intervals and a verdict.

An experiment runs its cells in *rounds* (A B C, C B A, ...), fresh processes
each time, so two cells compared round by round met the same drift of a
shared machine. The interval of a median, or of the difference of two
medians, comes from a two-level bootstrap:

1. the rounds are drawn with replacement; when two cells are compared and
   both ran the same rounds of one experiment, the *same* rounds are drawn for
   both (paired: round k of A ran next to round k of B, so a slow minute
   hits both);
2. within every drawn round, its calls are drawn with replacement;
3. the statistic is the median over the drawn calls (the difference of the
   two medians when comparing).

The interval is the observed statistic ± z times the standard deviation of
``resamples`` (400) such statistics, z the normal quantile of the confidence
level: the family's levels (99.7 % for 19 phases) lie where a few hundred
resamples put one or two draws, so percentiles would not place them. With
three rounds or more on both sides of a comparison, the interval is widened to
cover the Student t interval of the rounds' own differences of medians too
(``t_quantile``, degrees of freedom: rounds - 1; two rounds leave one degree
of freedom and a t factor in the hundreds): a bootstrap over three rounds sees
ten distinct draws and reads too narrow, which an A/A experiment showed (a
pool_wait "slower" by 10 µs between two identical cells).
The round level carries what differs from one start of the processes to the
next (which calls the GIL, the page cache and a neighbour's burst favour);
the call level the noise within a run. A run of one round (a plain ``load
--run-id`` run) has the call level only, and says so: the interval then holds
the sampling noise of its calls, not the drift between runs.

Under tail-aware sampling each stored call stands for ``weight`` calls (``analyzer.weighted``):
the medians are then weighted medians (the lower one: the first value whose cumulative
weight reaches half the total), and the bootstrap draws stored calls as above, each
carrying its weight into the resample's weighted median. With every weight 1 (no
sampling) nothing changes: the plain median and the plain bootstrap.

A comparison's phases form one family: their intervals are simultaneous
(Bonferroni: each at ``1 - 0.05 / phases``), so an A/A comparison, the same
cell twice, comes out "no measurable difference" on the total and every phase
19 times in 20 whatever the number of phases. A difference is *measurable*
when its interval excludes 0 and it is at least ``MIN_EFFECT_US`` and
``MIN_EFFECT_SHARE`` of the baseline's median: below that no change of
configuration is worth a verdict, and the clocks' own resolution sits there.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 400
#: Calls drawn per round at most: beyond this the interval barely narrows and
#: the memory of a resample grows with it.
MAX_CALLS_PER_ROUND = 4_000
#: The smallest difference called measurable: absolute (µs) and as a share of the baseline.
MIN_EFFECT_US = 2.0
MIN_EFFECT_SHARE = 0.01
#: Rounds a cell needs before their spread widens the interval (``_rounds_interval``).
MIN_T_ROUNDS = 3

FASTER, SLOWER, NO_DIFFERENCE = "faster", "slower", "no measurable difference"
VERDICTS = (FASTER, SLOWER, NO_DIFFERENCE)


#: A cell's weights, one array per round as ``rounds_of`` splits its values; None: every
#: call weighs 1 (no sampling).
Weights = list[np.ndarray] | None


def rounds_of(values: np.ndarray, round_index: np.ndarray | None) -> list[np.ndarray]:
    """The values split by round (one array per round present), NaNs dropped."""
    return _split(np.asarray(values, dtype=np.float64), None, round_index)[0]


def weighted_rounds_of(
    values: np.ndarray, weights: np.ndarray | None, round_index: np.ndarray | None
) -> tuple[list[np.ndarray], Weights]:
    """``rounds_of`` and, where some call weighs other than 1, each round's weights in the
    same order (``Weights``); weights that are no number above 0 count 1."""
    values = np.asarray(values, dtype=np.float64)
    if weights is None:
        return _split(values, None, round_index)[0], None
    weights = np.asarray(weights, dtype=np.float64)
    weights = np.where(np.isfinite(weights) & (weights > 0), weights, 1.0)
    groups, weight_groups = _split(values, weights, round_index)
    if all(bool((group == 1.0).all()) for group in weight_groups):
        return groups, None
    return groups, weight_groups


def _split(
    values: np.ndarray, weights: np.ndarray | None, round_index: np.ndarray | None
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    kept = ~np.isnan(values)
    if round_index is None:
        masks = [kept]
    else:
        round_index = np.asarray(round_index)
        masks = [(round_index == label) & kept for label in np.unique(round_index)]
    masks = [mask for mask in masks if mask.any()]
    return [values[mask] for mask in masks], [
        weights[mask] if weights is not None else np.ones(0) for mask in masks
    ]


def calls_made(groups: list[np.ndarray], weights: Weights = None) -> int:
    """The calls a side's values stand for: the calls made, estimated under sampling (the
    sum of the weights), or the values themselves without weights."""
    if weights is None:
        return int(sum(group.size for group in groups))
    return round(sum(float(group.sum()) for group in weights))


def median(values: np.ndarray, weights: np.ndarray | None = None) -> float:
    """The median, or with ``weights`` the lower weighted median."""
    if weights is None:
        return float(np.median(values))
    return float(_weighted_medians(values[None, :], weights[None, :])[0])


def _weighted_medians(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Row by row: the first value (ascending) whose cumulative weight reaches half the
    row's weight. NaN values (padding) must weigh 0."""
    order = np.argsort(np.where(np.isnan(values), np.inf, values), axis=1)
    ordered = np.take_along_axis(values, order, axis=1)
    cumulative = np.cumsum(np.take_along_axis(weights, order, axis=1), axis=1)
    at = np.argmax(cumulative >= cumulative[:, -1:] / 2, axis=1)
    return ordered[np.arange(values.shape[0]), at]


def _capped(
    groups: Sequence[np.ndarray], rng: np.random.Generator, weights: Weights = None
) -> tuple[list[np.ndarray], Weights]:
    capped, capped_weights = [], []
    for index, group in enumerate(groups):
        keep = (
            rng.choice(group.size, MAX_CALLS_PER_ROUND, replace=False)
            if group.size > MAX_CALLS_PER_ROUND
            else slice(None)
        )
        capped.append(group[keep])
        if weights is not None:
            capped_weights.append(weights[index][keep])
    return capped, (capped_weights if weights is not None else None)


def _medians(
    groups: list[np.ndarray],
    drawn_rounds: np.ndarray,
    rng: np.random.Generator,
    weights: Weights = None,
) -> np.ndarray:
    """Median of each resample: calls drawn within each of its drawn rounds, as many as
    the round has (each with its weight: a weighted median). Vectorized in blocks: rounds
    of unequal size are padded with NaN."""
    sizes = np.array([group.size for group in groups])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    values = np.concatenate(groups)
    all_weights = np.concatenate(weights) if weights is not None else None
    widest = int(sizes.max())
    slots = drawn_rounds.shape[1]
    out = np.empty(drawn_rounds.shape[0])
    block = max(1, 2_000_000 // (slots * widest))
    uneven = bool((sizes != widest).any())
    for start in range(0, out.size, block):
        chosen = drawn_rounds[start : start + block]  # (resamples, slots)
        counts = sizes[chosen]
        picks = (rng.random((*chosen.shape, widest)) * counts[..., None]).astype(np.int64)
        drawn = values[offsets[chosen][..., None] + picks]
        if all_weights is not None:
            drawn_weights = all_weights[offsets[chosen][..., None] + picks]
            if uneven:
                padding = np.arange(widest) >= counts[..., None]
                drawn[padding], drawn_weights[padding] = np.nan, 0.0
            out[start : start + chosen.shape[0]] = _weighted_medians(
                drawn.reshape(chosen.shape[0], -1), drawn_weights.reshape(chosen.shape[0], -1)
            )
        elif uneven:
            drawn[np.arange(widest) >= counts[..., None]] = np.nan
            out[start : start + chosen.shape[0]] = np.nanmedian(
                drawn.reshape(chosen.shape[0], -1), axis=1
            )
        else:
            out[start : start + chosen.shape[0]] = np.median(
                drawn.reshape(chosen.shape[0], -1), axis=1
            )
    return out


def _draw_rounds(rounds: int, resamples: int, rng: np.random.Generator) -> np.ndarray:
    if rounds == 1:
        return np.zeros((resamples, 1), dtype=np.int64)
    return rng.integers(0, rounds, (resamples, rounds))


def _interval(observed: float, samples: np.ndarray, confidence: float) -> tuple[float, float]:
    """observed ± z x the resamples' standard deviation: a few hundred resamples give the
    spread well, but not a 99.7 % percentile (the family's level puts one or two
    resamples beyond it)."""
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    half = z * float(np.std(samples, ddof=1)) if samples.size > 1 else 0.0
    return observed - half, observed + half


def median_interval(
    groups: list[np.ndarray],
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    weights: Weights = None,
) -> tuple[float, float] | None:
    """The interval of the median of one cell's calls (split by round; weighted with
    ``weights``); None if no calls."""
    if not groups:
        return None
    rng = np.random.default_rng(seed)
    pooled = np.concatenate(groups)
    observed = median(pooled, _pooled(weights))
    groups, weights = _capped(groups, rng, weights)
    medians = _medians(groups, _draw_rounds(len(groups), resamples, rng), rng, weights)
    low, high = _interval(observed, medians, confidence)
    # a median lies within its data, whatever the normal approximation says
    return max(low, float(pooled.min())), min(high, float(pooled.max()))


def difference_interval(
    baseline: list[np.ndarray],
    other: list[np.ndarray],
    *,
    paired: bool,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = CONFIDENCE,
    seed: int = 0,
    baseline_weights: Weights = None,
    other_weights: Weights = None,
) -> tuple[float, float]:
    """Interval of median(other) - median(baseline); ``paired`` draws the same rounds for
    both (they must have as many rounds, ran side by side). With rounds on both sides, the
    interval also covers the Student t interval of the rounds' own differences. Each side
    weighted by its ``*_weights`` where given (``weighted_rounds_of``)."""
    rng = np.random.default_rng(seed)
    observed = median(np.concatenate(other), _pooled(other_weights)) - median(
        np.concatenate(baseline), _pooled(baseline_weights)
    )
    baseline, baseline_weights = _capped(baseline, rng, baseline_weights)
    other, other_weights = _capped(other, rng, other_weights)
    paired = paired and len(baseline) == len(other) and len(baseline) > 1
    drawn_baseline = _draw_rounds(len(baseline), resamples, rng)
    drawn_other = drawn_baseline if paired else _draw_rounds(len(other), resamples, rng)
    differences = _medians(other, drawn_other, rng, other_weights) - _medians(
        baseline, drawn_baseline, rng, baseline_weights
    )
    low, high = _interval(observed, differences, confidence)
    rounds = _rounds_interval(baseline, other, paired, confidence, baseline_weights, other_weights)
    if rounds is not None:
        low, high = min(low, rounds[0]), max(high, rounds[1])
    return low, high


def _pooled(weights: Weights) -> np.ndarray | None:
    return None if weights is None else np.concatenate(weights)


def _round_medians(groups: list[np.ndarray], weights: Weights) -> np.ndarray:
    return np.array(
        [
            median(group, None if weights is None else weights[index])
            for index, group in enumerate(groups)
        ]
    )


def _rounds_interval(
    baseline: list[np.ndarray],
    other: list[np.ndarray],
    paired: bool,
    confidence: float,
    baseline_weights: Weights = None,
    other_weights: Weights = None,
) -> tuple[float, float] | None:
    """The t interval of the difference of the rounds' medians: a bootstrap over three or
    five rounds sees only a handful of distinct draws and reads too narrow, while the
    rounds' spread, taken with its degrees of freedom, does not."""
    a = _round_medians(baseline, baseline_weights)
    b = _round_medians(other, other_weights)
    # Two rounds give the spread one degree of freedom: a t factor of 12.7 (hundreds once
    # the family's correction applies) says nothing; three are the least it needs.
    if a.size < MIN_T_ROUNDS or b.size < MIN_T_ROUNDS:
        return None
    if paired:
        differences = b - a
        centre = float(differences.mean())
        error = float(differences.std(ddof=1)) / math.sqrt(differences.size)
        freedom = differences.size - 1
    else:
        centre = float(b.mean() - a.mean())
        error = math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
        freedom = min(a.size, b.size) - 1
    half = t_quantile(1 - (1 - confidence) / 2, freedom) * error
    return centre - half, centre + half


def t_quantile(probability: float, freedom: int) -> float:
    """Student's t quantile (no SciPy here): the CDF integrated numerically, bisected."""
    scale = math.lgamma((freedom + 1) / 2) - math.lgamma(freedom / 2)
    scale = math.exp(scale) / math.sqrt(freedom * math.pi)

    def upper_tail(x: float) -> float:
        # P(T > x) = integral from x to infinity; t = x / u maps it onto (0, 1]
        u = np.linspace(1e-9, 1.0, 20_001)
        t = x / u
        density = scale * (1 + t * t / freedom) ** (-(freedom + 1) / 2) * x / (u * u)
        return float(np.sum((density[1:] + density[:-1]) / 2 * np.diff(u)))

    target = 1 - probability
    low, high = 0.0, 1.0
    while upper_tail(high) > target:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if upper_tail(middle) > target else (low, middle)
    return (low + high) / 2


def family_confidence(members: int, confidence: float = CONFIDENCE) -> float:
    """Each member's confidence so that the family's intervals hold together (Bonferroni)."""
    return 1 - (1 - confidence) / max(1, members)


def minimum_effect_us(baseline_median_us: float | None) -> float:
    """The smallest difference worth a verdict against this baseline."""
    share = abs(baseline_median_us or 0.0) * MIN_EFFECT_SHARE
    return max(MIN_EFFECT_US, share)


def verdict(
    diff_us: float | None, low: float | None, high: float | None, baseline_median_us: float | None
) -> str:
    """faster / slower when the interval excludes 0 and the move is worth one, else no
    measurable difference (positive differences are the other run being slower)."""
    if diff_us is None or low is None or high is None:
        return NO_DIFFERENCE
    if abs(diff_us) < minimum_effect_us(baseline_median_us):
        return NO_DIFFERENCE
    if low > 0:
        return SLOWER
    if high < 0:
        return FASTER
    return NO_DIFFERENCE


#: A predicted saving materialized when at least this share of it was measured.
MATERIALIZED_SHARE = 0.5


def saving_outcome(phase: dict[str, Any] | None, predicted_us: float) -> dict[str, Any]:
    """Did a predicted saving show? ``phase``: a comparison's phase (``diff_us``, ``ci_us``,
    ``verdict``: the changed run against the one before it). ``materialized``: faster by at
    least half the prediction; ``partly``: faster, by less; else ``did not materialize``."""
    if phase is None or phase.get("diff_us") is None:
        return {
            "predicted_us": predicted_us,
            "measured_us": None,
            "ci_us": None,
            "outcome": "did not materialize",
        }
    measured = -float(phase["diff_us"])
    ci = phase.get("ci_us")
    interval = None if ci is None else [-ci[1], -ci[0]]
    if phase.get("verdict") != FASTER:
        outcome = "did not materialize"
    elif measured >= MATERIALIZED_SHARE * predicted_us:
        outcome = "materialized"
    else:
        outcome = "partly"
    return {
        "predicted_us": predicted_us,
        "measured_us": round(measured, 3),
        "ci_us": interval,
        "outcome": outcome,
    }


@dataclass(frozen=True)
class RoundsShape:
    """How an interval was taken, said beside it (``basis`` in the JSON)."""

    rounds: int
    paired: bool

    def describe(self) -> str:
        if self.rounds <= 1:
            return "calls resampled within one run (no rounds: drift between runs not covered)"
        pairing = ", paired round by round" if self.paired else ""
        return f"{self.rounds} rounds and their calls resampled{pairing}"


__all__ = [
    "CONFIDENCE",
    "DEFAULT_RESAMPLES",
    "FASTER",
    "NO_DIFFERENCE",
    "SLOWER",
    "VERDICTS",
    "RoundsShape",
    "difference_interval",
    "family_confidence",
    "median_interval",
    "minimum_effect_us",
    "rounds_of",
    "saving_outcome",
    "verdict",
]

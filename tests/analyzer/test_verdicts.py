"""Intervals and verdicts: rounds resampled with their calls, paired when they ran side by side."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from grpc_overhead.analyzer import verdicts
from grpc_overhead.analyzer.compare import compare_phases
from grpc_overhead.analyzer.runs import round_labels, round_windows

pytestmark = pytest.mark.unit


def _rounds(rng: np.random.Generator, shifts: list[float], n: int = 400) -> list[np.ndarray]:
    """Calls of one cell per round: log-normal around 1 ms, each round moved by its drift."""
    return [1000.0 * rng.lognormal(0, 0.2, n) + shift for shift in shifts]


def test_a_shared_drift_cancels_when_paired_and_widens_when_not() -> None:
    rng = np.random.default_rng(7)
    drift = [0.0, 300.0, -200.0, 150.0]  # a neighbour's burst moves every cell of a round
    baseline = _rounds(rng, drift)
    other = _rounds(rng, [value + 40.0 for value in drift])  # 40 µs slower, truly
    low, high = verdicts.difference_interval(baseline, other, paired=True, seed=1)
    assert 0 < low < 40 < high < 100
    unpaired = verdicts.difference_interval(baseline, other, paired=False, seed=1)
    assert unpaired[0] < 0 < unpaired[1]  # the drift drowns it without pairing
    assert verdicts.verdict(40.0, low, high, 1000.0) == verdicts.SLOWER
    assert verdicts.verdict(-40.0, -high, -low, 1000.0) == verdicts.FASTER


def test_rounds_widen_the_interval_calls_alone_would_give() -> None:
    rng = np.random.default_rng(8)
    groups = _rounds(rng, [0.0, 250.0, -250.0])  # runs differ from start to start
    low, high = verdicts.median_interval(groups, seed=2)
    calls_only = verdicts.median_interval([np.concatenate(groups)], seed=2)
    assert high - low > 2 * (calls_only[1] - calls_only[0])


def test_a_difference_too_small_to_matter_is_no_verdict() -> None:
    # 1.5 µs, interval well clear of 0: below MIN_EFFECT_US, and 0.5 % of a 1 ms baseline
    assert verdicts.verdict(1.5, 1.0, 2.0, 100.0) == verdicts.NO_DIFFERENCE
    assert verdicts.verdict(5.0, 4.0, 6.0, 1000.0) == verdicts.NO_DIFFERENCE
    assert verdicts.verdict(15.0, 12.0, 18.0, 1000.0) == verdicts.SLOWER
    assert verdicts.verdict(None, None, None, None) == verdicts.NO_DIFFERENCE


def test_phases_are_one_family_so_an_a_a_comparison_stays_quiet() -> None:
    """Twenty phases of two identical cells, 40 times: with intervals at 95 % each, about
    two in three such comparisons would call some phase different; as a family, few do."""
    rng = np.random.default_rng(9)
    noisy = 0
    for _ in range(40):
        frames = [
            pd.DataFrame({f"p{k}_us": 100.0 * rng.lognormal(0, 0.3, 150) for k in range(20)})
            for _ in range(2)
        ]
        deltas = compare_phases(*frames, phases=tuple(f"p{k}" for k in range(20)), resamples=300)
        assert deltas[0].confidence == pytest.approx(1 - 0.05 / 20)
        noisy += any(delta.verdict != verdicts.NO_DIFFERENCE for delta in deltas)
    assert noisy <= 6


def test_calls_are_given_their_round_by_the_gaps_between_rounds() -> None:
    second = 1_000_000_000
    windows = [(10 * second, 12 * second), (20 * second, 22 * second), (30 * second, 31 * second)]
    frame = pd.DataFrame(
        {"call_start_ns": [10 * second, 12 * second + 5, 19 * second, 22 * second, 30 * second + 1]}
    )
    assert list(round_labels(frame, windows)) == [0, 0, 1, 1, 2]
    assert round_labels(frame, []) is None
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b"],
            "rounds": [
                '[{"started_ns": 1, "ended_ns": 2}, {"started_ns": 5, "ended_ns": 6}]',
                '[{"started_ns": 1, "ended_ns": 2}]',
            ],
        }
    )
    assert round_windows(runs, "a") == [(1, 2), (5, 6)]
    assert round_windows(runs, "b") == []  # one round: nothing to split
    assert round_windows(runs, "missing") == []


def test_a_weighted_median_is_the_median_of_the_calls_it_stands_for() -> None:
    """A call of weight w counts as w calls: the lower median of the replicated sample."""
    rng = np.random.default_rng(11)
    values = rng.lognormal(0, 0.5, 301) * 1000
    weights = rng.choice([1.0, 10.0, 100.0], values.size)
    replicated = np.sort(np.repeat(values, weights.astype(int)))
    assert verdicts.median(values, weights) == replicated[(replicated.size - 1) // 2]
    assert verdicts.median(values) == np.median(values)
    # weights of 1 are no weights: the plain path, the plain median
    groups, weighted = verdicts.weighted_rounds_of(values, np.ones(values.size), None)
    assert weighted is None and np.array_equal(groups[0], values)
    # a weight that is no number above 0 counts 1
    _, weighted = verdicts.weighted_rounds_of(
        np.array([1.0, 2.0, 3.0]), np.array([np.nan, -5.0, 4.0]), None
    )
    assert weighted is not None and list(weighted[0]) == [1.0, 1.0, 4.0]


def _tail_sampled(values: np.ndarray, rate: float) -> pd.DataFrame:
    """Tail-aware sampling's keep: the slowest 5 % with weight 1, the rest one in
    1 / rate with weight 1 / rate (deterministically: every n-th)."""
    slow = values >= np.quantile(values, 0.95)
    every = round(1 / rate)
    base = ~slow & (np.arange(values.size) % every == 0)
    kept = slow | base
    return pd.DataFrame({"total_us": values[kept], "weight": np.where(slow, 1.0, every)[kept]})


def test_a_tail_sampled_run_compares_as_the_calls_it_stands_for() -> None:
    """The same service measured twice, once keeping every call and once tail-sampled: the
    stored calls alone lean to the slow ones (the median 'slower' by a quarter), the
    weights make the two the same calls, no measurable difference."""
    rng = np.random.default_rng(12)
    every_call = pd.DataFrame({"total_us": 1000 * rng.lognormal(0, 0.3, 20_000)})
    sampled = _tail_sampled(1000 * rng.lognormal(0, 0.3, 20_000), rate=0.1)
    assert len(sampled) < 0.2 * 20_000
    [unweighted] = compare_phases(every_call, sampled.drop(columns="weight"), ("total",))
    assert unweighted.verdict == verdicts.SLOWER and unweighted.diff_us > 100
    [weighted] = compare_phases(every_call, sampled, ("total",))
    assert weighted.verdict == verdicts.NO_DIFFERENCE, weighted
    assert abs(weighted.diff_us) < 25
    assert weighted.other_calls == pytest.approx(20_000, rel=0.02)
    assert weighted.ci_low_us < 0 < weighted.ci_high_us
    # and a true shift still shows through the weights
    shifted = sampled.assign(total_us=sampled["total_us"] + 80)
    [moved] = compare_phases(every_call, shifted, ("total",))
    assert moved.verdict == verdicts.SLOWER and moved.ci_low_us < 80 < moved.ci_high_us


def test_a_cells_phase_summary_weighs_its_calls() -> None:
    from grpc_overhead.analyzer.runs import phase_summary

    rng = np.random.default_rng(13)
    sampled = _tail_sampled(1000 * rng.lognormal(0, 0.3, 20_000), rate=0.1)
    summary = phase_summary(sampled, ("total",))["total"]
    replicated = np.sort(np.repeat(sampled["total_us"], sampled["weight"].astype(int)))
    assert summary["p50_us"] == pytest.approx(replicated[(replicated.size - 1) // 2], abs=1e-3)
    assert summary["calls"] == replicated.size
    assert summary["mean_us"] == pytest.approx(replicated.mean())
    low, high = summary["ci_us"]
    assert low < summary["p50_us"] < high
    plain = phase_summary(sampled.drop(columns="weight"), ("total",))["total"]
    assert plain["calls"] == len(sampled) and plain["p50_us"] > summary["p50_us"] + 100

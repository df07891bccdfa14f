"""The weighted aggregates (``analyzer.weighted``) against the engine's unweighted ones
where every weight is 1, and against numpy's weighted fit and a replicated sample where
weights differ: a call of weight w must count as w calls of the same values."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from grpc_overhead.analyzer import weighted
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit


def _rows(pairs: list[tuple[float | None, float | None, float]]) -> str:
    """A relation of (x, y, weight, subset) from literal rows."""
    values = ", ".join(
        f"({'NULL' if x is None else repr(x)}, {'NULL' if y is None else repr(y)}, {w!r},"
        f" {index % 3})"
        for index, (x, y, w) in enumerate(pairs)
    )
    return (
        "(SELECT x, y, weight, subset FROM values("
        "'x Nullable(Float64), y Nullable(Float64), weight Float64, subset UInt8', "
        f"{values}))"
    )


#: Where a row has both x and y: the rows a line is fitted over.
DEFINED = "x IS NOT NULL AND y IS NOT NULL"


def _one(store, sql: str):
    return store.query(sql, readonly=True).iloc[0]


def _pairs(rng: random.Random, count: int) -> list[tuple[float, float]]:
    return [
        (x, 40.0 + 3.0 * x + rng.gauss(0, 5)) for x in (rng.uniform(0, 20) for _ in range(count))
    ]


def test_with_every_weight_1_each_is_the_engine_aggregate(store):
    rng = random.Random(5)
    pairs = [(x, y, 1.0) for x, y in _pairs(rng, 400)] + [(None, 1.0, 1.0), (2.0, None, 1.0)]
    relation = _rows(pairs)
    row = _one(
        store,
        f"SELECT {weighted.sums('x', 'y', DEFINED)} AS moments,"
        " simpleLinearRegression(x, y) AS plain_fit,"
        f" {weighted.slope('moments')} AS slope, corr(x, y) AS plain_r,"
        f" {weighted.count('x')} AS calls, count(x) AS plain_calls,"
        f" {weighted.count_if('x > 10')} AS over, countIf(x > 10) AS plain_over,"
        f" {weighted.average_if('y', 'x > 10')} AS mean, avgIf(y, x > 10) AS plain_mean,"
        f" {weighted.quantiles('0.5, 0.99', 'y')} AS q, quantilesTDigest(0.5, 0.99)(y) AS plain_q,"
        f" {weighted.sums_by_subset('x', 'y', DEFINED, 3)} AS fits,"
        " simpleLinearRegressionResample(0, 3, 1)(x, y, subset) AS plain_fits"
        f" FROM {relation}",
    )
    slope, intercept, _, r = weighted.line(row["moments"])
    plain_slope, plain_intercept = (float(v) for v in _items(row["plain_fit"]))
    assert slope == pytest.approx(plain_slope, rel=1e-9)
    assert float(row["slope"]) == pytest.approx(plain_slope, rel=1e-9)
    assert intercept == pytest.approx(plain_intercept, rel=1e-9)
    assert r == pytest.approx(float(row["plain_r"]), rel=1e-9)
    assert (int(row["calls"]), int(row["over"])) == (
        int(row["plain_calls"]),
        int(row["plain_over"]),
    )
    assert float(row["mean"]) == pytest.approx(float(row["plain_mean"]), rel=1e-12)
    assert list(row["q"]) == pytest.approx(list(row["plain_q"]), rel=1e-9)
    for ours, theirs in zip(row["fits"], row["plain_fits"], strict=True):
        assert list(weighted.line(ours)[:2]) == pytest.approx(
            [float(v) for v in _items(theirs)], rel=1e-9
        )


def test_a_call_of_weight_w_counts_as_w_calls(store):
    """Weights 1 and 7 against the same rows replicated 7 times, unweighted; and the fit
    against numpy's weighted least squares."""
    rng = random.Random(6)
    pairs = _pairs(rng, 300)
    weights = [7.0 if index % 5 else 1.0 for index in range(len(pairs))]
    replicated = [
        (x, y, 1.0) for (x, y), w in zip(pairs, weights, strict=True) for _ in range(int(w))
    ]
    with_weights = _rows([(x, y, w) for (x, y), w in zip(pairs, weights, strict=True)])
    select = (
        f"SELECT {weighted.sums('x', 'y', DEFINED)} AS moments,"
        f" {weighted.count()} AS calls, {weighted.count_if('x > 10')} AS over,"
        f" {weighted.average_if('y', 'x > 10')} AS mean,"
        f" {weighted.quantile('0.9', 'y')} AS p90 FROM "
    )
    ours, truth = _one(store, select + with_weights), _one(store, select + _rows(replicated))
    assert int(ours["calls"]) == len(replicated) == int(truth["calls"])
    assert int(ours["over"]) == int(truth["over"])
    assert float(ours["mean"]) == pytest.approx(float(truth["mean"]), rel=1e-9)
    ours_line, truth_line = weighted.line(ours["moments"]), weighted.line(truth["moments"])
    assert ours_line == pytest.approx(truth_line, rel=1e-9)
    x, y = (np.array(values) for values in zip(*pairs, strict=True))
    slope, intercept = np.polyfit(x, y, 1, w=np.sqrt(weights))
    assert list(ours_line[:2]) == pytest.approx([slope, intercept], rel=1e-9)
    exact_p90 = np.sort(y.repeat(np.array(weights, dtype=int)))[int(0.9 * (len(replicated) - 1))]
    assert float(ours["p90"]) == pytest.approx(exact_p90, rel=0.02)


def test_a_line_needs_a_spread_of_x(store):
    row = _one(
        store,
        f"SELECT {weighted.sums('x', 'y', DEFINED)} AS moments,"
        f" {weighted.slope('moments')} AS slope"
        f" FROM {_rows([(3.0, 1.0, 2.0)] * 5)}",
    )
    assert math.isnan(weighted.line(row["moments"])[0])
    assert not math.isfinite(float(row["slope"]))


def test_a_line_over_no_call_is_nan_not_null(store):
    """Every x NULL, and a subset with no row (subset 2 of 3 here): NaN, as the engine's
    regression answers, never NULL (which a caller's float() cannot read)."""
    nothing = _rows([(None, 1.0, 1.0), (None, 2.0, 5.0), (1.0, None, 1.0)])
    row = _one(store, f"SELECT {weighted.sums('x', 'y', DEFINED)} AS moments FROM {nothing}")
    slope, intercept, _, r = weighted.line(row["moments"])
    assert math.isnan(slope) and math.isnan(intercept) and math.isnan(r)
    assert math.isnan(weighted.line([])[0]) and math.isnan(weighted.line(None)[0])
    two_subsets = _rows([(1.0, 2.0, 1.0), (2.0, 4.0, 1.0), (None, 1.0, 1.0)] * 2)
    row = _one(
        store, f"SELECT {weighted.sums_by_subset('x', 'y', DEFINED, 3)} AS fits FROM {two_subsets}"
    )
    slopes = [weighted.line(moments)[0] for moments in row["fits"]]
    assert len(slopes) == 3 and sum(math.isnan(slope) for slope in slopes) >= 1
    assert all(math.isnan(slope) or slope == pytest.approx(2.0) for slope in slopes)


def test_line_from_moments_is_the_weighted_least_squares_line():
    rng = random.Random(8)
    pairs = _pairs(rng, 200)
    weights = [rng.choice((1.0, 100.0)) for _ in pairs]
    moments = {suffix: 0.0 for suffix in weighted.MOMENTS}
    for (x, y), w in zip(pairs, weights, strict=True):
        for suffix, value in (
            ("w", 1),
            ("wx", x),
            ("wy", y),
            ("wxx", x * x),
            ("wxy", x * y),
            ("wyy", y * y),
        ):
            moments[suffix] += w * value
    slope, intercept, variance, correlation = weighted.line(list(moments.values()))
    x, y = (np.array(values) for values in zip(*pairs, strict=True))
    assert [slope, intercept] == pytest.approx(
        list(np.polyfit(x, y, 1, w=np.sqrt(weights))), rel=1e-9
    )
    assert variance > 0 and 0.9 < correlation <= 1.0
    same = dict(moments)
    same["wxx"] = same["wx"] ** 2 / same["w"]  # no spread of x
    assert math.isnan(weighted.line(list(same.values()))[0])


def _items(value) -> list:
    return list(value.values()) if isinstance(value, dict) else list(value)


def test_a_slope_names_its_moments_once():
    """The engine writes an aggregate's alias out at every reference: ten references to
    each of six fits doubled a findings query's time (``weighted.slope``)."""
    assert weighted.slope("fit__moments").count("fit__moments") == 1

"""Aggregates over per-call rows where each call counts as the calls it stands for under
sampling (``weight``: ``result_columns.CALL_WEIGHT``): counts, means, quantiles and
least-squares lines that estimate every call made, not the kept ones.

Under tail-aware sampling the kept calls are not a fair sample: the slow and failed ones
are all kept (weight 1), the rest one in a hundred (weight 100). Any figure over them
unweighted leans towards the slow calls. With every weight 1 (no sampling, and every
source without weights) each helper is the plain aggregate: the same t-digest, the same
line.

The engine's ``simpleLinearRegression``, ``varPop`` and ``corr`` take no weights: a line
is weighted least squares over the weighted moments below, which are sums, so they
aggregate as states (``sumIfState``) and merge across grouping sets, and resample by
subset (``sumResample``) like any sum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: The moments of a fit: (suffix, what is summed with weight ``w`` over x and y).
MOMENTS: tuple[tuple[str, str], ...] = (
    ("w", "weight"),
    ("wx", "weight * {x}"),
    ("wy", "weight * {y}"),
    ("wxx", "weight * {x} * {x}"),
    ("wxy", "weight * {x} * {y}"),
    ("wyy", "weight * {y} * {y}"),
)

#: Below this share of the mean's square, x's spread is rounding, not sizes that differ:
#: one size only, no line to fit.
_NO_SPREAD = 1e-12


def moment_sums(x: str, y: str, defined: str) -> list[tuple[str, str]]:
    """(suffix, ``sumIf`` arguments) for each moment over the rows where ``defined``."""
    return [
        (suffix, f"{summed.format(x=f'({x})', y=f'({y})')}, {defined}")
        for suffix, summed in MOMENTS
    ]


def line(row: Mapping[str, Any], prefix: str) -> tuple[float, float, float, float]:
    """(slope, intercept, x variance, correlation) from the moments ``{prefix}_{suffix}``
    in ``row``; NaN slope, intercept and correlation where x has no spread (one size)
    or there is no call, a NaN correlation where y has none."""
    w, wx, wy, wxx, wxy, wyy = (float(row[f"{prefix}_{suffix}"] or 0) for suffix, _ in MOMENTS)
    if w <= 0:
        return math.nan, math.nan, 0.0, math.nan
    mean_x, mean_y = wx / w, wy / w
    var_x = wxx / w - mean_x * mean_x
    var_y = wyy / w - mean_y * mean_y
    covariance = wxy / w - mean_x * mean_y
    if var_x <= _NO_SPREAD * max(mean_x * mean_x, 1.0):
        return math.nan, math.nan, 0.0, math.nan
    slope = covariance / var_x
    spread_y = var_y > _NO_SPREAD * max(mean_y * mean_y, 1.0)
    if not spread_y:
        return slope, mean_y - slope * mean_x, var_x, math.nan
    correlation = max(-1.0, min(1.0, covariance / math.sqrt(var_x * var_y)))
    return slope, mean_y - slope * mean_x, var_x, correlation


#: A call's weight in whole calls, what the weighted t-digest and ``sumMap`` take.
WHOLE = "toUInt64(round(weight))"


def count(value: str = "") -> str:
    """The calls (where ``value`` is not NULL): ``count()`` / ``count(value)`` weighted."""
    if not value:
        return "toUInt64(round(sum(weight)))"
    return f"toUInt64(round(sum(if(({value}) IS NULL, 0., weight))))"


def count_if(condition: str) -> str:
    """``countIf(condition)`` weighted."""
    return f"toUInt64(round(sumIf(weight, {condition})))"


def average_if(value: str, condition: str) -> str:
    """``avgIf(value, condition)`` weighted."""
    return f"avgWeightedIf({value}, weight, {condition})"


def quantiles(levels: str, value: str, condition: str = "") -> str:
    """``quantilesTDigest(levels)(value)`` (``...If`` with ``condition``) weighted."""
    if condition:
        return f"quantilesTDigestWeightedIf({levels})({value}, {WHOLE}, {condition})"
    return f"quantilesTDigestWeighted({levels})({value}, {WHOLE})"


def quantile(level: str, value: str, condition: str = "") -> str:
    """``quantileTDigest(level)(value)`` (``...If`` with ``condition``) weighted."""
    if condition:
        return f"quantileTDigestWeightedIf({level})({value}, {WHOLE}, {condition})"
    return f"quantileTDigestWeighted({level})({value}, {WHOLE})"


def quantile_by_subset(level: str, value: str, subsets: int) -> str:
    """``quantileTDigestResample(level, 0, subsets, 1)(value, subset)`` weighted."""
    return f"quantileTDigestWeightedResample({level}, 0, {subsets}, 1)({value}, {WHOLE}, subset)"


def _sums(x: str, y: str, sum_function: str) -> dict[str, str]:
    """The weighted moments over the rows where neither x nor y is NULL. Never NULL
    themselves (a sum over no value is 0, so a line over no call is NaN, as the engine's
    own regression says, not NULL): a row without x or y weighs 0."""
    both = f"if(({x}) IS NULL OR ({y}) IS NULL, 0., weight)"
    sums = {}
    for suffix, summed in MOMENTS:  # each starts with "weight": 0 unless x and y are set
        rest = summed.removeprefix("weight").format(x=f"ifNull({x}, 0.)", y=f"ifNull({y}, 0.)")
        sums[suffix] = f"{sum_function}({both}{rest})"
    return sums


def _line_sql(m: dict[str, str]) -> str:
    covariance = f"({m['w']} * {m['wxy']} - {m['wx']} * {m['wy']})"
    slope = f"{covariance} / ({m['w']} * {m['wxx']} - {m['wx']} * {m['wx']})"
    return f"tuple({slope}, ({m['wy']} - ({slope}) * {m['wx']}) / {m['w']})"


def fit(x: str, y: str) -> str:
    """``simpleLinearRegression(x, y)`` weighted: a tuple (slope, intercept), NaN or
    infinite where x has no spread."""
    return _line_sql(_sums(x, y, "sum"))


def fit_by_subset(x: str, y: str, subsets: int) -> str:
    """``simpleLinearRegressionResample(0, subsets, 1)(x, y, subset)`` weighted: an array
    of (slope, intercept) tuples, one per subset."""
    sums = _sums(x, y, f"sumResample(0, {subsets}, 1)")
    sums = {suffix: f"{summed[:-1]}, subset)" for suffix, summed in sums.items()}
    names = {suffix: f"_{suffix}" for suffix in sums}
    return (
        f"arrayMap(({', '.join(names.values())}) -> {_line_sql(names)}, "
        + ", ".join(sums[suffix] for suffix in names)
        + ")"
    )


def correlation(x: str, y: str) -> str:
    """``corr(x, y)`` weighted."""
    m = _sums(x, y, "sum")
    covariance = f"({m['w']} * {m['wxy']} - {m['wx']} * {m['wy']})"
    spread_x = f"({m['w']} * {m['wxx']} - {m['wx']} * {m['wx']})"
    spread_y = f"({m['w']} * {m['wyy']} - {m['wy']} * {m['wy']})"
    return f"{covariance} / sqrt({spread_x} * {spread_y})"

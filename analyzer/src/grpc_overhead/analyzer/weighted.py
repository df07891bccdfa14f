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
aggregate as states (``sumForEachState``) and merge across grouping sets, and resample
by subset (``sumForEachResample``) like any sum; the line itself is computed from them
in Python (``line``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: The moments of a line, in the order ``moments`` gives them: the sums, weighted, of 1,
#: x, y, x², xy and y².
MOMENTS = ("w", "wx", "wy", "wxx", "wxy", "wyy")

#: Below this share of the mean's square, x's spread is rounding, not sizes that differ:
#: one size only, no line to fit.
_NO_SPREAD = 1e-12


def moments(x: str, y: str, defined: str) -> str:
    """SQL: one row's weighted moments (``MOMENTS``), an array of zeros where not
    ``defined``. Summed element-wise (``sumForEach``, as states too, by subset with
    ``-Resample``: ``sums``, ``sums_by_subset``) they give ``line``. x and y are written
    once each (a lambda's arguments): a query with many fits stays short, and the engine's
    analysis of it quick."""
    return (
        "arrayMap((w, x, y) -> [w, w * x, w * y, w * x * x, w * x * y, w * y * y],"
        f" [if({defined}, weight, 0.)], [if({defined}, ifNull(toFloat64({x}), 0.), 0.)],"
        f" [if({defined}, ifNull(toFloat64({y}), 0.), 0.)])[1]"
    )


def sums(x: str, y: str, defined: str) -> str:
    """SQL: the moments summed over the rows (``[]`` over no row)."""
    return f"sumForEach({moments(x, y, defined)})"


def sums_by_subset(x: str, y: str, defined: str, subsets: int) -> str:
    """SQL: the moments summed per ``subset`` (0 .. subsets - 1): an array of ``sums``."""
    return f"sumForEachResample(0, {subsets}, 1)({moments(x, y, defined)}, subset)"


def slope(summed: str) -> str:
    """SQL: the line's slope from ``sums``' column ``summed`` (NaN or infinite where x has
    no spread): what a query shown to a user reads beside the moments.

    ``summed`` is named once, through a lambda: where it is the alias of the aggregate
    in the same query, the engine writes the whole aggregate out at every reference,
    and ten references to six fits took a findings query from 1.2 s to 2.3 s."""
    m = {name: f"m[{index}]" for index, name in enumerate(MOMENTS, start=1)}
    fit = (
        f"({m['w']} * {m['wxy']} - {m['wx']} * {m['wy']})"
        f" / ({m['w']} * {m['wxx']} - {m['wx']} * {m['wx']})"
    )
    return f"arrayMap(m -> {fit}, [{summed}])[1]"


def line(summed: Sequence[float] | None) -> tuple[float, float, float, float]:
    """(slope, intercept, x variance, correlation) from ``sums``' moments: weighted least
    squares. NaN slope, intercept and correlation where x has no spread (one size) or
    there is no call, a NaN correlation where y has none."""
    values = [float(v or 0) for v in (summed if summed is not None else ())]
    if len(values) != len(MOMENTS) or values[0] <= 0:
        return math.nan, math.nan, 0.0, math.nan
    w, wx, wy, wxx, wxy, wyy = values
    mean_x, mean_y = wx / w, wy / w
    var_x = wxx / w - mean_x * mean_x
    var_y = wyy / w - mean_y * mean_y
    covariance = wxy / w - mean_x * mean_y
    if var_x <= _NO_SPREAD * max(mean_x * mean_x, 1.0):
        return math.nan, math.nan, 0.0, math.nan
    fitted = covariance / var_x
    spread_y = var_y > _NO_SPREAD * max(mean_y * mean_y, 1.0)
    if not spread_y:
        return fitted, mean_y - fitted * mean_x, var_x, math.nan
    correlation = max(-1.0, min(1.0, covariance / math.sqrt(var_x * var_y)))
    return fitted, mean_y - fitted * mean_x, var_x, correlation


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

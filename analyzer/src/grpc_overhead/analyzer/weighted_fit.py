"""A least-squares line through per-call rows where each call counts as the calls it
stands for under sampling (``weight``: ``result_columns.CALL_WEIGHT``).

The engine's ``simpleLinearRegression``, ``varPop`` and ``corr`` take no weights, and
under tail-aware sampling the kept calls are not a fair sample: the slow ones are all
kept (weight 1), the rest one in a hundred (weight 100). A fit over them unweighted
leans towards the slow calls. Weighted least squares over the weighted moments below
estimates the line through every call made; with every weight 1 it is the ordinary fit.

The moments are sums, so they aggregate as states (``sumIfState``) and merge across
grouping sets, as the unweighted functions did.
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

"""A breakdown's per-phase aggregates over ``per_call_sql`` rows, in the two forms it takes.

* **States** (``state_aggregates``, then ``merged_aggregates`` a level up): what the
  rollups store, so that a breakdown can merge settled minutes with calls computed raw.
* **Finished** (``finished_aggregates``): the same figures in one aggregation, for a
  breakdown with nothing to merge (no settled minutes). Merging a group's one state does
  not change it, so the quantiles and means are the same to the last bit; it takes about
  two thirds of the time (100 calls: 0.57 s against 0.88 s), because the engine analyzes
  and passes up 108 states before it merges them.

Every call is weighted by the calls it stands for (``weight``: 1 unless sampled).
"""

from __future__ import annotations

from collections.abc import Sequence

from grpc_overhead.analyzer.result_columns import (
    ALL_PHASES,
    QUANTILE_LEVELS,
    QUANTILE_STATE_FUNCTION,
    QUANTILE_WEIGHT,
)


def _operands(name: str) -> tuple[str, str]:
    """A phase's value (ns, Float64) and whether it is defined (UInt8)."""
    return f"toFloat64({name}_value)", f"toUInt8({name}_defined)"


def state_aggregates(
    *, empty: bool = False, finished_at: str | None = None, phases: Sequence[str] = ALL_PHASES
) -> list[str]:
    """Per phase: the quantile state (``{name}_q``), the sum (``{name}_sum``, ns) and the
    count of defined values (``{name}_calls``), weighted.

    ``empty``: the same columns over no value (a rollup's watermark row).
    ``finished_at``: the quantiles at these levels instead of the state, for a reader
    with nothing to merge (why: the module's docstring).
    """
    function = f"If({finished_at})" if finished_at else f"IfState({QUANTILE_LEVELS})"
    aggregates = []
    for name in phases:
        value, defined = _operands(name)
        weight, whole = "weight", QUANTILE_WEIGHT
        if empty:
            value, defined, weight, whole = "toFloat64(0)", "toUInt8(0)", "1.0", "toUInt64(1)"
        aggregates += [
            f"{QUANTILE_STATE_FUNCTION}{function}({value}, {whole}, {defined}) AS {name}_q",
            f"sumIf({value} * {weight}, {defined}) AS {name}_sum",
            f"sumIf({weight}, {defined}) AS {name}_calls",
        ]
    return aggregates


def state_columns() -> list[str]:
    """The columns ``state_aggregates`` names, in its order (the rollup table's too)."""
    return [f"{name}_{part}" for name in ALL_PHASES for part in ("q", "sum", "calls")]


def merged_aggregates() -> list[str]:
    """Per phase, over rows of ``state_aggregates``: ``{name}_quantiles`` (ns, at
    ``QUANTILE_LEVELS``), ``{name}_mean`` (ns) and ``{name}_defined`` (calls, weighted)."""
    merged = []
    for name in ALL_PHASES:
        merged += [
            f"{QUANTILE_STATE_FUNCTION}IfMerge({QUANTILE_LEVELS})({name}_q) AS {name}_quantiles",
            f"sum({name}_sum) / sum({name}_calls) AS {name}_mean",
            f"toUInt64(round(sum({name}_calls))) AS {name}_defined",
        ]
    return merged


def finished_aggregates() -> tuple[list[str], list[str]]:
    """(aggregates, columns): ``merged_aggregates``' columns computed from ``per_call_sql``
    rows in one aggregation, and the columns that select them in its order a level up.
    The count is named ``{name}_phase_calls`` in the aggregation, apart from the
    ``{name}_defined`` it counts (an alias would shadow the column it is computed from)."""
    aggregates, columns = [], []
    for name in ALL_PHASES:
        value, defined = _operands(name)
        aggregates += [
            f"{QUANTILE_STATE_FUNCTION}If({QUANTILE_LEVELS})({value}, {QUANTILE_WEIGHT},"
            f" {defined}) AS {name}_quantiles",
            f"sumIf({value} * weight, {defined}) / sumIf(weight, {defined}) AS {name}_mean",
            f"toUInt64(round(sumIf(weight, {defined}))) AS {name}_phase_calls",
        ]
        columns += [f"{name}_quantiles", f"{name}_mean", f"{name}_phase_calls AS {name}_defined"]
    return aggregates, columns

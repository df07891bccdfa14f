"""A breakdown's per-phase aggregates over ``per_call_sql`` rows, in the two forms it takes.

* **States** (``state_aggregates``, then ``breakdown_figures`` a level up): what the
  rollups store, so that a breakdown can merge settled minutes with calls computed raw.
* **Finished** (``state_aggregates(finished_at=levels)``): the quantiles themselves, for
  a reader with nothing to merge (no settled minute in its range). Merging a group's one
  state does not change it, so the figures are the same to the last bit, in about 0.8x
  the time: the engine analyzes and passes up 108 states before it merges them
  (``docs/notes/issue-28.md``, fourth session).

Every call is weighted by the calls it stands for (``weight``: 1 unless sampled).
"""

from __future__ import annotations

from grpc_overhead.analyzer.result_columns import (
    ALL_PHASES,
    QUANTILE_LEVELS,
    QUANTILE_STATE_FUNCTION,
    QUANTILE_WEIGHT,
)


def _operands(name: str) -> tuple[str, str]:
    """A phase's value (ns, Float64) and whether it is defined (UInt8)."""
    return f"toFloat64({name}_value)", f"toUInt8({name}_defined)"


def state_aggregates(*, empty: bool = False, finished_at: str | None = None) -> list[str]:
    """Per phase: the quantile state (``{name}_q``), the sum (``{name}_sum``, ns) and the
    count of defined values (``{name}_calls``), weighted.

    ``empty``: the same columns over no value (a rollup's watermark row).
    ``finished_at``: the quantiles at these levels instead of the state (``{name}_q`` an
    array), for a reader with nothing to merge.
    """
    function = f"If({finished_at})" if finished_at else f"IfState({QUANTILE_LEVELS})"
    aggregates = []
    for name in ALL_PHASES:
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


def breakdown_figures(*, finished: bool = False) -> list[str]:
    """Per phase, over rows of ``state_aggregates``: ``{name}_quantiles`` (ns, at
    ``QUANTILE_LEVELS``), ``{name}_mean`` (ns) and ``{name}_defined`` (calls, weighted).
    ``finished``: over the one row per group of ``state_aggregates(finished_at=...)``, so
    the columns only take their names (not aggregates: the query has no GROUP BY)."""
    figures = []
    for name in ALL_PHASES:
        if finished:
            quantiles, total, calls = f"{name}_q", f"{name}_sum", f"{name}_calls"
        else:
            quantiles = f"{QUANTILE_STATE_FUNCTION}IfMerge({QUANTILE_LEVELS})({name}_q)"
            total, calls = f"sum({name}_sum)", f"sum({name}_calls)"
        figures += [
            f"{quantiles} AS {name}_quantiles",
            f"{total} / {calls} AS {name}_mean",
            f"toUInt64(round({calls})) AS {name}_defined",
        ]
    return figures

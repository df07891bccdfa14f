"""The Phases page's answers: each phase's distribution, and what the slowest calls spend time on.

* ``phase_quantiles``: per phase, a t-digest's quantiles at ``LEVELS`` (an
  ECDF of 100+ points, log-scale friendly) plus count and mean, in one pass;
  ``statistics`` turns it into the p50/p90/p99/mean table (the same
  ``quantilesTDigest`` as ``report``, so the numbers agree with it).
* ``phase_histogram``: one phase's histogram in log-spaced bins, binned in SQL.
* ``tail``: the mean phase vector of the slowest calls (``total`` at or above
  its p99) next to the calls around the median (p45..p55), and where the
  difference goes. Exact thresholds (``quantilesExact``), since the slowest
  1 % of 100 calls is one call and a sketch could miss it.

Results are bounded by phases x levels or bins, never by calls.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights.rows import (
    CLOCKLESS_PHASE_NAMES,
    STACKED_PHASES,
    parameters,
    rows_for,
)
from grpc_overhead.analyzer.insights.settled import phase_states_sql
from grpc_overhead.analyzer.options import (
    CALL_FILTER,
    ROW_FILTER,
    TIME_FILTER,
    CallFilters,
    CallsOptions,
)
from grpc_overhead.analyzer.result_columns import DESIGN_PHASES, QUANTILE_STATE_FUNCTION
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import IS_STREAM

#: The phases the page shows: the design's, then the server-side extras.
SHOWN_PHASES: tuple[str, ...] = (
    *DESIGN_PHASES,
    *(name for name in CLOCKLESS_PHASE_NAMES if name not in DESIGN_PHASES),
)

#: ECDF levels: every percent, plus the tails a latency reader looks at.
LEVELS: tuple[float, ...] = (
    0.001,
    0.005,
    *(round(k / 100, 2) for k in range(1, 100)),
    0.995,
    0.999,
)
TABLE_LEVELS = {"p50_us": 0.5, "p90_us": 0.9, "p99_us": 0.99}

QUANTILE_COLUMNS = ("phase", "level", "value_us", "calls", "mean_us")


def phase_quantiles(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """One row per (phase of ``SHOWN_PHASES``, level of ``LEVELS``): ``value_us``, and
    the phase's ``calls`` (where defined) and ``mean_us``. A phase no call defines
    has NaN values (its rows are kept, so a table can say "not recorded").

    Settled minutes come from the rollups' t-digest states (``settled``), so only
    the unsettled calls are merged and computed, as ``report`` does."""
    levels = ", ".join(repr(level) for level in LEVELS)
    sql, bound, rolled = phase_states_sql(store, filters, options, finished_at=levels)
    if rolled:
        columns = []
        for name in SHOWN_PHASES:
            columns += [
                f"{QUANTILE_STATE_FUNCTION}IfMerge({levels})({name}_q) AS {name}_q",
                f"sum({name}_calls) AS {name}_calls",
                f"sum({name}_sum) AS {name}_sum",
            ]
        sql = "SELECT\n    " + ",\n    ".join(columns) + f"\nFROM (\n{sql}\n)"
    row = store.query(sql, bound, readonly=True).iloc[0]
    records = []
    for name in SHOWN_PHASES:
        calls = int(row[f"{name}_calls"])
        quantiles = row[f"{name}_q"]
        mean = float(row[f"{name}_sum"]) / calls / 1000 if calls else math.nan
        for index, level in enumerate(LEVELS):
            value = float(quantiles[index]) / 1000 if calls else math.nan
            records.append((name, level, value, calls, mean))
    return pd.DataFrame.from_records(records, columns=list(QUANTILE_COLUMNS))


STATISTICS_COLUMNS = ("phase", "calls", "p50_us", "p90_us", "p99_us", "mean_us")


def statistics(quantiles: pd.DataFrame) -> pd.DataFrame:
    """The p50/p90/p99/mean table (``STATISTICS_COLUMNS``) from ``phase_quantiles``."""
    rows = []
    for name, group in quantiles.groupby("phase", sort=False):
        by_level = dict(zip(group["level"], group["value_us"], strict=True))
        row = {"phase": name, "calls": int(group["calls"].iloc[0])}
        row.update({column: by_level[level] for column, level in TABLE_LEVELS.items()})
        row["mean_us"] = float(group["mean_us"].iloc[0])
        rows.append(row)
    return pd.DataFrame(rows, columns=list(STATISTICS_COLUMNS))


HISTOGRAM_COLUMNS = ("bin", "lower_us", "upper_us", "calls", "share")
MAX_BINS = 200


def phase_histogram(
    store: Store,
    filters: CallFilters | None = None,
    phase: str = "total",
    low_us: float = 1.0,
    high_us: float = 1_000_000.0,
    bins: int = 40,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Calls per log-spaced bin of ``phase`` between ``low_us`` and ``high_us``.

    Latencies span decades, so equal widths on a log scale keep both the
    body and the tail readable. Values below ``low_us`` (including zero and
    negative ones, e.g. a skewed clock's one-way phase) count in the first
    bin, values above ``high_us`` in the last: every defined call is counted.
    Every bin is returned, empty ones with 0 calls. ``share`` is of the
    phase's defined calls.

    Where rollups hold settled minutes of the range, the counts are estimated
    from the phase's t-digest (the same sketch as the quantiles), not binned
    call by call: a picture of the distribution for the price of the rollups.
    """
    if phase not in CLOCKLESS_PHASE_NAMES:
        raise BadInput(f"unknown phase {phase!r}; expected one of {', '.join(SHOWN_PHASES)}")
    if not (0 < low_us < high_us) or not math.isfinite(high_us):
        raise BadInput(f"histogram range must satisfy 0 < low < high, not {low_us}..{high_us}")
    if not 1 <= bins <= MAX_BINS:
        raise BadInput(f"bins must be between 1 and {MAX_BINS}, not {bins}")
    source, bound, rolled = phase_states_sql(store, filters, options)
    if rolled:
        counts = _sketched_bins(store, source, bound, phase, low_us, high_us, bins)
        return _histogram(counts, low_us, high_us, bins)
    value = f"toFloat64({phase}_value) / 1000"
    index = (
        f"toUInt32(least(greatest(floor(log(greatest({value}, {{low:Float64}}) / {{low:Float64}})"
        " / log({high:Float64} / {low:Float64}) * {bins:UInt32}), 0.), {bins:UInt32} - 1.))"
    )
    rows, bound = rows_for(store, filters, options)
    sql = (
        f"SELECT {index} AS bin, {weighted.count()} AS calls\nFROM ({rows})\n"
        f"WHERE {phase}_defined\nGROUP BY bin ORDER BY bin"
    )
    found = store.query(
        sql,
        {**bound, "low": float(low_us), "high": float(high_us), "bins": int(bins)},
        readonly=True,
    )
    counts = np.zeros(bins, dtype="int64")
    for bin_index, calls in zip(found["bin"], found["calls"], strict=True):
        counts[int(bin_index)] = int(calls)
    return _histogram(counts, low_us, high_us, bins)


#: Levels a sketched histogram reads the t-digest at: each stands for 1/1,000 of the calls.
SKETCH_LEVELS = tuple(round((k + 0.5) / 1000, 4) for k in range(1000))


def _sketched_bins(
    store: Store,
    source: str,
    bound: dict,
    phase: str,
    low_us: float,
    high_us: float,
    bins: int,
) -> np.ndarray:
    """Calls per bin estimated from the phase's t-digest (rollups + raw states): each of
    ``SKETCH_LEVELS`` quantiles counts for a thousandth of the defined calls."""
    levels = ", ".join(repr(level) for level in SKETCH_LEVELS)
    sql = (
        f"SELECT {QUANTILE_STATE_FUNCTION}IfMerge({levels})({phase}_q) AS q,"
        f" sum({phase}_calls) AS calls FROM (\n{source}\n)"
    )
    row = store.query(sql, bound, readonly=True).iloc[0]
    calls = int(row["calls"])
    counts = np.zeros(bins, dtype="int64")
    if not calls:
        return counts
    values = np.asarray(row["q"], dtype="float64") / 1000
    ratio = np.log(np.maximum(values, low_us) / low_us) / np.log(high_us / low_us)
    index = np.clip(np.floor(ratio * bins), 0, bins - 1).astype("int64")
    per_level = np.bincount(index, minlength=bins) * calls / len(SKETCH_LEVELS)
    counts = np.floor(per_level).astype("int64")
    # Whole calls that add up to the phase's count: the largest remainders get the rest.
    short = calls - int(counts.sum())
    if short > 0:
        counts[np.argsort(counts - per_level)[:short]] += 1
    return counts


def _histogram(counts: np.ndarray, low_us: float, high_us: float, bins: int) -> pd.DataFrame:
    edges = np.geomspace(low_us, high_us, bins + 1)
    total = counts.sum()
    return pd.DataFrame(
        {
            "bin": np.arange(bins),
            "lower_us": edges[:-1],
            "upper_us": edges[1:],
            "calls": counts,
            "share": counts / total if total else np.zeros(bins),
        },
        columns=list(HISTOGRAM_COLUMNS),
    )


TAIL_COLUMNS = (
    "phase",
    "median_us",
    "slowest_us",
    "median_share",
    "slowest_share",
    "extra_us",
    "extra_share",
    "median_calls",
    "slowest_calls",
    "slowest_from_us",
)

#: The calls "around the median": total between these quantiles.
MEDIAN_BAND = (0.45, 0.55)
#: Added to a level so that a weighted exact quantile picks the rank an unweighted one
#: would (below one call's weight in a trillion calls).
_RANK_NUDGE = 1e-13


def tail(
    store: Store,
    filters: CallFilters | None = None,
    slowest: float = 0.01,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Per phase of ``STACKED_PHASES`` (plus ``total``): the mean over the slowest
    calls and over the calls around the median, and where the extra time goes.

    Thresholds are quantiles of ``total`` over every unary call with a client span
    (exact, weighted by the calls each stands for: the element at rank ``floor(level * n)``;
    a stream's duration is no latency to rank unary calls by: a few long streams would
    set the p99 above every unary call and leave the slowest band empty);
    the means are over the calls that record every event (so the phases add
    up to total): *slowest* = ``total`` >= the ``1 - slowest`` quantile (p99
    by default), *median* = ``total`` within p45..p55. ``extra_us`` = slowest - median,
    and ``extra_share`` its part of the extra ``total``: "of the 9 ms the
    slowest calls add, 80 % is server_queue". Empty when no call records
    every event. The thresholds come first, so only the calls of the two bands
    are merged and computed (``calls_source``'s ``keys``), not every call.
    """
    if not 0 < slowest < 0.5:
        raise BadInput(f"the slowest share must be between 0 and 0.5, not {slowest}")
    options = options or CallsOptions()
    means = [  # weighted: every call made, estimated under sampling
        f"avgWeighted({name}_value, weight) / 1000 AS {name}_us"
        for name in (*STACKED_PHASES, "total")
    ]
    # Thresholds from the client halves alone (total is the client span's
    # duration): two columns and no merging, so the tail costs one merged pass.
    client_totals = (
        "SELECT client_end_ns - client_start_ns AS total_ns, weight FROM (SELECT"
        " client_start_ns AS call_start_ns, client_start_ns, client_end_ns, service, method,"
        " run_id, toUInt64(round(greatest(client_sampling_weight, 1))) AS weight,"
        " client_service, server_service"
        f" FROM {options.calls} WHERE {ROW_FILTER} AND client_start_ns != 0"
        f" AND client_end_ns != 0 AND NOT {IS_STREAM}) WHERE {TIME_FILTER} AND {CALL_FILTER}"
    )
    low, high = MEDIAN_BAND
    # Weighted (each client half counts as the calls it stands for under sampling); the
    # weighted quantile takes the first value whose running weight reaches ceil(level x
    # weight), ``quantilesExact`` the value of rank floor(level x n): nudged to agree.
    levels = {"low": low, "high": high, "tail": 1 - float(slowest)}
    bound = {**parameters(filters), **{k: v + _RANK_NUDGE for k, v in levels.items()}}
    found = store.query(
        "SELECT quantilesExactWeighted({low:Float64}, {high:Float64}, {tail:Float64})"
        "(total_ns, weight) AS t,"
        f" count() AS n FROM ({client_totals})",
        bound,
        readonly=True,
    ).iloc[0]
    if not int(found["n"]):
        return pd.DataFrame(columns=list(TAIL_COLUMNS))
    bound.update(zip(("t_low", "t_high", "t_tail"), (int(t) for t in found["t"]), strict=True))
    # Only the calls in the two bands (about 11 %) are merged and computed: their
    # client halves name them, before any merge.
    duration = "client_end_ns - client_start_ns"
    keys = (
        f"SELECT TraceId, ClientSpanId FROM {options.calls} WHERE {ROW_FILTER}"
        " AND client_start_ns != 0 AND client_end_ns != 0"
        f" AND ({duration} >= {{t_tail:Int64}}"
        f" OR ({duration} >= {{t_low:Int64}} AND {duration} <= {{t_high:Int64}}))"
    )
    rows, rows_bound = rows_for(store, filters, options, keys=keys)
    sql = (
        "SELECT multiIf(total_value >= {t_tail:Int64}, 'slowest',"
        " total_value >= {t_low:Int64} AND total_value <= {t_high:Int64}, 'median', '')"
        f" AS band,\n    {weighted.count()} AS calls,"
        " {t_tail:Int64} / 1000 AS slowest_from_us,\n    "
        + ",\n    ".join(means)
        + f"\nFROM ({rows})\n"
        "WHERE unattributed_defined AND band != ''\nGROUP BY band"
    )
    found = store.query(sql, {**bound, **rows_bound}, readonly=True)
    bands = {row["band"]: row for row in found.to_dict("records")}
    if "slowest" not in bands or "median" not in bands:
        return pd.DataFrame(columns=list(TAIL_COLUMNS))
    median, slow = bands["median"], bands["slowest"]
    extra_total = slow["total_us"] - median["total_us"]
    records = []
    for name in (*STACKED_PHASES, "total"):
        median_us, slowest_us = float(median[f"{name}_us"]), float(slow[f"{name}_us"])
        records.append(
            (
                name,
                median_us,
                slowest_us,
                median_us / median["total_us"] if median["total_us"] else math.nan,
                slowest_us / slow["total_us"] if slow["total_us"] else math.nan,
                slowest_us - median_us,
                (slowest_us - median_us) / extra_total if extra_total else math.nan,
                int(median["calls"]),
                int(slow["calls"]),
                float(slow["slowest_from_us"]),
            )
        )
    return pd.DataFrame.from_records(records, columns=list(TAIL_COLUMNS))

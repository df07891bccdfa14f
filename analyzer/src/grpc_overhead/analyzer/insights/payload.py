"""The Payload and compression page's answers: what each megabyte costs, per phase and algorithm.

* ``costs``, ``method_fits``, ``across_runs_fits``: per phase (and per compression
  algorithm; per method and run for ``method_fits``, the ones worth reading; per
  method across its runs for ``across_runs_fits``, where each run has one size), the
  least-squares line of the phase against the bytes it moves (weighted by the calls
  each stands for under sampling: ``weighted.line`` over moments summed in
  ClickHouse): its slope is the cost per MB
  (µs per 1,000,000 bytes), its intercept the fixed cost of a call.
* ``payload_sample``: a bounded, deterministic sample of calls (size and
  phases) for scatter plots: never every call.
* ``algorithms``: the algorithms side by side, end to end and per phase,
  as the seed article compares none, gzip, zstd, lz4 and snappy.

``costs`` and ``algorithms`` read one aggregate, ``by_algorithm``.

Sizes are the message sizes the instrumentation records
(``rpc.message.uncompressed_size``: the serialized protobuf, so *after* an
application-level codec such as the prediction service's zstd/lz4/snappy
blob and *before* gRPC's own gzip/deflate), summed over a call's messages.
The algorithm label is ``rows.ALGORITHM``: gRPC compression
(``grpc.compression``) and the service's payload codec
(``grpc_overhead.payload.codec``), both already ``grpc_calls`` columns.
"""

from __future__ import annotations

import math

import pandas as pd

from grpc_overhead.analyzer.analysis_cost import grouping_source
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights.rows import (
    STACKED_PHASES,
    halves,
    rows_for,
)
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_terms import phases_read
from grpc_overhead.analyzer.result_columns import (
    CONSECUTIVE_PHASES,
    QUANTILE_STATE_FUNCTION,
    QUANTILE_WEIGHT,
)
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.weighted import line, moments

BYTES_PER_MB = 1_000_000
REQUEST_BYTES = "request_uncompressed_bytes"
RESPONSE_BYTES = "response_uncompressed_bytes"

#: Which bytes a phase moves: the request's, the response's, or both (the
#: handler reads one and writes the other; total and overhead span both).
SIZE_BASIS: dict[str, str] = {
    "client_serialize": "request",
    "client_connect": "request",
    "request_network": "request",
    "server_dispatch": "request",
    "server_queue": "request",
    "request_deserialize": "request",
    "server_interceptors": "both",
    "processing": "both",
    "post_processing": "both",
    "response_serialize": "response",
    "response_network": "response",
    "client_dispatch": "response",
    "client_deserialize": "response",
    "total": "both",
    "network_overhead": "both",
}
BASIS_BYTES = {
    "request": REQUEST_BYTES,
    "response": RESPONSE_BYTES,
    "both": f"({REQUEST_BYTES} + {RESPONSE_BYTES})",
}
FITTED_PHASES: tuple[str, ...] = tuple(SIZE_BASIS)
assert set(CONSECUTIVE_PHASES) <= set(FITTED_PHASES)

#: The label of the fit over every algorithm together.
ALL = "(all)"

COST_COLUMNS = (
    "algorithm",
    "phase",
    "basis",
    "calls",
    "slope_us_per_mb",
    "intercept_us",
    "r2",
    "min_bytes",
    "max_bytes",
    "finding",
    "verdict",
)
METHOD_FIT_COLUMNS = ("service", "method", "run_id", *COST_COLUMNS)


def by_algorithm(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """Everything the page computes over every call, in one pass: one row per
    ``algorithm`` (``ALL`` first: every call together; then each algorithm,
    busiest first). Read it with ``costs`` and ``algorithms``.

    Merging a million unmerged call halves is the expensive part of a query,
    so the fits and the comparison share one; the calls are aggregated once, per
    (method, run, algorithm), into states that ``GROUPING SETS`` then merge.
    """
    # (function, parameters, arguments, name): aggregated once per (method, run,
    # algorithm) as states, then merged into every grouping set, so the million calls
    # are aggregated once however many views of them the page shows.
    aggregates: list[tuple[str, str, str, str]] = []
    for name in FITTED_PHASES:
        x = f"toFloat64({BASIS_BYTES[SIZE_BASIS[name]]})"
        y, defined = f"toFloat64({name}_value)", f"{name}_defined"
        # Weighted (``weight``: the calls each stands for under sampling): the fit is
        # weighted least squares over its moments (``weighted``).
        aggregates += [
            ("sumIf", "", f"weight, {defined}", f"{name}_calls"),
            ("countIf", "", defined, f"{name}_stored"),  # the evidence a fit rests on
            ("sumForEach", "", moments(x, y, defined), f"{name}_moments"),
            ("minIf", "", f"{x}, {defined}", f"{name}_min"),
            ("maxIf", "", f"{x}, {defined}", f"{name}_max"),
        ]
    compressed = ("request_compressed_bytes", "response_compressed_bytes")
    sent = ((REQUEST_BYTES, "request"), (RESPONSE_BYTES, "response"))
    aggregates += [
        ("sum", "", "weight", "calls"),
        ("count", "", "", "stored_calls"),
        ("avgWeighted", "", f"{REQUEST_BYTES}, weight", "request_bytes_mean"),
        ("avgWeighted", "", f"{RESPONSE_BYTES}, weight", "response_bytes_mean"),
        *(
            ("sumIf", "", f"{column} * weight, {column} > 0", f"{column}_sum")
            for column in compressed
        ),
        *(
            ("sumIf", "", f"{size} * weight, {side}_compressed_bytes > 0", f"{side}_sent_sum")
            for size, side in sent
        ),
        (
            f"{QUANTILE_STATE_FUNCTION}If",
            "(0.5, 0.99)",
            f"toFloat64(total_value) / 1000, {QUANTILE_WEIGHT}, total_defined",
            "q",
        ),
        # (total_calls: one of the fitted phases' counts above)
        ("avgWeightedIf", "", "total_value, weight, total_defined", "total_mean_ns"),
        ("sumIf", "", "weight, unattributed_defined", "calls_with_events"),
        *(
            ("avgWeightedIf", "", f"{name}_value, weight, unattributed_defined", f"{name}_ns")
            for name in STACKED_PHASES
        ),
    ]
    states = ",\n    ".join(
        f"{function}State{params}({arguments}) AS {name}_state"
        for function, params, arguments, name in aggregates
    )
    # Counts in whole calls: the calls made, estimated under sampling.
    counts = {"calls", "calls_with_events", *(f"{name}_calls" for name in FITTED_PHASES)}
    merged = [
        (
            f"toUInt64(round({function}Merge{params}({name}_state)))"
            if name in counts
            else f"{function}Merge{params}({name}_state)"
        )
        + f" AS {name}"
        for function, params, _, name in aggregates
    ]
    merged += [
        "request_compressed_bytes_sum / request_sent_sum AS request_compressed_ratio",
        "response_compressed_bytes_sum / response_sent_sum AS response_compressed_ratio",
        "total_mean_ns / 1000 AS total_mean_us",
        *(f"{name}_ns / 1000 AS {name}_us" for name in STACKED_PHASES),
    ]
    rows, bound = rows_for(store, filters, options, phases=phases_read(states))
    sql = (
        "SELECT if(grouping(algorithm) = 1, {all:String}, algorithm) AS label,"
        " multiIf(grouping(service) = 1, 'all', grouping(run_id) = 1, 'method_runs', 'method')"
        " AS scope, service, method, run_id, uniqExact(run_id) AS runs,"
        " arraySort(groupUniqArray(run_id)) AS run_ids,\n    "
        + ",\n    ".join(merged)
        + "\nFROM "
        + grouping_source(
            f"\nSELECT service, method, run_id, algorithm,\n    {states}\n"
            f"FROM ({rows})\n"
            "GROUP BY service, method, run_id, algorithm\n"
        )
        + "\n"
        "GROUP BY GROUPING SETS ((), (algorithm), (service, method, run_id),"
        " (service, method, run_id, algorithm), (service, method))\n"
        "ORDER BY scope, grouping(algorithm) DESC, calls DESC, service, method, run_id, label"
    )
    frame = store.query(sql, {**bound, "all": ALL}, readonly=True)
    frame = frame.rename(columns={"label": "algorithm"})
    return frame[frame["calls"] > 0].reset_index(drop=True)


def costs(frame: pd.DataFrame) -> pd.DataFrame:
    """Per (algorithm, phase of ``FITTED_PHASES``) (``COST_COLUMNS``): the least-squares
    fit ``phase_us = intercept_us + slope_us_per_mb * MB`` over the calls that
    define the phase, where MB is the phase's ``basis`` bytes / 1,000,000.

    ``algorithm`` is ``ALL`` for the fit over every call, then each algorithm.
    ``r2`` is the squared correlation (how much of the phase's spread the
    size explains). Where every call has the same size a slope means
    nothing: slope, intercept and r2 are NaN. ``finding`` and ``verdict``:
    ``verdict`` (whether the slope is a cost at all, and what to say). These fit
    every matching call together, whatever its method and run: read
    ``method_fits`` for fits a page may headline.
    """
    return _fits(frame[_scope(frame) == "all"], with_scope=False)


def method_fits(frame: pd.DataFrame) -> pd.DataFrame:
    """``costs`` per (service, method, run) (``METHOD_FIT_COLUMNS``): ``algorithm``
    ``ALL`` for each method and run's calls together, then per algorithm, busiest
    first. A fit over calls of different methods or runs mixes unlike calls (a
    large method with a fast run, a small one under load) and its slope can be
    anything, negative included: these are the fits a reader can trust, and
    ``verdict`` says which are findings."""
    return _fits(frame[_scope(frame) == "method"], with_scope=True)


def across_runs_fits(frame: pd.DataFrame) -> pd.DataFrame:
    """``method_fits`` over each method's calls of every run together, for the methods
    with calls in several runs (``run_id`` reads e.g. "(2 runs: large, small)").

    Where each run plays one payload size (the demo's scenarios do), no run alone has
    a size effect to fit, and only the runs together show what size costs; but what
    else differs between the runs (rate, load, settings) is in such a fit too, which
    is why a finding within one run is preferred (``headline``)."""
    several = frame[(_scope(frame) == "method_runs") & (frame["runs"] > 1)]
    several = several.assign(run_id=[_runs_label(list(ids)) for ids in several["run_ids"]])
    return _fits(several, with_scope=True)


def _runs_label(run_ids: list[str]) -> str:
    named = [run or "(no run id)" for run in run_ids]
    shown = ", ".join(named[:4]) + (f", +{len(named) - 4}" if len(named) > 4 else "")
    return f"({len(named)} runs: {shown})"


def headline(within: pd.DataFrame, across: pd.DataFrame) -> tuple[pd.Series | None, bool]:
    """(the fit a page headlines, whether it is one across runs) among one phase's fits
    over every algorithm: ``within`` from ``method_fits``, ``across`` from
    ``across_runs_fits``. The busiest finding within one method and run; else the
    busiest finding of a method across its runs; else the busiest fit of one method
    and run (no finding: its verdict says why); (None, False) without fits."""
    for candidates, is_across in (
        (within[within["finding"]], False),
        (across[across["finding"]], True),
        (within, False),
    ):
        if len(candidates):
            busiest = candidates.sort_values("calls", ascending=False, kind="stable")
            return busiest.iloc[0], is_across
    return None, False


def _scope(frame: pd.DataFrame) -> pd.Series:
    return frame["scope"] if "scope" in frame else pd.Series("all", index=frame.index)


def _fits(frame: pd.DataFrame, *, with_scope: bool) -> pd.DataFrame:
    records = []
    for row in frame.to_dict("records"):
        scope = (row["service"], row["method"], row["run_id"]) if with_scope else ()
        for name in FITTED_PHASES:
            calls, stored = int(row[f"{name}_calls"]), int(row[f"{name}_stored"])
            slope, intercept, _, corr = line(row[f"{name}_moments"])
            # Two sizes at least (min < max: no rounding of the moments makes one size a line).
            spread = stored > 1 and float(row[f"{name}_min"]) < float(row[f"{name}_max"])
            fitted = spread and math.isfinite(slope)
            if not fitted:
                slope = intercept = corr = math.nan
            r2 = corr * corr if fitted and math.isfinite(corr) else math.nan
            slope_us = slope * BYTES_PER_MB / 1000  # ns per byte -> µs per MB
            finding, said = verdict(slope_us, r2, stored)
            records.append(
                (
                    *scope,
                    row["algorithm"],
                    name,
                    SIZE_BASIS[name],
                    calls,
                    slope_us,
                    intercept / 1000,
                    r2,
                    float(row[f"{name}_min"]) if calls else math.nan,
                    float(row[f"{name}_max"]) if calls else math.nan,
                    finding,
                    said,
                )
            )
    columns = METHOD_FIT_COLUMNS if with_scope else COST_COLUMNS
    return pd.DataFrame.from_records(records, columns=list(columns))


#: Below this R² the size explains too little of a phase's spread for its slope to be
#: a cost: the slope is then shown as "no size effect measurable", never headlined.
MIN_R2 = 0.5


def verdict(slope_us_per_mb: float, r2: float, calls: int) -> tuple[bool, str]:
    """(is it a finding, what to say) about a fitted cost per MB.

    A finding needs a positive slope that explains at least ``MIN_R2`` of the
    spread. Otherwise the text says why there is none: one payload size, no
    size effect measurable (R² under ``MIN_R2``, e.g. "R² 0.01"), or larger
    payloads that were *faster*, which is something else varying with size
    (load, batching, a cache), not a negative cost.
    """
    if calls < 2 or not math.isfinite(slope_us_per_mb):
        return False, "one payload size only: no cost per MB to fit"
    if not math.isfinite(r2):
        return False, "no size effect: the phase did not change with size"
    if r2 < MIN_R2:
        return False, f"no size effect measurable: R² {r2:.2f}"
    if slope_us_per_mb <= 0:
        return False, (
            f"larger payloads were faster (R² {r2:.2f}): something else changed with the "
            "size (load, batching, caching), not a cost"
        )
    return True, f"{_micros(slope_us_per_mb)} per MB (R² {r2:.2f})"


def _micros(us: float) -> str:
    if abs(us) >= 1_000_000:
        return f"{us / 1_000_000:.3g} s"
    if abs(us) >= 1_000:
        return f"{us / 1_000:.3g} ms"
    return f"{us:.3g} µs"


SAMPLE_COLUMNS = (
    "service",
    "method",
    "algorithm",
    "request_bytes",
    "response_bytes",
    *(f"{name}_us" for name in FITTED_PHASES),
)
MAX_SAMPLE = 20_000


def payload_sample(
    store: Store,
    filters: CallFilters | None = None,
    limit: int = 2_000,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """At most ``limit`` calls (``SAMPLE_COLUMNS``; phases NaN where undefined) for a
    scatter plot, chosen by a hash of the call's key: uniform over the calls,
    the same calls on every rerun (points do not jump). The hash also thins
    the halves *before* they are merged (the key is the sorting key, so the
    condition reaches the ``FINAL`` read): about ``2 x limit`` calls are
    merged, not all of them."""
    if not 1 <= limit <= MAX_SAMPLE:
        raise BadInput(f"sample size must be between 1 and {MAX_SAMPLE}, not {limit}")
    found = halves(store, filters, options)
    if found is None:
        return pd.DataFrame(columns=list(SAMPLE_COLUMNS))
    # Half rows ~ 2 x calls; keep about 2 x limit calls (hashes are uniform).
    modulo = max(1, found[2] // (4 * limit))
    phases = [
        f"if({name}_defined, {name}_value / 1000, NULL) AS {name}_us" for name in FITTED_PHASES
    ]
    rows, bound = rows_for(store, filters, options, phases=phases_read(*phases))
    sql = (
        "SELECT service, method, algorithm,\n"
        f"    {REQUEST_BYTES} AS request_bytes, {RESPONSE_BYTES} AS response_bytes,\n    "
        + ",\n    ".join(phases)
        + f"\nFROM ({rows})\n"
        "WHERE cityHash64(TraceId, ClientSpanId) % {modulo:UInt64} = 0\n"
        "ORDER BY cityHash64(TraceId, ClientSpanId)\nLIMIT {limit:UInt32}"
    )
    frame = store.query(sql, {**bound, "limit": int(limit), "modulo": modulo}, readonly=True)
    for name in FITTED_PHASES:
        frame[f"{name}_us"] = frame[f"{name}_us"].astype("float64")
    return frame[list(SAMPLE_COLUMNS)]


ALGORITHM_COLUMNS = (
    "algorithm",
    "calls",
    "request_bytes_mean",
    "response_bytes_mean",
    "request_compressed_ratio",
    "response_compressed_ratio",
    "total_p50_us",
    "total_p99_us",
    "total_mean_us",
    "calls_with_events",
    "phase",
    "value_us",
    "share",
)


def algorithms(frame: pd.DataFrame) -> pd.DataFrame:
    """Per algorithm (not ``ALL``; busiest first) and phase of ``STACKED_PHASES``: one
    row (``ALGORITHM_COLUMNS``) from ``by_algorithm``.

    End to end: calls, mean message bytes each way, p50/p99/mean ``total``.
    ``*_compressed_ratio``: gRPC-compressed bytes over message bytes, over the
    messages whose compressed size was recorded (gzip/deflate, sampled; NaN
    where none was). Per phase: the mean over the calls that record every
    event (``calls_with_events``), so the phases add up to their mean total
    and ``share`` is each phase's part of it.
    """
    records = []
    overall = frame[(_scope(frame) == "all") & (frame["algorithm"] != ALL)]
    for row in overall.to_dict("records"):
        has_total = int(row["total_calls"]) > 0
        complete = int(row["calls_with_events"])
        values = {
            name: float(row[f"{name}_us"]) if complete else math.nan for name in STACKED_PHASES
        }
        stacked = sum(values.values())
        for name in STACKED_PHASES:
            records.append(
                (
                    row["algorithm"],
                    int(row["calls"]),
                    float(row["request_bytes_mean"]),
                    float(row["response_bytes_mean"]),
                    _ratio(row["request_compressed_ratio"]),
                    _ratio(row["response_compressed_ratio"]),
                    float(row["q"][0]) if has_total else math.nan,
                    float(row["q"][1]) if has_total else math.nan,
                    float(row["total_mean_us"]) if has_total else math.nan,
                    complete,
                    name,
                    values[name],
                    values[name] / stacked if complete and stacked else math.nan,
                )
            )
    return pd.DataFrame.from_records(records, columns=list(ALGORITHM_COLUMNS))


def _ratio(value: object) -> float:
    """sum/sum over no compressed message is NaN (0/0) or NULL; keep it NaN."""
    if value is None:
        return math.nan
    number = float(value)  # type: ignore[arg-type]
    return number if math.isfinite(number) else math.nan

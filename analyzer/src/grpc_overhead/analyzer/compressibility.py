"""Measured compressibility per method: what gzip/deflate make of its messages, at what CPU.

The compression findings (``compression_would_help``, ``compression_costs_more``)
need a ratio and a CPU cost that are not guesses. Our instrumentation measures
a few sent messages per method (``sample_columns``); ``by_method`` gives their
medians per (service, method, direction, algorithm) under the usual filters.

Only calls that carry a sample are merged: a cheap scan of the unmerged
halves finds their keys (a sample is on the sender's half, the key on both),
so a store of a million calls merges only its few hundred sampled ones.
"""

from __future__ import annotations

import pandas as pd

from grpc_overhead.analyzer.clock_offsets import ClockOptions, merged_cte, query_parameters
from grpc_overhead.analyzer.options import CALL_FILTER, ROW_FILTER, CallFilters, CallsOptions
from grpc_overhead.analyzer.sample_columns import (
    ALGORITHMS,
    DIRECTIONS,
    column,
    sampled,
    size_column,
)
from grpc_overhead.analyzer.store.base import Store

BY_METHOD_COLUMNS = (
    "service",
    "method",
    "direction",
    "algorithm",
    "samples",
    "ratio_p50",
    "ratio_min",
    "ratio_max",
    "compress_ns_per_mb_p50",
    "decompress_ns_per_mb_p50",
    "message_bytes_p50",
)


def _samples() -> str:
    """One tuple per (direction, algorithm) of a merged call, for ARRAY JOIN."""
    tuples = [
        f"tuple('{d}', '{a}', {size_column(d)}, toFloat64({column(d, a, 'ratio')}),"
        f" {column(d, a, 'compress_ns_per_mb')}, {column(d, a, 'decompress_ns_per_mb')})"
        for d in DIRECTIONS
        for a in ALGORITHMS
    ]
    return "[" + ", ".join(tuples) + "]"


def by_method_sql(options: CallsOptions | None = None) -> str:
    """The query of ``by_method``. Parameters: ``clock_offsets.query_parameters``."""
    options = options or CallsOptions()
    any_sample = " OR ".join(f"({sampled(d)})" for d in DIRECTIONS)
    keys = (
        f"SELECT TraceId, ClientSpanId FROM {options.calls} WHERE ({any_sample}) AND {ROW_FILTER}"
    )
    median = "quantileExactInclusive(0.5)"
    return (
        f"WITH {merged_cte(options, keys, CALL_FILTER)}\n"
        "SELECT toString(service) AS service, toString(method) AS method,"
        " s.1 AS direction, s.2 AS algorithm, count() AS samples,\n"
        f"    {median}(s.4) AS ratio_p50, min(s.4) AS ratio_min, max(s.4) AS ratio_max,\n"
        f"    {median}(toFloat64(s.5)) AS compress_ns_per_mb_p50,\n"
        f"    {median}(toFloat64(s.6)) AS decompress_ns_per_mb_p50,\n"
        f"    {median}(toFloat64(s.3)) AS message_bytes_p50\n"
        f"FROM merged ARRAY JOIN {_samples()} AS s\n"
        # -1 = no sample of this direction; an algorithm a sample lacks is -1 too.
        "WHERE s.3 >= 0 AND s.4 >= 0 AND s.5 >= 0 AND s.6 >= 0\n"
        "GROUP BY service, method, direction, algorithm\n"
        "ORDER BY service, method, direction, algorithm"
    )


def by_method(
    store: Store,
    filters: CallFilters | None = None,
    clock: ClockOptions | None = None,
    *,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """Per (service, method, direction, algorithm) with samples (``BY_METHOD_COLUMNS``):
    how many messages were measured, the median compressed/uncompressed ratio (and
    its range), the median CPU ns per MB to compress and to decompress, and the
    median size of the messages measured.

    ``direction`` is request (sampled by the client) or response (by the server);
    ``algorithm`` gzip or deflate at gRPC core's zlib level. Calls without a sample
    never count. ``clock``: the clock options of the other analyses (only its
    clock domains matter here, as everywhere calls are merged; no one-way phase is read).
    """
    parameters = query_parameters(filters, clock)
    frame = store.query(by_method_sql(options), parameters, readonly=True)
    if frame.empty:
        return pd.DataFrame({name: pd.Series(dtype="object") for name in BY_METHOD_COLUMNS})
    frame["samples"] = frame["samples"].astype("int64")
    return frame[list(BY_METHOD_COLUMNS)].reset_index(drop=True)

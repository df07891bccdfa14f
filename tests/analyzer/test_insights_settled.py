"""The Phases page's sketches read settled minutes from the rollups and match a raw pass."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest

from grpc_overhead.analyzer import rollup
from grpc_overhead.analyzer.insights import phases
from grpc_overhead.analyzer.insights.settled import phase_states_sql
from grpc_overhead.analyzer.options import CallFilters
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401
from tests.analyzer.test_phases_rollup import MINUTE, START, at, four_minutes

pytestmark = pytest.mark.e2e


def test_quantiles_from_rollups_match_the_raw_pass(store):
    four_minutes(store)
    filters = [
        CallFilters(),
        CallFilters(method="Predict"),
        CallFilters(since=at(START + MINUTE // 2)),
    ]
    raw = [phases.phase_quantiles(store, f) for f in filters]
    assert not phase_states_sql(store, CallFilters())[2]
    # Two minutes settled: they come from the rollup, the other two are computed raw.
    assert rollup.settle(store, now_ns=START + 2 * MINUTE, delay=timedelta(0)) == 2
    assert phase_states_sql(store, CallFilters())[2]
    for chosen, expected in zip(filters, raw, strict=True):
        rolled = phases.phase_quantiles(store, chosen)
        assert (rolled["calls"] == expected["calls"]).all()
        pd.testing.assert_series_equal(rolled["mean_us"], expected["mean_us"], rtol=1e-9)
        table, wanted = phases.statistics(rolled), phases.statistics(expected)
        # t-digests merged from per-minute states: the same quantiles within 2 %.
        for column in ("p50_us", "p90_us", "p99_us"):
            pd.testing.assert_series_equal(table[column], wanted[column], rtol=0.02)
    # An OpenTelemetry service filter cannot use the rollups: computed raw, same answer.
    assert not phase_states_sql(store, CallFilters(otel_service="load-generator"))[2]
    by_otel = phases.phase_quantiles(store, CallFilters(otel_service="load-generator"))
    assert (by_otel["calls"] == raw[0]["calls"]).all()


def test_histogram_from_the_sketch_counts_every_call(store):
    four_minutes(store)
    exact = phases.phase_histogram(store, None, "processing", 500.0, 10_000.0, 20)
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 4
    sketched = phases.phase_histogram(store, None, "processing", 500.0, 10_000.0, 20)
    assert sketched["calls"].sum() == exact["calls"].sum() == 48
    # Processing is 1..5 ms, a fifth of the calls each: the same bins hold them.
    assert set(np.flatnonzero(sketched["calls"])) <= set(
        np.flatnonzero(exact["calls"].rolling(3, center=True, min_periods=1).sum())
    )
    assert np.abs(sketched["calls"] - exact["calls"]).sum() <= 10


def test_quantiles_with_nothing_settled_are_the_merged_states_to_the_bit(store):
    """With nothing settled the page reads finished quantiles in one aggregation; they
    must be exactly what merging the raw states at the page's levels gives."""
    four_minutes(store)
    states, bound, rolled = phase_states_sql(store, CallFilters())
    assert not rolled
    levels = ", ".join(repr(level) for level in phases.LEVELS)
    merged = store.query(
        "SELECT "
        + ", ".join(
            f"quantilesTDigestWeightedIfMerge({levels})({name}_q) AS {name}_q,"
            f" sum({name}_calls) AS {name}_calls, sum({name}_sum) AS {name}_sum"
            for name in phases.SHOWN_PHASES
        )
        + f" FROM ({states})",
        bound,
    ).iloc[0]
    shown = phases.phase_quantiles(store, CallFilters())
    assert shown["calls"].sum() > 0
    for name, rows in shown.groupby("phase", sort=False):
        calls = int(merged[f"{name}_calls"])
        assert (rows["calls"] == calls).all()
        if calls:
            assert rows["value_us"].tolist() == [v / 1000 for v in merged[f"{name}_q"]]
            assert (rows["mean_us"] == merged[f"{name}_sum"] / calls / 1000).all()

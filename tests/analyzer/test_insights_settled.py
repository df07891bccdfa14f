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

"""Phase distributions and the tail on a real chDB store: exact numbers from known phases."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights import phases
from grpc_overhead.analyzer.options import CallFilters
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit


def seed_tail(store, calls: int = 200, slow: int = 2) -> None:
    """``slow`` calls queued 20 ms, the others 60 µs (half of them with 1 ms more processing)."""
    spans = []
    for index in range(calls):
        truth = replace(
            Truth(),
            start=seed.BASE_NS + index * MS,
            server_queue=20 * MS if index < slow else 60 * US,
            processing=(3 if index % 2 else 2) * MS,
        )
        spans += seed.synthetic_call(truth)
    seed.insert_spans(store, spans)


def test_quantiles_and_table(store):
    seed_tail(store)
    quantiles = phases.phase_quantiles(store)
    assert list(quantiles.columns) == list(phases.QUANTILE_COLUMNS)
    assert len(quantiles) == len(phases.SHOWN_PHASES) * len(phases.LEVELS)
    table = phases.statistics(quantiles).set_index("phase")
    assert list(table.index) == list(phases.SHOWN_PHASES)
    assert table.loc["request_network"].tolist() == [200, 300.0, 300.0, 300.0, 300.0]
    assert table.loc["server_queue", "p50_us"] == 60.0
    assert table.loc["server_queue", "mean_us"] == pytest.approx((2 * 20_000 + 198 * 60) / 200)
    assert table.loc["processing", "mean_us"] == 2500.0
    # The ECDF is monotonic and spans the phase's values.
    curve = quantiles[quantiles["phase"] == "processing"]
    assert curve["value_us"].is_monotonic_increasing
    assert curve["value_us"].min() == 2000.0 and curve["value_us"].max() == 3000.0


def test_a_phase_no_call_records_is_nan_not_zero(store):
    seed.insert_spans(store, seed.synthetic_call(official=True))
    table = phases.statistics(phases.phase_quantiles(store)).set_index("phase")
    assert table.loc["total", "calls"] == 1 and table.loc["total", "p50_us"] == 2689.0
    assert table.loc["processing", "calls"] == 0
    assert math.isnan(table.loc["processing", "p50_us"])
    assert math.isnan(table.loc["processing", "mean_us"])


def test_histogram_counts_every_call_in_log_bins(store):
    seed_tail(store)
    bins = phases.phase_histogram(store, None, "server_queue", 10.0, 100_000.0, 4)
    assert bins["lower_us"].tolist() == pytest.approx([10, 100, 1000, 10_000])
    assert bins["upper_us"].tolist() == pytest.approx([100, 1000, 10_000, 100_000])
    assert bins["calls"].tolist() == [198, 0, 0, 2]
    assert bins["share"].tolist() == [0.99, 0, 0, 0.01]
    # Out of range values land in the edge bins.
    edges = phases.phase_histogram(store, None, "server_queue", 100.0, 1000.0, 2)
    assert edges["calls"].tolist() == [198, 2]


def test_histogram_rejects_bad_input(store):
    with pytest.raises(BadInput, match="unknown phase"):
        phases.phase_histogram(store, None, "latency")
    with pytest.raises(BadInput, match="0 < low < high"):
        phases.phase_histogram(store, None, "total", 10.0, 1.0)
    with pytest.raises(BadInput, match="bins must be between"):
        phases.phase_histogram(store, None, "total", 1.0, 10.0, 0)


def test_tail_against_the_median(store):
    seed_tail(store)
    tail = phases.tail(store).set_index("phase")
    assert list(tail.columns) == list(phases.TAIL_COLUMNS)[1:]
    # p99 of 200 totals is the element of rank 198: the first of the two slow calls.
    assert tail.loc["total", "slowest_calls"] == 2
    assert tail.loc["total", "slowest_from_us"] == 22_629.0  # 2,689 - 60 + 20,000
    assert tail.loc["server_queue", "slowest_us"] == 20_000.0
    # p45..p55 of the rest: 2,689 (processing 2 ms) and 3,689 (3 ms) calls alike.
    assert tail.loc["server_queue", "median_us"] == 60.0
    assert tail.loc["processing", "median_us"] == 2500.0
    median_total = tail.loc["total", "median_us"]
    assert median_total == 3189.0
    extra_total = tail.loc["total", "slowest_us"] - median_total
    assert tail.loc["total", "extra_us"] == pytest.approx(extra_total)
    assert tail.loc["server_queue", "extra_share"] == pytest.approx((20_000 - 60) / extra_total)
    assert tail["extra_share"].drop("total").sum() == pytest.approx(1.0)
    assert tail.loc["total", "median_calls"] == 198


def test_tail_ranks_unary_calls_only(store):
    """Ten long streams (5 % of the calls, each longer than any unary call) set no
    threshold: before, they held the p99 and left the slowest band with no unary call."""
    seed_tail(store)
    streams = []
    for index in range(10):
        client, server = seed.synthetic_call(
            replace(Truth(), start=seed.BASE_NS + (300 + index) * MS), method="Chat"
        )
        for span in (client, server):
            span.attributes["grpc_overhead.call_type"] = "stream_stream"
        client.end = client.start + 1_000 * MS
        streams += [client, server]
    seed.insert_spans(store, streams)
    tail = phases.tail(store).set_index("phase")
    assert tail.loc["total", "slowest_calls"] == 2
    assert tail.loc["total", "slowest_from_us"] == 22_629.0
    assert tail.loc["server_queue", "slowest_us"] == 20_000.0
    assert tail.loc["total", "median_us"] == 3189.0
    assert tail.loc["total", "median_calls"] == 198


def test_tail_filters_and_bad_input(store):
    seed_tail(store)
    assert phases.tail(store, CallFilters(method="Other")).empty
    with pytest.raises(BadInput, match="slowest share"):
        phases.tail(store, slowest=0.7)

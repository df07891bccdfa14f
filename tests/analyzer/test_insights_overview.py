"""Overview insights on a real chDB store: exact numbers from calls with known phases."""

from __future__ import annotations

import math

import pytest

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights import overview, rows
from grpc_overhead.analyzer.insights.rows import ALGORITHM, STACKED_PHASES, bucket_seconds
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.result_columns import OPTIONAL_PHASES
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit


def seed_calls(store) -> None:
    """4 Predict calls at 0, 1, 2, 3 s (processing 2 ms) and 2 Batch calls at 4, 5 s
    (processing 6 ms, request_network 500 µs); one official call (no events) at 6 s."""
    spans = []
    for index in range(4):
        spans += seed.synthetic_call(Truth(start=seed.BASE_NS + index * 1000 * MS))
    for index in range(4, 6):
        truth = Truth(
            start=seed.BASE_NS + index * 1000 * MS, processing=6 * MS, request_network=500 * US
        )
        spans += seed.synthetic_call(truth, method="PredictBatch")
    spans += seed.synthetic_call(Truth(start=seed.BASE_NS + 6000 * MS), official=True)
    seed.insert_spans(store, spans)


def test_summary_counts_rates_quantiles_and_shares(store):
    seed_calls(store)
    row = overview.summary(overview.overview(store)).iloc[0]
    assert row["calls"] == 7 and row["calls_with_events"] == 6
    assert row["calls_per_s"] == 1.0  # 6 intervals over 6 s
    assert row["total_p50_us"] == 2689.0
    assert row["total_p99_us"] == 6889.0
    assert row["total_mean_us"] == pytest.approx((5 * 2689 + 2 * 6889) / 7)
    complete_total = 4 * 2689 + 2 * 6889
    assert row["not_processing_share"] == pytest.approx(1 - (4 * 2000 + 2 * 6000) / complete_total)
    assert row["network_share"] == pytest.approx((4 * 550 + 2 * 750) / complete_total)
    assert row["first_start"].value == seed.BASE_NS
    assert row["last_start"].value == seed.BASE_NS + 6000 * MS


def test_phase_means_per_method_add_up_to_the_mean_total(store):
    seed_calls(store)
    frame = overview.phases_by_method(overview.overview(store))
    assert list(frame.columns) == list(overview.PHASES_BY_METHOD_COLUMNS)
    predict = frame[frame["method"] == "Predict"].set_index("phase")
    # Synthetic calls carry no deadlines, client waits, chain events or marks: none of the
    # optional phases is measured, which the stacked view counts as 0 (the phases still
    # add up to total).
    expected = {**Truth().expected_phases_us(), **dict.fromkeys(OPTIONAL_PHASES, 0.0)}
    assert list(predict.index) == list(STACKED_PHASES)
    for phase in STACKED_PHASES:
        assert predict.loc[phase, "value_us"] == expected[phase], phase
    assert predict["total_us"].iloc[0] == 2689.0
    assert predict["value_us"].sum() == pytest.approx(2689.0)
    assert predict["share"].sum() == pytest.approx(1.0)
    assert predict["calls"].iloc[0] == 5 and predict["calls_with_events"].iloc[0] == 4
    batch = frame[frame["method"] == "PredictBatch"].set_index("phase")
    assert batch.loc["processing", "value_us"] == 6000.0
    assert batch.loc["request_network", "value_us"] == 500.0
    # Busiest method first.
    assert frame["method"].drop_duplicates().tolist() == ["Predict", "PredictBatch"]


def test_median_phases(store):
    seed_calls(store)
    frame = overview.phases_by_method(overview.overview(store, statistic="p50"))
    batch = frame[frame["method"] == "PredictBatch"].set_index("phase")
    assert batch.loc["processing", "value_us"] == 6000.0
    assert batch["total_us"].iloc[0] == 6889.0
    with pytest.raises(BadInput, match="statistic must be one of"):
        overview.overview(store, statistic="p77")


def test_network_over_time_per_bucket(store):
    seed_calls(store)
    timeline = overview.network_over_time(overview.overview(store, buckets=3))
    # 6 s span, at most 3 buckets: 2 s buckets starting at the first call.
    assert timeline["bucket_s"].tolist() == [2, 2, 2, 2]
    assert timeline["calls"].tolist() == [2, 2, 2, 1]
    assert timeline["calls_per_s"].tolist() == [1.0, 1.0, 1.0, 0.5]
    assert timeline["network_mean_us"].tolist()[:3] == [550.0, 550.0, 750.0]
    assert timeline["overhead_mean_us"].tolist()[:3] == [689.0, 689.0, 889.0]
    # The official call has total but no phases: missing, not zero.
    assert math.isnan(timeline["network_mean_us"].iloc[3])
    assert math.isnan(timeline["overhead_mean_us"].iloc[3])
    assert timeline["total_p50_us"].iloc[3] == 2689.0
    assert timeline["bucket_start"].iloc[0].value == seed.BASE_NS


def test_filters_apply(store):
    seed_calls(store)
    frame = overview.overview(store, CallFilters(method="PredictBatch"))
    assert overview.summary(frame).iloc[0]["calls"] == 2
    assert overview.phases_by_method(frame)["method"].unique().tolist() == ["PredictBatch"]


def test_nothing_matches(store):
    frame = overview.overview(store)
    row = overview.summary(frame).iloc[0]
    assert row["calls"] == 0 and math.isnan(row["not_processing_share"])
    assert overview.phases_by_method(frame).empty
    assert overview.network_over_time(frame).empty


@pytest.mark.parametrize(
    ("span_s", "target", "expected"),
    [(0, 10, 1), (6, 3, 2), (59, 60, 1), (61, 60, 2), (3600, 120, 30), (10**9, 10, 86400)],
)
def test_bucket_lengths_are_round(span_s, target, expected):
    assert bucket_seconds(0, span_s * 1_000_000_000, target) == expected


def test_algorithm_label(store):
    labels = []
    for compression, codec in (("", ""), ("gzip", ""), ("", "zstd"), ("gzip", "lz4"), ("", "none")):
        client, server = seed.synthetic_call()
        for span in (client, server):
            if compression:
                span.attributes["grpc.compression"] = compression
            if codec:
                span.attributes["grpc_overhead.payload.codec"] = codec
        seed.insert_spans(store, [client, server])
        found = store.query(
            f"SELECT {ALGORITHM} AS algorithm FROM grpc_calls FINAL WHERE TraceId = {{t:String}}",
            {"t": client.trace_id},
        )
        labels.append(found["algorithm"].iloc[0])
    assert labels == ["none", "gzip", "zstd", "gzip+lz4", "none"]


def test_pages_show_the_best_estimate_across_hosts(store):
    # A server clock 37 ms ahead on another host, symmetric 400 µs paths: the pages'
    # one-way phases are the clock-corrected ones, as report's are, not the raw ones.
    skew, one_way = 37 * MS, 400 * US
    pairs = seed.calls_across_hosts(
        5, server_offset=skew, request_network=one_way, response_network=one_way
    )
    seed.insert_spans(store, [span for pair in pairs for span in pair])
    frame = overview.phases_by_method(overview.overview(store)).set_index("phase")
    assert frame.loc["request_network", "value_us"] == pytest.approx(one_way / 1000)
    assert frame.loc["response_network", "value_us"] == pytest.approx(one_way / 1000)


def test_calls_on_one_host_skip_the_clock_estimate(store):
    seed_calls(store)
    assert not rows.needs_clock(store, None)
    pairs = seed.calls_across_hosts(2, server_offset=MS, request_network=MS, response_network=MS)
    seed.insert_spans(store, [span for pair in pairs for span in pair])
    assert rows.needs_clock(store, None)

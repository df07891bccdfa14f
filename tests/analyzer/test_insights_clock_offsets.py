"""Offsets per pair over time, their bands, and which calls they corrected."""

from __future__ import annotations

from datetime import timedelta

import pytest

from grpc_overhead.analyzer import rollup
from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.insights import clock_offsets
from grpc_overhead.analyzer.options import CallFilters
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

SKEW = 37 * MS
REQUEST, RESPONSE = 3 * MS, 1 * MS
MINUTE = 60_000 * MS


def across(start: int, count: int = 10, skew: int = SKEW) -> list:
    pairs = seed.calls_across_hosts(
        count, server_offset=skew, request_network=REQUEST, response_network=RESPONSE, start=start
    )
    return [span for pair in pairs for span in pair]


@pytest.mark.e2e
def test_timeline_per_window_with_its_band(store):
    # The server clock drifts: 37 ms in minute 0, 38 ms in minute 2 (nothing in minute 1).
    seed.insert_spans(
        store, across(seed.BASE_NS) + across(seed.BASE_NS + 2 * MINUTE, skew=SKEW + MS)
    )
    timeline = clock_offsets.offset_timeline(store)
    assert timeline["pair"].unique().tolist() == ["host-a → host-b"]
    assert timeline["offset_us"].tolist() == [38_000.0, 39_000.0]  # + asymmetry (3-1)/2 ms
    assert timeline["uncertainty_us"].tolist() == [2_000.0, 2_000.0]
    assert timeline["low_us"].tolist() == [36_000.0, 37_000.0]
    assert timeline["high_us"].tolist() == [40_000.0, 41_000.0]
    assert timeline["calls"].tolist() == [10, 10]
    for row in timeline.itertuples():
        true = SKEW / 1000 + (1000 if row.window_start.minute != 13 else 0)
        assert row.low_us <= true <= row.high_us


@pytest.mark.e2e
def test_the_timeline_reads_settled_minutes_from_the_rollup(store):
    seed.insert_spans(store, across(seed.BASE_NS) + across(seed.BASE_NS + MINUTE))
    raw = clock_offsets.offset_timeline(store)
    minutes = rollup.settle(store, now_ns=seed.BASE_NS + 60 * MINUTE)
    assert minutes >= 2
    # The calls are gone from grpc_calls, so only the rollup can still answer.
    store.command("TRUNCATE TABLE grpc_calls")
    settled = clock_offsets.offset_timeline(store)
    assert settled[["window_start", "offset_us", "uncertainty_us", "calls"]].equals(
        raw[["window_start", "offset_us", "uncertainty_us", "calls"]]
    )


@pytest.mark.e2e
def test_pairs_count_corrected_calls_and_follow_the_filters(store):
    spans = across(seed.BASE_NS)
    for index in range(3):
        spans += seed.synthetic_call(Truth(start=seed.BASE_NS + index * MS))
    same_clocks = Truth(
        start=seed.BASE_NS + MS,
        server_offset=SKEW,
        request_network=REQUEST,
        response_network=RESPONSE,
    )
    spans += seed.synthetic_call(same_clocks, server_host="host-b", method="Lookup")
    seed.insert_spans(store, spans)
    counts = clock_offsets.window_calls(store)
    pairs = clock_offsets.pairs(clock_offsets.offset_timeline(store), counts).set_index("pair")
    remote = pairs.loc["host-a → host-b"]
    assert (remote["calls"], remote["corrected"], remote["from_own_window"]) == (11, 11, 11)
    assert (remote["from_pair"], remote["uncorrected"], remote["same_clock"]) == (0, 0, 0)
    assert remote["windows"] == 1
    local = pairs.loc["host-a → host-a"]
    assert (local["calls"], local["same_clock"], local["corrected"]) == (3, 3, 0)
    assert local["offset_us"] == 0.0

    only_lookup = CallFilters(method="Lookup")
    counts = clock_offsets.window_calls(store, only_lookup)
    pairs = clock_offsets.pairs(
        clock_offsets.offset_timeline(store, only_lookup), counts
    ).set_index("pair")
    # The offset still comes from every call (a property of the clocks) ...
    assert pairs.loc["host-a → host-b", "offset_us"] == 38_000.0
    # ... the counts from the calls the filters keep.
    assert pairs.loc["host-a → host-b", "corrected"] == 1
    assert pairs.loc["host-a → host-a", "calls"] == 0


@pytest.mark.unit
def test_a_window_without_an_estimate_falls_back_on_the_pair():
    import pandas as pd

    window = pd.Timestamp("2026-09-21 14:13", tz="UTC")
    later = window + timedelta(minutes=1)
    timeline = pd.DataFrame(
        {
            "client_host": ["a"],
            "server_host": ["b"],
            "window_start": [window],
            "offset_us": [10.0],
            "uncertainty_us": [1.0],
        }
    )
    counts = pd.DataFrame(
        {
            "client_host": ["a", "a", "c"],
            "server_host": ["b", "b", "d"],
            "window_start": [window, later, window],
            "calls": [5, 2, 4],
            "network_calls": [5, 2, 4],
        }
    )
    pairs = clock_offsets.pairs(timeline, counts).set_index("pair")
    assert pairs.loc["a → b", ["from_own_window", "from_pair", "uncorrected"]].tolist() == [5, 2, 0]
    assert pairs.loc["c → d", ["corrected", "uncorrected"]].tolist() == [0, 4]
    assert clock_offsets.latest_corrected_window(counts) == later.to_pydatetime()


@pytest.mark.e2e
def test_corrected_calls_raw_next_to_corrected_in_one_window(store):
    seed.insert_spans(store, across(seed.BASE_NS) + across(seed.BASE_NS + MINUTE, count=4))
    counts = clock_offsets.window_calls(store)
    latest = clock_offsets.latest_corrected_window(counts)
    sample = clock_offsets.corrected_calls(store, window_start=latest)
    assert len(sample) == 4  # the latest window only
    assert (sample["start"] >= latest).all()
    assert sample["start"].is_monotonic_decreasing
    assert (sample["request_network_raw_us"] == (REQUEST + SKEW) / 1000).all()
    assert (sample["request_network_corrected_us"] == 2000.0).all()
    assert (sample["response_network_corrected_us"] == 2000.0).all()
    assert set(sample["clock_estimate"]) == {"own window"}
    # Over the whole range, the same calls get the same numbers.
    everything = clock_offsets.corrected_calls(store, limit=100).set_index("trace_id")
    assert len(everything) == 14
    for row in sample.itertuples():
        assert everything.loc[row.trace_id, "clock_offset_us"] == row.clock_offset_us


@pytest.mark.e2e
def test_other_windows_are_computed_raw(store):
    seed.insert_spans(store, across(seed.BASE_NS, count=20))
    options = ClockOptions(window=timedelta(seconds=10))
    timeline = clock_offsets.offset_timeline(store, clock=options)
    assert len(timeline) == 1 and timeline["calls"].tolist() == [20]  # 200 ms of calls
    assert timeline["offset_us"].tolist() == [38_000.0]

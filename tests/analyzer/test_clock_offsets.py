"""Clock offsets: known skews and asymmetric paths recovered within the reported uncertainty."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from grpc_overhead.analyzer.clock_offsets import ClockOptions, clock_offsets, pair_offsets
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.phases import calls
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

OFFSET = 37 * MS
REQUEST, RESPONSE = 3 * MS, 1 * MS


def insert(store, pairs) -> None:
    seed.insert_spans(store, [span for pair in pairs for span in pair])


@pytest.mark.e2e
def test_known_offset_and_asymmetric_paths_across_hosts(store):
    insert(
        store,
        seed.calls_across_hosts(
            40,
            server_offset=OFFSET,
            request_network=REQUEST,
            response_network=RESPONSE,
            jitter=700 * US,
        ),
    )
    [pair] = pair_offsets(store).to_dict("records")
    assert (pair["client_host"], pair["server_host"], pair["calls"]) == ("host-a", "host-b", 40)
    # The estimate is off by the path asymmetry, (3 - 1) / 2 ms, and says so.
    assert abs(pair["offset_us"] - OFFSET / 1000) <= pair["uncertainty_us"]
    assert pair["uncertainty_us"] == pytest.approx((REQUEST + RESPONSE) / 2 / 1000)
    assert pair["offset_us"] == pytest.approx((OFFSET + (REQUEST - RESPONSE) / 2) / 1000)

    found = calls(store)
    for call in found.to_dict("records"):
        true_request = call["request_network_raw_us"] - OFFSET / 1000
        true_response = call["response_network_raw_us"] + OFFSET / 1000
        uncertainty = call["clock_uncertainty_us"]
        assert abs(call["request_network_corrected_us"] - true_request) <= uncertainty + 1e-6
        assert abs(call["response_network_corrected_us"] - true_response) <= uncertainty + 1e-6
        # Whatever the clocks do, the raw sum is the true sum, exactly.
        raw_sum_ns = round(call["request_network_us"] * 1000) + round(
            call["response_network_us"] * 1000
        )
        assert raw_sum_ns == round((true_request + true_response) * 1000)
    assert len(found) == 40


@pytest.mark.e2e
def test_jitter_is_filtered_by_the_smallest_round_trip(store):
    # Only call 0 has the bare path; the others queue up to 2 ms extra each way.
    insert(
        store,
        seed.calls_across_hosts(
            30,
            server_offset=-5 * MS,
            request_network=200 * US,
            response_network=200 * US,
            jitter=2 * MS,
        ),
    )
    [pair] = pair_offsets(store).to_dict("records")
    assert pair["offset_us"] == pytest.approx(-5000, abs=1e-6)  # symmetric bare path: exact
    assert pair["uncertainty_us"] == pytest.approx(200)


@pytest.mark.e2e
def test_same_host_offset_is_exactly_zero_and_one_way_phases_exact(store):
    truth = Truth(request_network=REQUEST, response_network=RESPONSE)
    insert(
        store, [seed.synthetic_call(replace(truth, start=truth.start + i * MS)) for i in range(5)]
    )
    [pair] = pair_offsets(store).to_dict("records")
    assert (pair["client_host"], pair["server_host"]) == ("host-a", "host-a")
    assert (pair["offset_us"], pair["uncertainty_us"], pair["calls"]) == (0, 0, 5)
    found = calls(store)
    assert (found["request_network_us"] == REQUEST / 1000).all()
    assert (found["response_network_us"] == RESPONSE / 1000).all()
    assert (found["request_network_corrected_us"] == REQUEST / 1000).all()
    assert (found["clock_uncertainty_us"] == 0).all()


@pytest.mark.e2e
def test_per_process_domains_estimate_between_processes_of_one_host(store):
    insert(store, [seed.synthetic_call(Truth(server_offset=2 * MS))])
    by_host = pair_offsets(store).to_dict("records")
    assert [(p["offset_us"], p["uncertainty_us"]) for p in by_host] == [(0, 0)]
    by_process = pair_offsets(store, clock=ClockOptions(domain="process")).to_dict("records")
    [pair] = by_process
    assert (pair["client_host"], pair["server_host"]) == ("c-1", "s-1")
    assert abs(pair["offset_us"] - 2000) <= pair["uncertainty_us"]


@pytest.mark.e2e
def test_each_window_has_its_own_estimate(store):
    # The server clock drifts: +10 ms in the first minute, +12 ms in the second.
    early = seed.calls_across_hosts(
        5, server_offset=10 * MS, request_network=MS, response_network=MS, start=seed.BASE_NS
    )
    late = seed.calls_across_hosts(
        5,
        server_offset=12 * MS,
        request_network=MS,
        response_network=MS,
        start=seed.BASE_NS + 60_000 * MS,
    )
    insert(store, early + late)
    windows = clock_offsets(store)
    assert list(windows["offset_us"]) == [10_000, 12_000]
    assert list(windows["calls"]) == [5, 5]
    assert (windows["window_start"].diff().dropna() == timedelta(seconds=60)).all()
    found = calls(store).sort_values("call_start_ns")
    assert list(found["clock_offset_us"]) == [10_000] * 5 + [12_000] * 5
    assert (found["request_network_corrected_us"] == 1000).all()
    [pair] = pair_offsets(store).to_dict("records")
    assert (pair["offset_min_us"], pair["offset_max_us"], pair["windows"]) == (10_000, 12_000, 2)
    # One 10-minute window holds both minutes; the tightest call wins (a tie here).
    wide = clock_offsets(store, clock=ClockOptions(window=timedelta(minutes=10)))
    assert len(wide) == 1 and wide["calls"].iloc[0] == 10


@pytest.mark.e2e
def test_calls_without_events_are_estimated_from_span_boundaries(store):
    pairs = [
        seed.synthetic_call(
            Truth(start=seed.BASE_NS + i * MS, server_offset=OFFSET),
            server_host="host-b",
            official=True,
        )
        for i in range(5)
    ]
    insert(store, pairs)
    [pair] = pair_offsets(store).to_dict("records")
    assert abs(pair["offset_us"] - OFFSET / 1000) <= pair["uncertainty_us"]
    # Span boundaries include the client's own work, so the bound is wider than the wire.
    assert pair["uncertainty_us"] > (300 + 250) / 2


@pytest.mark.e2e
def test_offsets_ignore_method_filters_but_honour_time(store):
    insert(
        store,
        seed.calls_across_hosts(
            3, server_offset=OFFSET, request_network=REQUEST, response_network=RESPONSE
        ),
    )
    assert len(pair_offsets(store, CallFilters(method="Other"))) == 1
    later = datetime.fromtimestamp(seed.BASE_NS / 1e9 + 3600, UTC)
    assert len(pair_offsets(store, CallFilters(since=later))) == 0


@pytest.mark.unit
def test_bad_options():
    with pytest.raises(BadInput):
        ClockOptions(window=timedelta(0))
    with pytest.raises(BadInput):
        ClockOptions(domain="rack")
    assert ClockOptions().parameters() == {"window_ns": 60_000_000_000, "per_process": 0}

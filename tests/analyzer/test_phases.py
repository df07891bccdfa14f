"""Phases: exact arithmetic on known timestamps, official-only spans, filters, quantiles."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest

from grpc_overhead.analyzer.breakdown_frame import BREAKDOWN_COLUMNS
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.phases import PHASES, calls, phase_breakdown
from grpc_overhead.analyzer.result_columns import (
    ALL_PHASES,
    CONSECUTIVE_PHASES,
    DESIGN_PHASES,
    OPTIONAL_PHASES,
    STREAM_PHASES,
)
from grpc_overhead.analyzer.stream_phases import UNARY_ONLY
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

EVENTLESS = ("total", "server_duration", "client_server_gap")


@pytest.mark.unit
def test_one_expression_per_phase_of_the_design():
    assert DESIGN_PHASES == (
        "client_serialize",
        "client_connect",
        "request_network",
        "server_dispatch",
        "server_queue",
        "request_deserialize",
        "server_interceptors",
        "processing",
        "post_processing",
        "response_serialize",
        "response_network",
        "client_dispatch",
        "client_deserialize",
        "total",
        "server_residence",
        "network_overhead",
        "unattributed",
    )
    assert tuple(phase.name for phase in PHASES) == ALL_PHASES
    assert "pool_wait" in ALL_PHASES and "request_network_corrected" in ALL_PHASES


@pytest.mark.e2e
def test_every_phase_is_exact_and_the_phases_add_up_to_total(store):
    truth = Truth(processing=3_456_789, request_network=123_457, response_network=98_765)
    seed.insert_spans(store, seed.synthetic_call(truth))
    [call] = calls(store).to_dict("records")
    for phase, expected in truth.expected_phases_us().items():
        assert call[f"{phase}_us"] == pytest.approx(expected, abs=1e-9), phase
    # Exactly, in integer nanoseconds: the consecutive phases + unattributed = total.
    # None of the optional phases is measured here (no deadlines, client waits, chain
    # events or marks): each counts as 0 (see phases.py).
    assert all(math.isnan(call[f"{phase}_us"]) for phase in OPTIONAL_PHASES)
    # A unary call has no stream phases: its finer phases say the same.
    assert all(math.isnan(call[f"{phase}_us"]) for phase in STREAM_PHASES)
    ns = {
        phase: round(call[f"{phase}_us"] * 1000)
        for phase in ALL_PHASES
        if phase not in OPTIONAL_PHASES and phase not in STREAM_PHASES
    }
    ns.update(dict.fromkeys(OPTIONAL_PHASES, 0))
    assert sum(ns[p] for p in CONSECUTIVE_PHASES) + ns["unattributed"] == ns["total"]
    assert ns["network_overhead"] == ns["total"] - ns["processing"]
    # Same host: corrected one-way phases are the raw ones.
    assert call["request_network_corrected_us"] == call["request_network_us"]
    assert call["response_network_corrected_us"] == call["response_network_us"]


@pytest.mark.e2e
def test_client_waits_are_their_own_phases_never_network(store):
    """A connection wait and a busy client's wake-up lag, recorded by the client, are
    client_connect and client_dispatch: the network phases keep only the wire, and the
    consecutive phases still add up to total exactly."""
    truth = Truth(client_connect=1_061 * MS, client_dispatch=16_441 * US)
    seed.insert_spans(store, seed.synthetic_call(truth))
    [call] = calls(store).to_dict("records")
    expected = truth.expected_phases_us()
    for phase in ("client_connect", "request_network", "response_network", "client_dispatch"):
        assert call[f"{phase}_us"] == pytest.approx(expected[phase], abs=1e-9), phase
    assert call["request_network_raw_us"] == pytest.approx(expected["request_network"])
    assert call["response_network_raw_us"] == pytest.approx(expected["response_network"])
    unmeasured = [p for p in OPTIONAL_PHASES if p not in ("client_connect", "client_dispatch")]
    ns = {
        phase: round(call[f"{phase}_us"] * 1000)
        for phase in ALL_PHASES
        if phase not in unmeasured and phase not in STREAM_PHASES
    }
    ns.update(dict.fromkeys(unmeasured, 0))
    assert sum(ns[p] for p in CONSECUTIVE_PHASES) + ns["unattributed"] == ns["total"]


@pytest.mark.e2e
def test_client_waits_never_make_a_network_phase_negative(store):
    """A wait the client recorded larger than its gap (the watch sees READY a thread
    wake-up late) is bounded by the gap: no phase is negative on a shared clock."""
    truth = Truth(client_connect=400 * US, client_dispatch=300 * US)
    client, server = seed.synthetic_call(truth)
    client.attributes["grpc_overhead.client_connect_ns"] = str(900 * US)
    client.attributes["grpc_overhead.client_dispatch_ns"] = str(900 * US)
    seed.insert_spans(store, (client, server))
    [call] = calls(store).to_dict("records")
    assert call["client_connect_us"] == pytest.approx((400 + 300) * US / US)
    assert call["request_network_us"] == 0
    assert call["client_dispatch_us"] == pytest.approx((250 + 300) * US / US)
    assert call["response_network_us"] == 0


@pytest.mark.e2e
def test_interceptor_chain_and_post_processing_are_their_own_phases(store):
    # A user's interceptor: 300 µs in intercept_service, 1.5 ms before the servicer's
    # method, 20 ms after it; the method marks predictionsMade 12 ms before returning.
    truth = Truth(
        pool_wait=350 * US,
        server_queue=400 * US,
        chain=True,
        intercept_service=300 * US,
        interceptors_before=1_500 * US,
        interceptors_after=20 * MS,
        post_processing=12 * MS,
    )
    plain = Truth(start=truth.start + MS)
    seed.insert_spans(store, [*seed.synthetic_call(truth), *seed.synthetic_call(plain)])
    chained, alone = calls(store).to_dict("records")
    expected = truth.expected_phases_us()
    assert expected["server_interceptors"] == 300 + 1_500 + 20_000
    assert expected["post_processing"] == 12_000
    for phase, value in expected.items():
        assert chained[f"{phase}_us"] == pytest.approx(value, abs=1e-9), phase
    # Neither is processing (the method's own 2 ms) nor server_queue or pool_wait (less
    # the intercept_service part); the consecutive phases still add up to total exactly.
    assert chained["processing_us"] == alone["processing_us"] == 2_000
    assert (chained["server_queue_us"], chained["pool_wait_us"]) == (100, 50)
    # Not measured here (no deadlines, no client waits): each counts 0.
    unmeasured = ("client_connect", "server_dispatch", "client_dispatch")
    ns = {
        p: round(chained[f"{p}_us"] * 1000)
        for p in (*CONSECUTIVE_PHASES, "unattributed")
        if p not in unmeasured
    }
    ns.update(dict.fromkeys(unmeasured, 0))
    total = round(chained["total_us"] * 1000)
    assert sum(ns[p] for p in CONSECUTIVE_PHASES) + ns["unattributed"] == total
    # The call without the chain's events: both NULL, and the old definitions hold.
    assert math.isnan(alone["server_interceptors_us"]) and math.isnan(alone["post_processing_us"])
    for phase, value in plain.expected_phases_us().items():
        assert alone[f"{phase}_us"] == pytest.approx(value, abs=1e-9), phase
    breakdown = phase_breakdown(store).set_index("phase")
    assert breakdown.loc["server_interceptors", "phase_calls"] == 1
    assert breakdown.loc["server_interceptors", "p50_us"] == pytest.approx(21_800, rel=1e-3)
    assert breakdown.loc["post_processing", "phase_calls"] == 1


@pytest.mark.e2e
def test_real_calls_add_up_to_total(store):
    seed.insert_rows(store, seed.readable_span_rows(seed.real_spans(calls=3)))
    found = calls(store)
    assert len(found) == 5
    unary = found[found["method"] == "Echo"]
    for call in unary.to_dict("records"):
        # post_processing needs mark_predictions_made(), which these handlers do not call:
        # it counts as 0; every other phase is measured.
        assert math.isnan(call["post_processing_us"])
        consecutive = sum(
            round(call[f"{p}_us"] * 1000) for p in CONSECUTIVE_PHASES if p != "post_processing"
        )
        assert consecutive + round(call["unattributed_us"] * 1000) == round(call["total_us"] * 1000)
        assert all(
            not math.isnan(call[f"{p}_us"])
            for p in ALL_PHASES
            if p not in STREAM_PHASES and p != "post_processing"
        )
    # Streams (Split, Join): the unary-only phases are NULL, the stream phases all
    # defined and never negative (one host: one clock).
    streams = found[found["method"] != "Echo"]
    assert sorted(streams["call_shape"]) == ["client_streaming", "server_streaming"]
    for call in streams.to_dict("records"):
        assert all(math.isnan(call[f"{p}_us"]) for p in (*UNARY_ONLY, "unattributed"))
        assert all(call[f"{p}_us"] >= 0 for p in STREAM_PHASES), call
    for phase in ("client_serialize", "request_deserialize", "response_serialize", "total"):
        assert (unary[f"{phase}_us"] >= 0).all(), phase
    assert (found["server_duration_us"] <= found["total_us"]).all()


@pytest.mark.e2e
def test_spans_without_events_give_total_server_duration_and_gap(store):
    seed.insert_rows(store, seed.readable_span_rows(seed.official_spans(calls=3)))
    found = calls(store)
    assert len(found) == 3
    for phase in ALL_PHASES:
        column = found[f"{phase}_us"]
        if phase in EVENTLESS:
            assert column.notna().all(), phase
        else:
            assert column.isna().all(), phase
    assert (found["client_server_gap_us"] > 0).all()
    ns = (found[["total_us", "server_duration_us", "client_server_gap_us"]] * 1000).round()
    assert (ns["total_us"] == ns["server_duration_us"] + ns["client_server_gap_us"]).all()


@pytest.mark.e2e
def test_synthetic_official_calls_have_exact_total_and_gap(store):
    truth = Truth()
    seed.insert_spans(store, seed.synthetic_call(truth, official=True))
    [call] = calls(store).to_dict("records")
    expected = truth.expected_phases_us()
    for phase in EVENTLESS:
        assert call[f"{phase}_us"] == pytest.approx(expected[phase], abs=1e-9)
    breakdown = phase_breakdown(store).set_index("phase")
    assert breakdown.loc["processing", "phase_calls"] == 0
    assert math.isnan(breakdown.loc["processing", "p50_us"])
    assert breakdown.loc["total", "p50_us"] == pytest.approx(expected["total"], rel=1e-6)


@pytest.mark.e2e
def test_skewed_clocks_give_negative_phases_not_wrapped_ones(store):
    # Server clock 50 ms behind: raw request_network is negative, and the server
    # span of a second call even ends "before" it starts (Duration wraps in UInt64).
    skewed = Truth(server_offset=-50 * MS)
    seed.insert_spans(store, seed.synthetic_call(skewed, server_host="host-b"))
    client, server = seed.synthetic_call(Truth(start=seed.BASE_NS + MS), server_host="host-b")
    server.end = server.start - 5 * MS
    client.end = client.start - 1 * MS
    seed.insert_spans(store, [client, server])
    found = calls(store).sort_values("call_start_ns")
    first, second = found.to_dict("records")
    assert first["request_network_raw_us"] == pytest.approx((300 * US - 50 * MS) / 1000)
    assert first["response_network_raw_us"] == pytest.approx((250 * US + 50 * MS) / 1000)
    assert second["server_duration_us"] == -5000
    assert second["total_us"] == -1000
    assert found[[f"{p}_us" for p in ALL_PHASES]].abs().max().max() < 1e6


@pytest.mark.e2e
def test_filters_are_bound_values(store):
    start = seed.BASE_NS
    for index, (service, method, run) in enumerate(
        [("a.A", "One", "r1"), ("a.A", "Two", "r1"), ("b.B", "One", "r2"), ("a.A", "One", "r2")]
    ):
        truth = replace(Truth(), start=start + index * 1_000_000_000)
        seed.insert_spans(
            store, seed.synthetic_call(truth, service=service, method=method, run_id=run)
        )

    def count(**filters) -> int:
        return len(calls(store, CallFilters(**filters)))

    assert count() == 4
    assert count(service="a.A") == 3
    assert count(service="a.A", method="One") == 2
    assert count(run_id="r2") == 2
    assert count(service="x'); DROP TABLE grpc_calls; --") == 0
    at = datetime.fromtimestamp((start + 1_500_000_000) / 1e9, UTC)
    assert count(since=at) == 2
    assert count(until=at) == 2
    assert count(since=at, run_id="r2") == 2


@pytest.mark.e2e
def test_breakdown_quantiles_are_close_to_exact_ones(store):
    rng = np.random.default_rng(7)
    processing = rng.lognormal(np.log(2_000_000), 0.6, 400).astype(int)
    spans = []
    for index, value in enumerate(processing):
        truth = replace(Truth(), start=seed.BASE_NS + index * MS, processing=int(value))
        spans += seed.synthetic_call(truth, method="Predict" if index % 4 else "Health")
    seed.insert_spans(store, spans)
    breakdown = phase_breakdown(store)
    assert list(breakdown.columns) == [*BREAKDOWN_COLUMNS, "stored_calls"]
    assert len(breakdown) == 2 * len(ALL_PHASES)
    row = breakdown.set_index(["method", "phase"]).loc[("Predict", "processing")]
    values = processing[[i for i in range(400) if i % 4]] / 1000
    assert row["calls"] == row["phase_calls"] == 300
    assert row["mean_us"] == pytest.approx(values.mean(), rel=1e-9)
    for q, column in ((50, "p50_us"), (90, "p90_us"), (99, "p99_us")):
        assert row[column] == pytest.approx(np.percentile(values, q), rel=0.02), column

"""Finding calls and drawing one: order, bounds, phases as bars, events raw and corrected."""

from __future__ import annotations

import math

import pytest

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights import explorer
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES, OPTIONAL_PHASES
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

SKEW = 37 * MS


@pytest.mark.unit
def test_every_consecutive_phase_is_a_bar_between_two_event_columns():
    assert [segment[0] for segment in explorer.SEGMENTS] == list(CONSECUTIVE_PHASES)
    lanes = {name: lane for name, _, _, lane in explorer.SEGMENTS}
    assert lanes["request_network"] == lanes["response_network"] == "network"
    assert lanes["processing"] == "server" and lanes["client_serialize"] == "client"
    assert explorer.phase_bounds("server_queue") == (
        "server_call_started_ns",
        "server_inbound_message_ns",
    )


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "abc", "g" * 32, "f" * 31])
def test_a_bad_trace_id_says_what_is_expected(text):
    with pytest.raises(BadInput, match="expected 32 hexadecimal digits"):
        explorer.normalize_trace_id(text)


def seed_three(store) -> dict[str, str]:
    calls_ = {
        "old_fast": (Truth(start=seed.BASE_NS), "Predict"),
        "slow": (Truth(start=seed.BASE_NS + MS, processing=9 * MS), "Predict"),
        "new_lookup": (Truth(start=seed.BASE_NS + 2 * MS, processing=4 * MS), "Lookup"),
    }
    ids, spans = {}, []
    for name, (truth, method) in calls_.items():
        client, server = seed.synthetic_call(truth, method=method)
        ids[name] = client.trace_id
        spans += [client, server]
    seed.insert_spans(store, spans)
    return ids


@pytest.mark.e2e
def test_find_orders_bounds_and_filters(store):
    ids = seed_three(store)
    slowest = explorer.find_calls(store)
    assert slowest["trace_id"].tolist() == [ids["slow"], ids["new_lookup"], ids["old_fast"]]
    assert slowest["total_us"].iloc[0] == Truth(processing=9 * MS).expected_phases_us()["total"]
    assert slowest["processing_us"].tolist() == [9000.0, 4000.0, 2000.0]
    recent = explorer.find_calls(store, order="recent", limit=2)
    assert recent["trace_id"].tolist() == [ids["new_lookup"], ids["slow"]]
    bounded = explorer.find_calls(store, min_total_us=3000, max_total_us=6000)
    assert bounded["trace_id"].tolist() == [ids["new_lookup"]]
    by_method = explorer.find_calls(store, CallFilters(method="Predict"))
    assert set(by_method["trace_id"]) == {ids["slow"], ids["old_fast"]}
    assert explorer.find_calls(store, trace_id=ids["slow"].upper())["trace_id"].tolist() == [
        ids["slow"]
    ]
    with pytest.raises(BadInput, match="latency range is empty"):
        explorer.find_calls(store, min_total_us=10, max_total_us=5)


@pytest.mark.e2e
def test_one_call_raw_and_corrected_across_hosts(store):
    # Symmetric paths, so the NTP estimate is exact and corrected = true.
    pairs = seed.calls_across_hosts(
        5, server_offset=SKEW, request_network=400 * US, response_network=400 * US
    )
    seed.insert_spans(store, [span for pair in pairs for span in pair])
    trace_id = pairs[2][0].trace_id
    summary = explorer.call_summary(store, trace_id)
    [call] = summary.to_dict("records")
    assert (call["clock_offset_us"], call["clock_uncertainty_us"]) == (SKEW / 1000, 400.0)
    assert call["clock_estimate"] == "own window"
    assert call["request_network_raw_us"] == 400 + SKEW / 1000
    assert call["request_network_us"] == 400.0  # the best estimate: corrected
    assert call["request_network_corrected_us"] == 400.0
    # The same numbers as phases.calls() over the whole range.
    everything = calls(store).set_index("TraceId").loc[trace_id]
    assert call["clock_offset_us"] == everything["clock_offset_us"]
    assert call["total_us"] == everything["total_us"]

    waterfall = explorer.call_waterfall(store, trace_id, "", call["clock_offset_us"])
    phases = waterfall[waterfall["kind"] == "phase"].set_index(["view", "name"])
    for name in CONSECUTIVE_PHASES:
        if name in OPTIONAL_PHASES:  # not measured (no deadlines, chain, mark): no bar
            assert math.isnan(call[f"{name}_us"])
            assert ("raw", name) not in phases.index
            continue
        if name in ("client_connect", "client_dispatch") and not call[f"{name}_us"] > 0:
            assert ("raw", name) not in phases.index  # no wait (or none measured): no bar
            continue
        length = phases.loc[("raw", name), "end_us"] - phases.loc[("raw", name), "start_us"]
        raw = call[f"{name}_raw_us"] if name in explorer.ONE_WAY else call[f"{name}_us"]
        assert length == pytest.approx(raw), name
    corrected = phases.loc[("corrected", "request_network")]
    assert corrected["end_us"] - corrected["start_us"] == pytest.approx(400.0)
    assert phases.loc[("corrected", "processing"), "start_us"] == pytest.approx(
        20 + 15 + 400 + 60 + 12
    )
    events = explorer.event_table(waterfall).set_index("event")
    assert len(events) == 12  # 5 client + 7 server events
    started = events.loc["serverCallStarted"]
    assert started["raw_us"] - started["corrected_us"] == pytest.approx(SKEW / 1000)
    assert started["lane"] == "server"
    assert events.loc["outboundMessageSent", "detail"].tolist() == [
        "message 1, 1024 B",
        "message 1, 512 B",
    ]
    table = explorer.phase_table(summary).set_index("phase")
    assert table.loc["response_network", "corrected_us"] == 400.0
    assert table.loc["processing", "raw_us"] == table.loc["processing", "corrected_us"] == 2000


@pytest.mark.e2e
def test_the_interceptor_chain_is_drawn_where_it_ran(store):
    truth = Truth(
        pool_wait=350 * US,
        server_queue=400 * US,
        chain=True,
        intercept_service=300 * US,
        interceptors_before=1_500 * US,
        interceptors_after=20 * MS,
        post_processing=12 * MS,
    )
    client, server = seed.synthetic_call(truth)
    seed.insert_spans(store, [client, server])
    [call] = explorer.call_summary(store, client.trace_id).to_dict("records")
    waterfall = explorer.call_waterfall(store, client.trace_id, "", call["clock_offset_us"])
    bars = waterfall[(waterfall["kind"] == "phase") & (waterfall["view"] == "raw")]
    lengths = (bars["end_us"] - bars["start_us"]).groupby(bars["name"]).agg(["sum", "count"])
    for name in CONSECUTIVE_PHASES:
        if math.isnan(call[f"{name}_us"]):  # not measured (no deadlines, no client waits): no bar
            assert name not in lengths.index, name
            continue
        assert lengths.loc[name, "sum"] == pytest.approx(call[f"{name}_us"]), name
    # intercept_service, before and after the method; processing around the chain's part.
    assert lengths.loc["server_interceptors", "count"] == 3
    assert lengths.loc["processing", "count"] == 2
    assert lengths.loc["post_processing", "count"] == 1
    # No two bars of the server overlap: the pieces tile the server's time.
    server = bars[bars["lane"] == "server"].sort_values("start_us")
    assert (server["start_us"].iloc[1:].to_numpy() >= server["end_us"].iloc[:-1].to_numpy()).all()


@pytest.mark.e2e
def test_a_trace_without_a_grpc_call_gives_empty_frames(store):
    seed_three(store)
    assert explorer.call_summary(store, "f" * 32).empty
    assert explorer.call_waterfall(store, "f" * 32).empty


@pytest.mark.e2e
def test_spans_without_events_still_give_spans_and_no_phase_bars(store):
    client, server = seed.synthetic_call(Truth(), official=True)
    seed.insert_spans(store, [client, server])
    summary = explorer.call_summary(store, client.trace_id)
    waterfall = explorer.call_waterfall(store, client.trace_id, "", summary["clock_offset_us"][0])
    assert set(waterfall["kind"]) == {"span"}
    spans = waterfall[waterfall["view"] == "raw"].set_index("lane")
    assert spans.loc["client", "end_us"] == pytest.approx(summary["total_us"][0])


@pytest.mark.e2e
def test_the_client_s_waits_are_bars_of_their_own(store):
    """A connection wait and a busy client's wake-up lag are drawn where they happen
    (after the request was sent, before the response was read), and the network bars
    keep only the wire: each bar is its phase's value."""
    truth = Truth(client_connect=1_200 * US, client_dispatch=5_000 * US)
    client, server = seed.synthetic_call(truth)
    seed.insert_spans(store, (client, server))
    [call] = explorer.call_summary(store, client.trace_id).to_dict("records")
    waterfall = explorer.call_waterfall(store, client.trace_id, "", call["clock_offset_us"])
    bars = waterfall[(waterfall["kind"] == "phase") & (waterfall["view"] == "raw")]
    bars = bars.set_index("name")
    for name in ("client_connect", "request_network", "response_network", "client_dispatch"):
        length = bars.loc[name, "end_us"] - bars.loc[name, "start_us"]
        assert length == pytest.approx(call[f"{name}_us"]), name
    assert bars.loc["client_connect", "end_us"] == bars.loc["request_network", "start_us"]
    assert bars.loc["response_network", "end_us"] == bars.loc["client_dispatch", "start_us"]

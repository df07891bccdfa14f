"""The Call explorer on a seeded chDB store: search, the URL's trace, the waterfall both ways."""

from __future__ import annotations

import pytest

from grpc_overhead.app import formatting, runtime
from tests.analyzer.seed import BASE_NS, MS, US, Truth, insert_spans, synthetic_call
from tests.app.charts import figures, metrics
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit

SKEW = 37 * MS
FAST, SLOW = Truth(start=BASE_NS), Truth(start=BASE_NS + 10 * MS, processing=9 * MS)
REMOTE = Truth(
    start=BASE_NS + 20 * MS,
    request_network=300 * US,
    response_network=300 * US,
    server_offset=SKEW,
)


def seed(store) -> dict[str, str]:
    """Three calls: fast and slow on one host, one to a host whose clock is 37 ms ahead
    (symmetric paths, so the estimate is exact). Returns their trace ids by name."""
    ids = {}
    spans = []
    for name, truth, host in (
        ("fast", FAST, "host-a"),
        ("slow", SLOW, "host-a"),
        ("remote", REMOTE, "host-b"),
    ):
        client, server = synthetic_call(truth, server_host=host)
        ids[name] = client.trace_id
        spans += [client, server]
    insert_spans(store, spans)
    return ids


def test_search_lists_calls_slowest_first(served_store):
    ids = seed(served_store)
    at = run_page("explorer")
    assert not at.exception and not at.error
    found = at.dataframe[0].value
    assert found["trace_id"].tolist()[0] == ids["slow"]
    assert found["total_us"].tolist()[0] == SLOW.expected_phases_us()["total"]
    assert len(found) == 3
    assert any("Pick a call" in info.value for info in at.info)


def test_latency_bounds_narrow_the_search(served_store):
    ids = seed(served_store)
    at = run_page("explorer")
    at.number_input[0].set_value(5.0).run()  # total at least 5 ms: only the slow call
    assert at.dataframe[0].value["trace_id"].tolist() == [ids["slow"]]


def test_the_trace_in_the_url_is_drawn_raw_and_corrected(served_store):
    ids = seed(served_store)
    at = run_page("explorer", {"trace": ids["remote"]})
    assert not at.exception and not at.error
    shown = metrics(at)
    expected = REMOTE.expected_phases_us()
    assert shown["Total"] == formatting.duration(expected["total"]) == "2.74 ms"
    assert shown["Clock offset"] == "37 ms"
    phases = at.dataframe[1].value.set_index("phase")
    # Raw: request_network carries the skew; corrected: the true 300 µs each way.
    assert phases.loc["request_network", "raw_us"] == expected["request_network"]
    assert phases.loc["request_network", "corrected_us"] == 300.0
    assert phases.loc["response_network", "corrected_us"] == 300.0
    assert phases.loc["processing", "raw_us"] == phases.loc["processing", "corrected_us"] == 2000
    events = at.dataframe[2].value.set_index("event")
    started = events.loc["serverCallStarted"]
    assert started["raw_us"] - started["corrected_us"] == pytest.approx(SKEW / 1000)
    assert started["corrected_us"] == pytest.approx(20 + 15 + 300)
    figure = figures(at)["explorer_waterfall"]
    names = {trace.get("name") for trace in figure["data"]}
    assert {"processing", "request_network", "event"} <= names
    titles = [annotation["text"] for annotation in figure["layout"]["annotations"]]
    assert titles == ["Raw clocks", "Clock-corrected (server minus 37 ms)"]
    assert at.query_params["trace"] == ids["remote"]


def test_a_pasted_trace_id_goes_to_the_url(served_store):
    ids = seed(served_store)
    at = run_page("explorer")
    at.text_input[0].input(ids["fast"].upper()).run()
    assert not at.exception
    assert at.query_params["trace"] == ids["fast"]
    assert metrics(at)["Total"] == "2.69 ms"


def test_a_jaeger_link_when_configured(served_store):
    ids = seed(served_store)
    runtime.register(runtime.Served(served_store, jaeger_url="http://jaeger.example:16686/"))
    at = run_page("explorer", {"trace": ids["fast"]})
    [button] = at.get("link_button")
    assert button.proto.url == f"http://jaeger.example:16686/trace/{ids['fast']}"


def test_no_jaeger_link_without_a_jaeger_url(served_store):
    ids = seed(served_store)
    at = run_page("explorer", {"trace": ids["fast"]})
    assert not at.get("link_button")


def test_bad_and_unknown_trace_ids_say_what_to_do(served_store):
    seed(served_store)
    at = run_page("explorer", {"trace": "not-a-trace"})
    assert not at.exception
    assert "expected 32 hexadecimal digits" in at.error[0].value
    at = run_page("explorer", {"trace": "f" * 32})
    assert not at.exception
    assert "No gRPC call with trace id" in at.warning[0].value


def test_empty_store_shows_how_to_send_data(served_store):
    at = run_page("explorer", {"trace": "f" * 32})
    assert not at.exception
    assert any("No calls stored yet" in info.value for info in at.info)


def test_the_network_tile_is_the_wire_and_total_minus_processing_is_named_for_what_it_is(
    served_store,
):
    """A queued call: 40 ms in server_queue. "Network" is the two network phases (550 µs);
    total - processing, which holds the queuing, is not called network."""
    queued = Truth(start=BASE_NS + 30 * MS, server_queue=40 * MS, pool_wait=39 * MS)
    client, server = synthetic_call(queued)
    insert_spans(served_store, [client, server])
    at = run_page("explorer", {"trace": client.trace_id})
    assert not at.exception and not at.error
    shown = metrics(at)
    expected = queued.expected_phases_us()
    assert (
        shown["Network"]
        == formatting.duration(expected["request_network"] + expected["response_network"])
        == "550 µs"
    )
    assert shown["Not processing"] == formatting.duration(
        expected["total"] - expected["processing"]
    )
    assert not any("network" in label.lower() and "overhead" in label.lower() for label in shown)

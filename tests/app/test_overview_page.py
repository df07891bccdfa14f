"""The Overview page on a seeded chDB store: the numbers shown are the data's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.analyzer.seed import BASE_NS, MS, Truth, insert_spans, synthetic_call
from tests.app.charts import figures, metrics, traces
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit


def seed_two_methods(store) -> None:
    """10 Predict calls (total 2,689 µs, processing 2 ms), then 5 PredictBatch calls
    (8,689 µs, processing 8 ms), 100 ms apart: 15 calls over 1.4 s."""
    spans = []
    for index in range(15):
        batch = index >= 10
        truth = replace(
            Truth(), start=BASE_NS + index * 100 * MS, processing=(8 if batch else 2) * MS
        )
        spans += synthetic_call(truth, method="PredictBatch" if batch else "Predict")
    insert_spans(store, spans)


def test_headline_numbers_come_from_the_calls(served_store):
    seed_two_methods(served_store)
    at = run_page("overview")
    assert not at.exception and not at.error
    shown = metrics(at)
    assert shown["Calls"] == "15"
    assert shown["Calls/s"] == "10/s"  # 14 intervals in 1.4 s
    assert shown["p50 total"] == "2.69 ms"
    assert shown["p99 total"] == "8.69 ms"
    # 1 - (10 x 2,000 + 5 x 8,000) / (10 x 2,689 + 5 x 8,689)
    assert shown["Not processing"] == "14.7 %"
    # The store's size in the sidebar: every table, bytes per call over the 15 calls.
    size = " ".join(caption.value for caption in at.sidebar.caption)
    assert "**Store: " in size and "per call (15 calls)" in size
    tables = at.table[0].value
    assert tables.loc["otel_traces", "rows"] == "30"  # a client and a server span each
    assert (tables["per_call"] != "n/a").all() and "(total)" in tables.index


def test_phases_per_method_stack_to_the_total(served_store):
    seed_two_methods(served_store)
    at = run_page("overview")
    bars = traces(figures(at)["overview_phases_by_method"])
    assert list(bars) == [
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
        "unattributed",
    ]
    # Busiest method first: Predict, then PredictBatch.
    assert bars["processing"]["y"] == [
        "predict.Predictor/Predict",
        "predict.Predictor/PredictBatch",
    ]
    assert bars["processing"]["x"] == [2000.0, 8000.0]
    assert bars["request_network"]["x"] == [300.0, 300.0]
    for index, total in enumerate((2689.0, 8689.0)):
        assert sum(trace["x"][index] for trace in bars.values()) == pytest.approx(total)
    table = at.dataframe[0].value
    assert table["mean total (µs)"].tolist() == [2689.0, 8689.0]


def test_median_phases_on_request(served_store):
    seed_two_methods(served_store)
    at = run_page("overview")
    at.radio(key="overview_statistic").set_value("p50").run()
    assert not at.exception
    bars = traces(figures(at)["overview_phases_by_method"])
    assert bars["processing"]["x"] == [2000.0, 8000.0]


def test_network_overhead_over_time(served_store):
    seed_two_methods(served_store)
    at = run_page("overview")
    charts = figures(at)
    lines = traces(charts["overview_network_over_time"])
    # Two 1 s buckets: 10 calls, then 5. Network = 300 + 250 µs in every call.
    assert lines["network (request + response), mean"]["y"] == [550.0, 550.0]
    # total - processing = 689 µs for every call.
    assert lines["overhead (total - processing), mean"]["y"] == [689.0, 689.0]
    assert traces(charts["overview_rate"])[""]["y"] == [10.0, 5.0]


def test_filters_narrow_every_number(served_store):
    seed_two_methods(served_store)
    at = run_page("overview", {"method": "PredictBatch"})
    assert not at.exception
    shown = metrics(at)
    assert shown["Calls"] == "5"
    assert shown["p50 total"] == "8.69 ms"
    bars = traces(figures(at)["overview_phases_by_method"])
    assert bars["processing"]["y"] == ["predict.Predictor/PredictBatch"]


def test_calls_without_events_count_but_are_not_split(served_store):
    spans = []
    for index in range(3):
        spans += synthetic_call(Truth(start=BASE_NS + index * MS), official=True)
    insert_spans(served_store, spans)
    at = run_page("overview")
    assert not at.exception
    shown = metrics(at)
    assert shown["Calls"] == "3"
    assert shown["p50 total"] == "2.69 ms"
    assert shown["Not processing"] == "n/a"
    assert any("cannot be split into phases" in info.value for info in at.info)
    assert "overview_phases_by_method" not in figures(at)


def test_empty_store_and_no_match(served_store):
    at = run_page("overview")
    assert not at.exception
    assert any("No calls stored yet" in info.value for info in at.info)
    assert not at.get("plotly_chart") and not at.metric
    seed_two_methods(served_store)
    at = run_page("overview", {"method": "Nope"})
    assert any("No calls match the filters" in info.value for info in at.info)
    assert not at.get("plotly_chart")


def test_calls_by_status_code(served_store):
    """3 Predict calls OK, 2 DEADLINE_EXCEEDED; 1 PredictBatch UNAVAILABLE seen only by
    its server (no client half); 1 Lookup with no code recorded (unknown, not an error)."""
    spans = []
    for index in range(5):
        client, server = synthetic_call(Truth(start=BASE_NS + index * MS))
        if index >= 3:
            client.attributes["rpc.grpc.status_code"] = "4"
        spans += [client, server]
    _, lonely = synthetic_call(Truth(start=BASE_NS + 6 * MS), method="PredictBatch")
    lonely.attributes["rpc.grpc.status_code"] = "14"
    client, server = synthetic_call(Truth(start=BASE_NS + 7 * MS), method="Lookup")
    del client.attributes["rpc.grpc.status_code"], server.attributes["rpc.grpc.status_code"]
    insert_spans(served_store, [*spans, lonely, client, server])
    at = run_page("overview")
    assert not at.exception and not at.error
    assert metrics(at)["Errors"] == "42.9 %"  # 3 of 7
    bars = traces(figures(at)["overview_status_codes"])
    assert bars["OK"]["x"] == [3] and bars["OK"]["y"] == ["predict.Predictor/Predict"]
    assert bars["DEADLINE_EXCEEDED"]["x"] == [2]
    assert bars["UNAVAILABLE"]["y"] == ["predict.Predictor/PredictBatch"]
    assert bars["unknown"]["y"] == ["predict.Predictor/Lookup"]
    table = at.dataframe[-1].value
    # Methods by name (Lookup, Predict, PredictBatch), the commonest code first.
    assert list(table["status"]) == ["unknown", "OK", "DEADLINE_EXCEEDED", "UNAVAILABLE"]
    assert list(table["calls"]) == [1, 3, 2, 1]


def test_filters_take_printed_method_names_and_an_otel_service(served_store):
    seed_two_methods(served_store)
    client, server = synthetic_call(Truth(start=BASE_NS + 2_000 * MS), method="Health")
    client.service_name = "health-checker"
    insert_spans(served_store, [client, server])
    at = run_page("overview", {"method": "predict.Predictor/PredictBatch"})
    assert not at.exception and not at.error
    assert metrics(at)["Calls"] == "5"
    assert at.query_params["service"] == "predict.Predictor"
    assert at.query_params["method"] == "PredictBatch"
    at = run_page("overview", {"otel": "health-checker"})
    assert metrics(at)["Calls"] == "1"
    assert at.sidebar.selectbox(key="filter_otel").value == "health-checker"
    assert set(at.sidebar.selectbox(key="filter_otel").options) >= {
        "health-checker",
        "load-generator",
        "prediction-service",
    }
    at = run_page("overview", {"otel": "prediction-service"})
    assert metrics(at)["Calls"] == "16"

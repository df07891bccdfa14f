"""Calls described by other instrumentations (gRFC A72 in both event-naming generations,
semantic-convention message events, spans without events), on a real chDB store: each
RPC is one call, every phase their events define has its exact value, the others are
NULL, and the catalogue (``insights.sources``) says the same as the store.

The span shapes are the real ones (checked against grpc-go v1.85.0, grpc-java 1.85.1 and
otelgrpc v0.66.0 runs: tests/pipeline/test_grpc_go_e2e.py runs the real peers).
"""

from __future__ import annotations

import math

import pytest

from grpc_overhead.analyzer.insights import sources
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.span_sources import A72, A72_JAVA, SEMCONV, SPANS_ONLY
from tests.analyzer import seed
from tests.analyzer.other_spans import T0, US, a72_call, semconv_call
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit


def _only_call(store) -> dict:
    frame = calls(store)
    assert len(frame) == 1, frame[["ClientSpanId", "client_source", "server_source"]]
    return frame.iloc[0].to_dict()


def _defined(call: dict) -> set[str]:
    return {
        phase
        for phase in sources.CATALOGUE_PHASES
        if not (call[f"{phase}_us"] is None or math.isnan(call[f"{phase}_us"]))
    }


def _yields(client_source: str, server_source: str) -> set[str]:
    table = sources.phase_sources(client_source, server_source)
    return set(table[table["unavailable"] == ""]["phase"])


@pytest.mark.parametrize("old_names", [False, True], ids=["current names", "older names"])
def test_a72_go_call_phases(store, old_names):
    seed.insert_spans(store, a72_call(old_names=old_names))
    call = _only_call(store)
    assert (call["client_source"], call["server_source"]) == (A72, A72)
    assert (call["service"], call["method"]) == ("grpc_overhead.prediction.v1.Predictor", "Predict")
    assert call["client_scope"] == "grpc-go" and call["client_language"] == "go"
    assert call["status_code"] == 0 and call["error"] == 0
    # A grpc-go client sends the headers before serializing: server start - client sent is
    # no wire time (request_network NULL); sent -> read is bounded (request_receive), and
    # the round trip counts from the server's read.
    expected = {
        "total": 1200,
        "client_pre_send": 30,
        "server_receive": 100,
        "request_receive": 270,
        "server_handler": 500,
        "server_tail": 10,
        "server_residence": 600,
        "response_receive": 200,
        "network_round_trip": 470,
        "server_duration": 610,
        "client_server_gap": 590,
    }
    assert {phase: call[f"{phase}_us"] for phase in expected} == expected
    assert _defined(call) == _yields(A72, A72) == set(expected)
    assert math.isnan(call["request_network_us"]) and math.isnan(call["request_network_raw_us"])
    assert (call["request_uncompressed_bytes"], call["response_uncompressed_bytes"]) == (900, 100)


@pytest.mark.parametrize("old_names", [False, True], ids=["current names", "older names"])
def test_a72_java_inbound_event_is_before_deserialization(store, old_names):
    seed.insert_spans(store, a72_call(java=True, old_names=old_names))
    call = _only_call(store)
    assert (call["client_source"], call["server_source"]) == (A72_JAVA, A72_JAVA)
    assert call["client_language"] == "java" and call["status_code"] == 0
    # The inbound events sit where ours record "received, not yet deserialized".
    assert call["response_network_us"] == 1190 - 900
    assert call["server_queue_us"] == 100
    assert call["client_deserialize_us"] is None or math.isnan(call["client_deserialize_us"])
    assert _defined(call) == _yields(A72_JAVA, A72_JAVA)


def test_retries_are_attempts_of_one_call(store):
    seed.insert_spans(store, a72_call(attempts=3, ids=5))
    call = _only_call(store)
    assert call["client_attempts"] == 3
    assert call["error"] == 0 and call["status_code"] == 0
    # Phases are the successful attempt's (and its server half's).
    assert call["client_pre_send_us"] == 30 and call["request_receive_us"] == 270
    assert call["server_handler_us"] == 500 and call["total_us"] == 1200


def test_a72_call_without_its_call_span(store):
    spans = [span for span in a72_call(ids=6) if not span.name.startswith("Sent.")]
    seed.insert_spans(store, spans)
    call = _only_call(store)
    assert math.isnan(call["total_us"])  # the call span says how long the call took
    assert call["request_receive_us"] == 270 and call["client_attempts"] == 1


@pytest.mark.parametrize(
    ("older_names", "sizes"),
    [(False, True), (True, True), (True, False)],
    ids=["rpc.message.*", "message.* (older)", "Java agent 2.x (message.*, no sizes)"],
)
def test_semconv_message_events(store, older_names, sizes):
    # Every spelling the semantic conventions have used for a message event's attributes.
    seed.insert_spans(store, semconv_call(older_names=older_names, sizes=sizes))
    call = _only_call(store)
    assert (call["client_source"], call["server_source"]) == (SEMCONV, SEMCONV)
    assert (call["service"], call["method"]) == ("grpc_overhead.prediction.v1.Predictor", "Predict")
    assert call["status_code"] == 0
    assert call["client_pre_send_us"] == 30 and call["response_receive_us"] == 190
    # The client sends the headers before serializing: request_receive, not request_network.
    assert math.isnan(call["request_network_us"]) and call["request_receive_us"] == 270
    assert call["server_handler_us"] == 500
    assert _defined(call) == _yields(SEMCONV, SEMCONV)
    expected_bytes = (900, 100) if sizes else (0, 0)
    assert (call["request_uncompressed_bytes"], call["response_uncompressed_bytes"]) == (
        expected_bytes
    )


def test_spans_without_events(store):
    client, server = seed.synthetic_call(official=True)
    seed.insert_spans(store, [client, server])
    call = _only_call(store)
    assert (call["client_source"], call["server_source"]) == (SPANS_ONLY, SPANS_ONLY)
    assert _defined(call) == _yields(SPANS_ONLY, SPANS_ONLY)


def test_the_catalogue_says_why_a_phase_is_missing():
    table = sources.phase_sources(A72, "grpc-overhead").set_index("phase")
    assert table.loc["processing", "unavailable"] == ""
    assert "one event per message" in table.loc["client_serialize", "unavailable"]
    assert table.loc["request_receive", "from"].startswith('client: "Outbound message"')
    assert "headers before serializing" in table.loc["request_network", "unavailable"]
    ours = sources.phase_sources("grpc-overhead", A72).set_index("phase")
    assert ours.loc["request_network", "from"].startswith("client: outboundMessageSent")
    missing = sources.phase_sources(SPANS_ONLY, "").set_index("phase")
    assert "server span missing" in missing.loc["server_duration", "unavailable"]


def test_a72_compressed_messages_mark_the_call_compressed(store):
    # A72 adds message-size-compressed only to compressed messages and never names the
    # algorithm: such calls are "compressed", not lumped with uncompressed ones.
    spans = a72_call(ids=11)
    for span in spans:
        for _, _, attributes in span.events:
            attributes["message-size-compressed"] = "60"
    seed.insert_spans(store, spans + a72_call(ids=12))
    frame = calls(store).set_index("TraceId")
    compressed, plain = frame.loc[f"{11:032x}"], frame.loc[f"{12:032x}"]
    assert (compressed["compression"], plain["compression"]) == ("compressed", "")
    assert compressed["request_compressed_bytes"] == 60
    assert compressed["request_uncompressed_bytes"] == 900


def test_a_network_phase_out_of_order_on_one_clock_is_null_not_negative(store):
    # The attempt's "Outbound message" stamped after the server read the request (a thread
    # preempted between handing the message over and stamping the event): on one host's
    # clock sent -> read would be -50 us. It is NULL, and the explorer says why.
    spans = a72_call(ids=13)
    for span in spans:
        if span.name.startswith("Attempt."):
            span.events = [
                (n, T0 + 450 * US if n == "Outbound message" else t, a) for n, t, a in span.events
            ]
    seed.insert_spans(store, spans)
    call = _only_call(store)
    assert call["client_host"] == call["server_host"]
    assert math.isnan(call["request_receive_us"])
    assert call["network_round_trip_us"] == 150 and call["client_pre_send_us"] == 350
    why = sources.call_sources(call).set_index("phase")
    assert why.loc["request_receive", "unavailable"] == sources.OUT_OF_ORDER
    assert why.loc["response_receive", "unavailable"] == ""

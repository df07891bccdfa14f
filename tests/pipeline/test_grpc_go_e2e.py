"""Calls traced by gRPC's own OpenTelemetry tracing (gRFC A72, a real grpc-go v1.85.0) and by
otelgrpc, alone and paired with our instrumented Python service, through the real collector
into the store: each RPC is one call, retries are its attempts, and every phase the events
define is there while the others are NULL.

The grpc-go peer is built by ``make grpc-go-peer`` (``make test`` depends on it).
"""

from __future__ import annotations

import pytest

from grpc_overhead.collector.runner import CollectorProcess
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness import peers
from harness.ground_truth.pipeline import ServeProcess

pytestmark = pytest.mark.e2e

#: Phases A72 and semconv message events define on both sides (one event per message).
EVENT_PHASES = (
    "total",
    "client_pre_send",
    "request_receive",
    "server_receive",
    "server_handler",
    "server_tail",
    "response_receive",
    "network_round_trip",
    "server_residence",
    "server_duration",
    "client_server_gap",
)
#: Defined only where the client serialized before sending the headers (ours; grpc-go
#: sends them first, so server start - client sent is no wire time: phase_bounds).
REQUEST_GAP = ("request_network", "request_network_raw")
#: Phases that need our finer events on the client / on the server.
OUR_CLIENT_PHASES = ("client_serialize", "client_deserialize", "response_network")
OUR_SERVER_PHASES = ("server_queue", "request_deserialize", "processing", "response_serialize")
CALLS = {"go-retry": 4, "go-to-python": 3, "python-to-go": 3, "otelgrpc": 3}
#: Failing calls (client service -> calls): refused by the server without a retry, and
#: sent to a port nothing listens on (an attempt that reaches no server).
FAILING = {"go-refused": 2, "go-no-server": 2}


@pytest.fixture(scope="module")
def stored_calls(tmp_path_factory) -> dict[str, list[dict]]:
    """Every scenario's calls, by client service name, after the pipeline stopped."""
    tmp = tmp_path_factory.mktemp("grpc-go")
    store = tmp / "store"
    request, response = peers.write_messages(tmp)
    intake_port, collector_port = free_port(), free_port()
    serve = ServeProcess(store, intake_port)
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector_port}"}

    def env(name: str) -> dict[str, str]:
        return offline_env(OTEL_SERVICE_NAME=name, **endpoint)

    try:
        with CollectorProcess(
            "embedded",
            otlp_port=collector_port,
            intake=f"127.0.0.1:{intake_port}",
            health_port=free_port(),
        ):
            # A72 both sides; every first attempt refused, so each call is retried once.
            with peers.GoServer(
                response, env=env("go-server"), extra=["-fail-first-attempt"]
            ) as server:
                summary = peers.run_client(
                    server.target,
                    request,
                    calls=CALLS["go-retry"],
                    env=env("go-retry"),
                    extra=["-retry"],
                )
                assert summary["errors"] == 0, summary
                summary = peers.run_client(
                    server.target, request, calls=FAILING["go-refused"], env=env("go-refused")
                )
                assert summary["errors"] == FAILING["go-refused"], summary
            summary = peers.run_client(
                f"127.0.0.1:{free_port()}",
                request,
                calls=FAILING["go-no-server"],
                env=env("go-no-server"),
            )
            assert summary["errors"] == FAILING["go-no-server"], summary
            with ServiceProcess(["--workers", "2"], env=env("python-server")) as service:
                summary = peers.run_client(
                    service.target, request, calls=CALLS["go-to-python"], env=env("go-to-python")
                )
                assert summary["errors"] == 0, summary
            with peers.GoServer(response, env=env("go-server-for-python")) as server:
                done = run_load(
                    "--target",
                    server.target,
                    "--calls",
                    str(CALLS["python-to-go"]),
                    "--entities",
                    "20",
                    "--features",
                    "8",
                    "--json",
                    env=env("python-to-go"),
                )
                assert done.returncode == 0 and done.summary["errors"] == 0, done.stderr
            with peers.GoServer(response, tracing="otelgrpc", env=env("otelgrpc-server")) as server:
                summary = peers.run_client(
                    server.target,
                    request,
                    calls=CALLS["otelgrpc"],
                    env=env("otelgrpc"),
                    tracing="otelgrpc",
                )
                assert summary["errors"] == 0, summary
    finally:
        serve.stop()
    by_client: dict[str, list[dict]] = {}
    for call in peers.read_calls(store):
        by_client.setdefault(call["client_service"], []).append(call)
    return by_client


def _defined(call: dict, phases: tuple[str, ...]) -> list[str]:
    return [phase for phase in phases if call[f"{phase}_us"] is not None]


def _out_of_order(call: dict) -> set[str]:
    """The network phases between two sides' events (request_receive, network_round_trip)
    that this call's own events put below zero: NULL, never negative (phase_bounds: A72 and
    semconv stamp a message "sent" after the write returned, so on a busy machine the
    server may have read it first). One host: no clock offset; no connection wait, as none
    of these clients is ours."""
    sent = call["client_outbound_message_sent_ns"]
    read = call["server_inbound_message_read_ns"] or call["server_inbound_message_ns"]
    received = call["client_received_response_ns"] or call["client_inbound_message_read_ns"]
    seen = call["server_call_started_ns"] if call["client_events"] else read
    backwards = set()
    if read - sent < 0:
        backwards.add("request_receive")
    if (received - sent) - (call["server_outbound_message_sent_ns"] - seen) < 0:
        backwards.add("network_round_trip")
    return backwards


def _event_phases(calls: list[dict]) -> None:
    """Every call defines every ``EVENT_PHASES`` phase but those its events put out of
    order (NULL, never negative), and at least one call defines them all."""
    complete = 0
    for call in calls:
        missing = set(EVENT_PHASES) - set(_defined(call, EVENT_PHASES))
        assert missing <= _out_of_order(call), (missing, call)
        complete += not missing
    assert complete, "no call defined every phase its events give"


def test_each_rpc_is_one_call(stored_calls):
    assert {name: len(calls) for name, calls in stored_calls.items()} == CALLS | FAILING
    for name, calls in stored_calls.items():
        for call in calls:
            if name in FAILING:
                continue
            assert call["service"] == "grpc_overhead.prediction.v1.Predictor"
            assert call["method"] == "Predict"
            assert call["status_code"] == 0 and call["error"] == 0


def test_retries_are_attempts_of_one_call(stored_calls):
    for call in stored_calls["go-retry"]:
        # The refused first try and the retry: one call, two attempts, the phases the
        # successful try's (its server half answered).
        assert call["client_attempts"] == 2
        assert call["client_source"] == call["server_source"] == "grpc A72"
        assert call["client_language"] == call["server_language"] == "go"
        assert call["client_scope"] == call["server_scope"] == peers.A72_SCOPE
        assert _defined(call, OUR_CLIENT_PHASES + OUR_SERVER_PHASES + REQUEST_GAP) == []
        assert call["total_us"] > call["server_duration_us"] > 0
    _event_phases(stored_calls["go-retry"])


def test_a72_sizes_come_from_message_size(stored_calls):
    for call in stored_calls["go-retry"] + stored_calls["otelgrpc"]:
        assert call["request_messages"] == call["response_messages"] == 1
        assert call["request_uncompressed_bytes"] > call["response_uncompressed_bytes"] > 0


def test_go_client_with_our_python_server(stored_calls):
    for call in stored_calls["go-to-python"]:
        assert (call["client_source"], call["server_source"]) == ("grpc A72", "grpc-overhead")
        assert (call["client_language"], call["server_language"]) == ("go", "python")
        assert call["client_attempts"] == 1
        # The server's finer phases come from our events, the client's from A72's.
        assert _defined(call, OUR_SERVER_PHASES) == list(OUR_SERVER_PHASES)
        assert _defined(call, OUR_CLIENT_PHASES + REQUEST_GAP) == []
    _event_phases(stored_calls["go-to-python"])


def test_our_python_client_with_a_go_server(stored_calls):
    for call in stored_calls["python-to-go"]:
        assert (call["client_source"], call["server_source"]) == ("grpc-overhead", "grpc A72")
        assert (call["client_language"], call["server_language"]) == ("python", "go")
        assert _defined(call, OUR_CLIENT_PHASES) == list(OUR_CLIENT_PHASES)
        assert _defined(call, OUR_SERVER_PHASES) == []
        assert _defined(call, REQUEST_GAP) == list(REQUEST_GAP)
    _event_phases(stored_calls["python-to-go"])


def test_otelgrpc_message_events(stored_calls):
    for call in stored_calls["otelgrpc"]:
        assert call["client_source"] == call["server_source"] == "semconv message events"
        assert call["client_scope"] == peers.OTELGRPC_SCOPE
        assert _defined(call, OUR_CLIENT_PHASES + OUR_SERVER_PHASES + REQUEST_GAP) == []
    _event_phases(stored_calls["otelgrpc"])


def test_failed_calls_are_errors_with_the_code_grpc_go_names(stored_calls):
    # grpc-go's A72 spans carry no code: a server's own error message names none (failed,
    # code not recorded), a refused connection is its transport's UNAVAILABLE.
    for name, code in (("go-refused", -2), ("go-no-server", 14)):
        for call in stored_calls[name]:
            assert (call["status_code"], call["error"]) == (code, 1), (name, call["status_code"])
    # The attempt that reached no server is the call's, not a call of its own.
    assert [call["client_attempts"] for call in stored_calls["go-no-server"]] == [1, 1]

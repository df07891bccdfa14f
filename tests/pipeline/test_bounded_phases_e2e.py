"""No phase is ever shown negative, for any source, when serialization is slow.

Real peers with 2 ms of serialization CPU in their codecs (``-marshal-delay`` /
``--marshal-delay-us``): grpc-go traced by gRPC's own tracing (A72) and by otelgrpc,
grpc-java (A72), and grpc-go paired with our Python service both ways, all on one host
(a shared clock), their spans straight into ``serve``. grpc-go and grpc-java send a
call's headers before serializing its request, and the server span starts on the
headers: ``server start - client sent`` came out near -2 ms as request_network. Now
every phase is either bounded by its events and not negative, or NULL, and the
catalogue says why (``phase_bounds``, ``insights.sources``).
"""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.insights import sources
from grpc_overhead.analyzer.result_columns import ALL_PHASES
from grpc_overhead.analyzer.span_sources import A72, A72_JAVA, OURS, SEMCONV
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness import peers
from harness.ground_truth.pipeline import ServeProcess

pytestmark = pytest.mark.e2e

MARSHAL = "2ms"
CALLS = 8
#: client service -> (client source, server source)
PAIRS = {
    "go": (A72, A72),
    "otelgrpc": (SEMCONV, SEMCONV),
    "java": (A72_JAVA, A72_JAVA),
    "go-to-python": (A72, OURS),
    "python-to-go": (OURS, A72),
}


@pytest.fixture(scope="module")
def stored_calls(tmp_path_factory) -> dict[str, list[dict]]:
    tmp = tmp_path_factory.mktemp("bounded")
    store = tmp / "store"
    request, response = peers.write_messages(tmp)
    intake_port = free_port()
    serve = ServeProcess(store, intake_port)
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{intake_port}"}

    def env(name: str) -> dict[str, str]:
        return offline_env(OTEL_SERVICE_NAME=name, **endpoint)

    go_delay = ["-marshal-delay", MARSHAL]
    java_delay = ["--marshal-delay-us", "2000"]
    try:
        for tracing, name in (("a72", "go"), ("otelgrpc", "otelgrpc")):
            with peers.GoServer(
                response, tracing=tracing, env=env(f"{name}-server"), extra=go_delay
            ) as server:
                summary = peers.run_client(
                    server.target,
                    request,
                    calls=CALLS,
                    env=env(name),
                    tracing=tracing,
                    extra=go_delay,
                )
                assert summary["errors"] == 0, summary
                if name == "go":
                    done = run_load(
                        "--target",
                        server.target,
                        "--calls",
                        str(CALLS),
                        "--entities",
                        "20",
                        "--features",
                        "8",
                        "--json",
                        env=env("python-to-go"),
                    )
                    assert done.returncode == 0 and done.summary["errors"] == 0, done.stderr
        with peers.JavaServer(response, env=env("java-server"), extra=java_delay) as server:
            summary = peers.run_java_client(
                server.target, request, calls=CALLS, env=env("java"), extra=java_delay
            )
            assert summary["errors"] == 0, summary
        with ServiceProcess(["--workers", "2"], env=env("python-server")) as service:
            summary = peers.run_client(
                service.target, request, calls=CALLS, env=env("go-to-python"), extra=go_delay
            )
            assert summary["errors"] == 0, summary
    finally:
        serve.stop()
    by_client: dict[str, list[dict]] = {}
    for call in peers.read_calls(store):
        by_client.setdefault(call["client_service"], []).append(call)
    return by_client


def test_every_pair_was_stored(stored_calls):
    assert {name: len(calls) for name, calls in stored_calls.items()} == dict.fromkeys(PAIRS, CALLS)
    for name, calls in stored_calls.items():
        for call in calls:
            assert (call["client_source"], call["server_source"]) == PAIRS[name]
            assert call["client_host"] == call["server_host"]  # one clock


@pytest.mark.parametrize("client", list(PAIRS))
def test_no_phase_is_negative(stored_calls, client):
    for call in stored_calls[client]:
        negative = {
            phase: call[f"{phase}_us"]
            for phase in ALL_PHASES
            if call[f"{phase}_us"] is not None and call[f"{phase}_us"] < 0
        }
        assert negative == {}, (client, negative)


@pytest.mark.parametrize("client", list(PAIRS))
def test_request_network_only_where_the_events_bound_it(stored_calls, client):
    client_source, server_source = PAIRS[client]
    catalogue = sources.phase_sources(client_source, server_source).set_index("phase")
    receive = [call["request_receive_us"] for call in stored_calls[client]]
    # Sent -> read is bounded for every source (never negative); a call whose events came
    # out of order (a thread stamping "sent" after the peer read, on a busy machine) has
    # it NULL rather than negative.
    assert sum(value is not None for value in receive) >= len(receive) // 2, receive
    assert all(value >= 0 for value in receive if value is not None), receive
    for call in stored_calls[client]:
        if client_source == OURS:
            # grpcio serializes before sending headers and message: the gap is the wire.
            assert call["request_network_us"] is not None
        else:
            assert call["request_network_us"] is None
            assert call["request_network_raw_us"] is None
    if client_source != OURS:
        why = catalogue.loc["request_network", "unavailable"]
        assert "headers before serializing" in why, why

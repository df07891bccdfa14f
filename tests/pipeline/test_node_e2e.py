"""A Node.js gRPC service and client (@grpc/grpc-js) traced by the OpenTelemetry Node SDK with
its defaults only (``NodeSDK`` with the gRPC instrumentation, OTEL_SERVICE_NAME set, nothing
else): the SDK sends OTLP over HTTP/protobuf, and the calls reach the store both through the
collector's OTLP/HTTP receiver and straight into ``serve``'s. Node's spans carry no message
events, so each call is one call with the spans-only phases (total, server_duration,
client_server_gap) and nothing else.

The Node peer is installed by ``make node-peer`` (``make test`` depends on it).
"""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.insights import sources
from grpc_overhead.analyzer.span_sources import OURS, SPANS_ONLY
from grpc_overhead.collector.runner import CollectorProcess
from grpc_overhead.processes import ServiceProcess, free_port, offline_env
from harness import peers
from harness.ground_truth.pipeline import ServeProcess

pytestmark = pytest.mark.e2e

CALLS = 100
SPANS_ONLY_PHASES = {"total", "server_duration", "client_server_gap"}
#: Through the collector, besides the Node pair: a Node client calling our instrumented
#: Python service, and a Node client calling a port nothing listens on (client spans only).
TO_PYTHON, NO_SERVER = 5, 2


def _node_env(name: str, endpoint: str) -> dict[str, str]:
    # Only the service name and, on a free port, the endpoint: the protocol, exporter,
    # batch processor and resource are the SDK's defaults.
    return offline_env(OTEL_SERVICE_NAME=name, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)


def _run_node_pair(endpoint: str, client: str) -> None:
    """CALLS calls from the Node client to the Node server, both exporting to ``endpoint``
    with the SDK's default protocol (http/protobuf); the server is ``{client}-server``."""
    with peers.NodeServer(env=_node_env(f"{client}-server", endpoint)) as server:
        summary = peers.run_node_client(server.target, calls=CALLS, env=_node_env(client, endpoint))
    assert summary["calls"] == CALLS and summary["errors"] == 0, summary


def _by_client(store) -> dict[str, list[dict]]:
    by_client: dict[str, list[dict]] = {}
    for call in peers.read_calls(store):
        by_client.setdefault(call["client_service"], []).append(call)
    return by_client


@pytest.fixture(scope="module")
def through_collector(tmp_path_factory) -> dict[str, list[dict]]:
    """Node -> the embedded collector's OTLP/HTTP receiver -> intake -> store."""
    store = tmp_path_factory.mktemp("node-collector") / "store"
    intake_port, http_port = free_port(), free_port()
    serve = ServeProcess(store, intake_port)
    try:
        with CollectorProcess(
            "embedded",
            otlp_port=free_port(),
            otlp_http_port=http_port,
            intake=f"127.0.0.1:{intake_port}",
            health_port=free_port(),
        ) as collector:
            http = collector.otlp_http_url
            _run_node_pair(http, "node-via-collector")
            # Our Python service exports OTLP/gRPC to the same collector.
            grpc_env = offline_env(
                OTEL_SERVICE_NAME="python-server",
                OTEL_EXPORTER_OTLP_ENDPOINT=f"http://{collector.otlp_endpoint}",
            )
            with ServiceProcess(["--workers", "2"], env=grpc_env) as service:
                summary = peers.run_node_client(
                    service.target, calls=TO_PYTHON, env=_node_env("node-to-python", http)
                )
                assert summary["errors"] == 0, summary
            summary = peers.run_node_client(
                f"127.0.0.1:{free_port()}", calls=NO_SERVER, env=_node_env("node-no-server", http)
            )
            assert summary["errors"] == NO_SERVER and summary["codes"] == {"14": NO_SERVER}
    finally:
        serve.stop()
    return _by_client(store)


@pytest.fixture(scope="module")
def into_serve(tmp_path_factory) -> dict[str, list[dict]]:
    """Node -> ``serve``'s own OTLP/HTTP receiver -> store."""
    store = tmp_path_factory.mktemp("node-serve") / "store"
    http_port = free_port()
    serve = ServeProcess(store, free_port(), otlp_http_port=http_port)
    try:
        _run_node_pair(f"http://127.0.0.1:{http_port}", "node-into-serve")
    finally:
        serve.stop()
    return _by_client(store)


def _check(by_client: dict[str, list[dict]], client: str) -> None:
    # Each call counted once: the client and the server span of an RPC are one call.
    assert len(by_client[client]) == CALLS
    promised = sources.phase_sources(SPANS_ONLY, SPANS_ONLY)
    promised = set(promised[promised["unavailable"] == ""]["phase"])
    assert promised == SPANS_ONLY_PHASES
    for call in by_client[client]:
        assert (call["service"], call["method"]) == (
            "grpc_overhead.prediction.v1.Predictor",
            "Predict",
        )
        assert call["status_code"] == 0 and call["error"] == 0
        assert call["server_service"] == f"{client}-server"
        assert (call["client_source"], call["server_source"]) == (SPANS_ONLY, SPANS_ONLY)
        assert call["client_language"] == call["server_language"] == "nodejs"
        assert call["client_scope"] == call["server_scope"] == peers.NODE_SCOPE
        defined = {p for p in sources.CATALOGUE_PHASES if call[f"{p}_us"] is not None}
        assert defined == SPANS_ONLY_PHASES, call
        assert call["total_us"] >= call["server_duration_us"] > 0
        assert call["client_server_gap_us"] >= 0


def test_node_through_the_collector_each_call_once(through_collector):
    counts = {name: len(calls) for name, calls in through_collector.items()}
    assert counts == {
        "node-via-collector": CALLS,
        "node-to-python": TO_PYTHON,
        "node-no-server": NO_SERVER,
    }
    _check(through_collector, "node-via-collector")


def test_node_into_serve_each_call_once(into_serve):
    assert {name: len(calls) for name, calls in into_serve.items()} == {"node-into-serve": CALLS}
    _check(into_serve, "node-into-serve")


def test_node_client_with_our_python_server(through_collector):
    promised = sources.phase_sources(SPANS_ONLY, OURS)
    promised = set(promised[promised["unavailable"] == ""]["phase"])
    for call in through_collector["node-to-python"]:
        assert call["status_code"] == 0 and call["error"] == 0
        assert (call["client_source"], call["server_source"]) == (SPANS_ONLY, OURS)
        assert (call["client_language"], call["server_language"]) == ("nodejs", "python")
        defined = {p for p in sources.CATALOGUE_PHASES if call[f"{p}_us"] is not None}
        assert defined == promised, call


def test_node_client_without_a_server(through_collector):
    # grpc-js fails the call UNAVAILABLE; the instrumentation records the code and an error
    # status on the client span, the only span of the call.
    for call in through_collector["node-no-server"]:
        assert (call["status_code"], call["error"], call["server_source"]) == (14, 1, "")
        assert call["total_us"] is not None and call["server_duration_us"] is None

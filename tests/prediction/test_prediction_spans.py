"""The real service and load generator, as users run them, emit complete call spans over OTLP."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from grpc_overhead.processes import ServiceProcess, offline_env, run_load

pytestmark = pytest.mark.e2e

CLIENT_EVENTS = {
    "requestCreated",
    "outboundMessage",
    "outboundMessageSent",
    "clientReceivedResponse",
    "inboundMessageRead",
}
SERVER_EVENTS = {
    "serverCallStarted",
    "callScheduled",
    "inboundMessage",
    "inboundMessageRead",
    "predictionsMade",
    "outboundMessage",
    "outboundMessageSent",
}


def attributes(items) -> dict[str, str]:
    return {item.key: item.value.string_value or item.value.int_value for item in items}


@pytest.mark.parametrize(("mode", "calls"), [("unary", 12), ("stream", 4), ("batch", 4)])
def test_every_call_has_both_halves_with_every_event(otlp_sink, mode, calls):
    sink, port = otlp_sink
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    service_env = offline_env(OTEL_SERVICE_NAME="predictor", **endpoint)
    load_env = offline_env(OTEL_SERVICE_NAME="loadgen", **endpoint)
    with ServiceProcess(["--workers", "2"], env=service_env) as service:
        result = run_load(
            "--target",
            service.target,
            "--calls",
            str(calls),
            "--concurrency",
            "2",
            "--mode",
            mode,
            "--entities",
            "40",
            "--features",
            "8",
            "--run-id",
            f"spans-{mode}",
            "--compression",
            "zstd",
            "--json",
            env=load_env,
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["ok"] == calls
    # The service flushed on SIGTERM; the load generator before exiting.
    spans = sink.wait_for_spans(2 * calls)
    by_kind = defaultdict(list)
    for resource, span in spans:
        service_name = attributes(resource.attributes)["service.name"]
        by_kind[(service_name, span.kind)].append(span)
    clients = by_kind[("loadgen", 3)]
    servers = by_kind[("predictor", 2)]
    assert len(clients) == calls and len(servers) == calls
    client_ids = {span.span_id for span in clients}
    for span in clients:
        assert {event.name for event in span.events} >= CLIENT_EVENTS
        assert attributes(span.attributes)["grpc_overhead.run_id"] == f"spans-{mode}"
        assert attributes(span.attributes)["grpc_overhead.payload.codec"] == "zstd"
    for span in servers:
        assert {event.name for event in span.events} >= SERVER_EVENTS
        assert span.parent_span_id in client_ids
        assert attributes(span.attributes)["grpc_overhead.run_id"] == f"spans-{mode}"
        assert attributes(span.attributes)["grpc_overhead.payload.codec"] == "zstd"


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_the_off_switch_leaves_service_and_load_untraced(otlp_sink, aio):
    # GRPC_OVERHEAD_DISABLED is documented as leaving gRPC untouched: the service and the
    # load generator still work, and nothing reaches the OTLP endpoint from either.
    sink, port = otlp_sink
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
    off = {"GRPC_OVERHEAD_DISABLED": "true", **endpoint}
    flags = ["--workers", "2", *(["--aio"] if aio else [])]
    with ServiceProcess(flags, env=offline_env(OTEL_SERVICE_NAME="predictor", **off)) as service:
        result = run_load(
            "--target",
            service.target,
            "--calls",
            "8",
            "--concurrency",
            "2",
            "--json",
            env=offline_env(OTEL_SERVICE_NAME="loadgen", **off),
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["ok"] == 8
    # Both processes have exited (and flushed whatever they had): nothing was sent.
    assert sink.wait_for_spans(1, timeout_s=2.0) == []

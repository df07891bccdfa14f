"""Zero-code wiring: the entry point, opentelemetry-instrument, and coexistence."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent import futures
from importlib.metadata import entry_points
from pathlib import Path

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue

from grpc_overhead.instrumentation import GrpcOverheadInstrumentor, instrumentor
from tests.instrumentation import echo_service

APP = Path(__file__).with_name("plain_app.py")
OPENTELEMETRY_INSTRUMENT = Path(sys.executable).with_name("opentelemetry-instrument")
OFFICIAL = "grpc_client,grpc_server,grpc_aio_client,grpc_aio_server"


@pytest.mark.unit
def test_entry_point_is_registered():
    found = {e.name: e for e in entry_points(group="opentelemetry_instrumentor")}
    assert found["grpc_overhead"].load() is GrpcOverheadInstrumentor


@pytest.mark.e2e
def test_instrument_and_uninstrument_in_process(captured):
    original_server, original_channel = grpc.server, grpc.insecure_channel
    GrpcOverheadInstrumentor().instrument(pipeline=captured.pipeline)
    try:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers([echo_service.sync_handlers()])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        echo_service.multicallables(channel)["Echo"](BytesValue(value=b"x"))
        [(client, server_span)] = captured.pairs().items()
        assert "callScheduled" in [e.name for e in server_span.events]
        assert "outboundMessageSent" in [e.name for e in client.events]
        channel.close()
        server.stop(0)
    finally:
        GrpcOverheadInstrumentor().uninstrument()
    assert grpc.server is original_server and grpc.insecure_channel is original_channel
    assert not instrumentor.ORIGINALS


def run_instrumented(port: int, disabled: str) -> subprocess.CompletedProcess:
    environment = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_SERVICE_NAME": "plain-app",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": disabled,
        "GRPC_OVERHEAD_EXPORT_INTERVAL_MS": "50",
    }
    return subprocess.run(
        [str(OPENTELEMETRY_INSTRUMENT), sys.executable, str(APP)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("disabled", [OFFICIAL, ""], ids=["ours-alone", "next-to-official"])
def test_opentelemetry_instrument_picks_it_up_without_code_changes(otlp_sink, disabled):
    sink, port = otlp_sink
    result = run_instrumented(port, disabled)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["call-0", "call-1", "call-2"]
    ours = [
        (resource, span)
        for resource, span in sink.wait_for_spans(6)
        if any(
            event.name == "serverCallStarted" or event.name == "requestCreated"
            for event in span.events
        )
    ]
    assert len(ours) == 6, result.stderr
    for resource, _span in ours:
        names = {a.key: a.value.string_value for a in resource.attributes}
        assert names["service.name"] == "plain-app"
        assert names["host.name"] and names["service.instance.id"]
    kinds = sorted(span.kind for _, span in ours)
    assert kinds.count(kinds[0]) == 3  # three client and three server spans

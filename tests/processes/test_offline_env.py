"""A test's child that exports to a real collector or intake keeps the exporter's own
bound per export; only toward the port where nothing listens is the bound short."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpc_overhead.processes.children import DEAD_PORT_EXPORT_TIMEOUT_S, offline_env
from tests.conftest import start_otlp_sink

#: One span, exported once by the SDK's OTLP/gRPC exporter built from the environment;
#: prints what the exporter said (SUCCESS or FAILURE).
EXPORT_ONE_SPAN = """
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

memory = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(memory))
provider.get_tracer("probe").start_span("probe").end()
print(OTLPSpanExporter(insecure=True).export(memory.get_finished_spans()).name)
"""


@pytest.mark.unit
def test_the_short_bound_is_only_for_the_dead_port():
    endpoint = "http://127.0.0.1:4317"
    dead = offline_env(base={})
    assert dead["OTEL_EXPORTER_OTLP_TIMEOUT"] == f"{DEAD_PORT_EXPORT_TIMEOUT_S:g}"
    assert dead["OTEL_EXPORTER_OTLP_ENDPOINT"] != endpoint
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        real = offline_env(base={"OTEL_EXPORTER_OTLP_TIMEOUT": "0.1"}, **{name: endpoint})
        assert "OTEL_EXPORTER_OTLP_TIMEOUT" not in real, name  # nor the caller's own
        assert real[name] == endpoint
    chosen = offline_env(base={}, exporter_timeout_s=3, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    assert chosen["OTEL_EXPORTER_OTLP_TIMEOUT"] == "3"
    assert "OTEL_EXPORTER_OTLP_TIMEOUT" not in offline_env(base={}, exporter_timeout_s=None)


def _export_once(env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", EXPORT_ONE_SPAN],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.e2e
def test_a_collector_slower_than_half_a_second_still_gets_the_span():
    """A collector that answers each export after 1 s (a loaded machine's): the child
    whose environment names it keeps the exporter's 10 s and succeeds; the same child
    with the dead port's 0.5 s gives the span up, which is how a test lost a batch."""
    server, sink, port = start_otlp_sink(delay_s=1.0)
    try:
        endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}"}
        assert _export_once(offline_env(**endpoint)) == "SUCCESS"
        assert [span.name for _, span in sink.spans()] == ["probe"]
        short = offline_env(exporter_timeout_s=DEAD_PORT_EXPORT_TIMEOUT_S, **endpoint)
        assert _export_once(short) == "FAILURE"
    finally:
        server.stop(0)

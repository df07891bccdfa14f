"""A process's last spans reach a slow collector: the flush at exit goes on while spans
still leave, and gives up soon when none do (no collector)."""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

from grpc_overhead.instrumentation import SpanPipeline, instrument_channel, instrumented_server
from grpc_overhead.prediction.telemetry import FLUSH_TIMEOUT_S, close_pipeline
from tests.conftest import start_otlp_sink
from tests.instrumentation import echo_service

pytestmark = pytest.mark.e2e

CALLS = 60  # two spans each: 120 spans, six batches of 20


def _calls_into(pipeline: SpanPipeline) -> None:
    """CALLS real calls through an instrumented server and channel on ``pipeline``."""
    server = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=4),
        handlers=[echo_service.sync_handlers()],
        pipeline=pipeline,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"127.0.0.1:{port}"
    with grpc.insecure_channel(target) as channel:
        echo = echo_service.multicallables(instrument_channel(channel, target, pipeline=pipeline))
        assert [echo["Echo"](BytesValue(value=b"x")).value for _ in range(CALLS)] == [b"x"] * CALLS
    server.stop(None)


def test_a_slow_collector_gets_every_span_past_the_flush_bound():
    """Each export takes 1 s at the collector: six of them outlast the 3 s bound, which
    dropped the rest before; the flush now lasts while exports succeed."""
    sink_server, sink, port = start_otlp_sink(delay_s=1.0)
    try:
        pipeline = SpanPipeline(
            exporter=OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=10),
            export_batch_size=20,
            export_interval_ms=60_000,  # nothing leaves before the flush asks
        )
        _calls_into(pipeline)
        # A batch leaves as soon as 20 are queued; what is left at exit takes more than the
        # bound alone allowed (a second per batch of 20).
        assert pipeline.queued_calls / 20 > FLUSH_TIMEOUT_S
        assert close_pipeline(pipeline) is True
        assert pipeline.exported_spans == 2 * CALLS and pipeline.failed_spans == 0
        assert len(sink.spans()) == 2 * CALLS
    finally:
        sink_server.stop(0)


def test_no_collector_gives_up_after_the_bound_and_says_so(capsys):
    """Nothing listens and the exporter retries for 10 s a batch: no export succeeds, so
    the flush stops after one bound (not the longest one: a hang here meets the test
    timeout) and the spans count as not sent."""
    pipeline = SpanPipeline(
        exporter=OTLPSpanExporter(endpoint="127.0.0.1:1", insecure=True, timeout=10),
        export_batch_size=20,
        export_interval_ms=60_000,
    )
    _calls_into(pipeline)
    assert close_pipeline(pipeline, timeout_s=1.0, longest_s=600.0, label="probe") is False
    assert pipeline.exported_spans == 0
    lost = pipeline.failed_spans + pipeline.dropped_calls + pipeline.queued_calls
    assert lost == 2 * CALLS
    err = capsys.readouterr().err
    assert "probe: spans not exported within" in err and "dropping them" in err

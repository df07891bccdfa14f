"""The pipeline hands an encoding exporter its records early, a chunk at a time, and still
sends batches of export_batch_size, within the export interval, and everything on flush."""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.resources import Resource

from grpc_overhead.instrumentation import SpanPipeline
from grpc_overhead.instrumentation.otlp import CallRecordOTLPExporter
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CallRecord

pytestmark = pytest.mark.unit

RESOURCE = Resource({"service.name": "svc"})


class _BatchesSeen(CallRecordOTLPExporter):
    """The shipped exporter, noting the size of each request it sends; optionally failing
    to encode its first chunk."""

    def __init__(self, *args, fail_first_encoding: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self._fail = fail_first_encoding

    def encode_spans(self, records):
        if self._fail:
            self._fail = False
            raise ValueError("cannot encode")
        return super().encode_spans(records)

    def export(self, spans):
        self.batches.append(len(spans))
        return super().export(spans)


def _pipeline(port: int, **settings) -> tuple[SpanPipeline, _BatchesSeen]:
    fail = settings.pop("fail_first_encoding", False)
    exporter = _BatchesSeen(
        endpoint=f"http://127.0.0.1:{port}", insecure=True, fail_first_encoding=fail
    )
    return SpanPipeline(exporter=exporter, resource=RESOURCE, **settings), exporter


def _finish_calls(pipeline: SpanPipeline, count: int, first_span_id: int = 1) -> list[int]:
    recorder = Recorder(pipeline)
    span_ids = []
    for index in range(count):
        span_id = first_span_id + index
        record = CallRecord(recorder, False, "/pkg.Svc/Get", "unary_unary", 7, span_id, 3, 1_000)
        record.event("serverCallStarted", 1_000)
        record.inbound(1_100, 1_200, 10 + index % 3)
        record.finish(2_000)
        span_ids.append(span_id)
    return span_ids


def _wait_for_spans(sink, count: int, limit_s: float = 10.0) -> list:
    deadline = time.monotonic() + limit_s
    while len(sink.spans()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return sink.spans()


def _span_ids(spans) -> list[int]:
    return [int.from_bytes(span.span_id, "big") for _resource, span in spans]


def test_full_batches_leave_without_a_flush_and_the_rest_on_flush(otlp_sink):
    sink, port = otlp_sink
    pipeline, exporter = _pipeline(port, export_batch_size=100, export_interval_ms=60_000)
    try:
        submitted = _finish_calls(pipeline, 250)
        assert len(_wait_for_spans(sink, 200)) == 200  # two full batches, no flush asked
        assert pipeline.force_flush(10.0)
        spans = sink.spans()
        assert sorted(_span_ids(spans)) == submitted
        assert exporter.batches == [100, 100, 50]
        assert pipeline.exported_spans == 250 and pipeline.queued_calls == 0
    finally:
        pipeline.shutdown()


def test_a_few_calls_leave_within_the_interval(otlp_sink):
    sink, port = otlp_sink
    pipeline, exporter = _pipeline(port, export_batch_size=512, export_interval_ms=200)
    try:
        submitted = _finish_calls(pipeline, 3)  # fewer than a chunk: no wake-up by count
        assert sorted(_span_ids(_wait_for_spans(sink, 3))) == submitted
        assert exporter.batches == [3]
    finally:
        pipeline.shutdown()


def test_a_chunk_that_cannot_be_encoded_is_counted_and_the_rest_still_leaves(otlp_sink):
    sink, port = otlp_sink
    pipeline, _exporter = _pipeline(
        port, export_batch_size=512, export_interval_ms=60_000, fail_first_encoding=True
    )
    try:
        first = _finish_calls(pipeline, 5)
        assert pipeline.force_flush(10.0)
        later = _finish_calls(pipeline, 4, first_span_id=100)
        assert pipeline.force_flush(10.0)
        assert pipeline.failed_spans == len(first)
        assert sorted(_span_ids(sink.spans())) == later
    finally:
        pipeline.shutdown()


def test_shutdown_sends_what_was_encoded_but_not_yet_sent(otlp_sink):
    sink, port = otlp_sink
    pipeline, _exporter = _pipeline(port, export_batch_size=512, export_interval_ms=60_000)
    submitted = _finish_calls(pipeline, 70)  # over a chunk: encoded early, not sent
    deadline = time.monotonic() + 10
    while pipeline._queue and time.monotonic() < deadline:
        time.sleep(0.01)
    pipeline.shutdown()
    assert sorted(_span_ids(sink.spans())) == submitted

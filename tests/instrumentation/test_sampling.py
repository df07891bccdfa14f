"""Parent-based head sampling across real hops: what a call left out still carries.

A call the sampler leaves out produces no span on either side, yet its trace context
travels on (traceparent with the not-sampled flag), the server makes it current for
its handler, and every service downstream follows the decision.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.instrumentation import (
    Sampling,
    SpanPipeline,
    instrument_channel,
)
from grpc_overhead.instrumentation.vocabulary import REQUEST_START_HEADER
from tests.instrumentation import echo_service
from tests.instrumentation.conftest import AioServerThread

pytestmark = pytest.mark.e2e
METHOD = "/test.Hop/Look"


@dataclass
class Hop:
    """One instrumented service: what its handler saw, and the spans it exported."""

    pipeline: SpanPipeline
    exporter: InMemorySpanExporter
    seen: list[dict] = field(default_factory=list)
    downstream: object | None = None  # a multicallable the handler calls, if any

    def spans(self) -> list:
        self.pipeline.force_flush()
        return list(self.exporter.get_finished_spans())

    def look(self, request: BytesValue, context) -> BytesValue:
        current = trace.get_current_span().get_span_context()
        self.seen.append(
            {
                "metadata": dict(context.invocation_metadata()),
                "trace_id": current.trace_id,
                "sampled": current.trace_flags.sampled,
            }
        )
        if self.downstream is not None:
            self.downstream(request, timeout=10)
        return request

    async def look_async(self, request: BytesValue, context) -> BytesValue:
        await asyncio.sleep(0)
        return self.look(request, context)

    def handlers(self, aio: bool = False) -> grpc.GenericRpcHandler:
        method = grpc.unary_unary_rpc_method_handler(
            self.look_async if aio else self.look,
            BytesValue.FromString,
            BytesValue.SerializeToString,
        )
        return grpc.method_handlers_generic_handler("test.Hop", {"Look": method})


@pytest.fixture
def hops() -> Iterator[list]:
    """Starts hops on request; stops everything afterwards."""
    started: list = []

    def start(ratio: float, *, aio: bool = False) -> tuple[Hop, str]:
        exporter = InMemorySpanExporter()
        pipeline = SpanPipeline(
            exporter=exporter, sampling=Sampling(ratio, True), export_interval_ms=20
        )
        hop = Hop(pipeline, exporter)
        if aio:
            server = AioServerThread(hop.handlers(aio=True), pipeline)
            target = f"127.0.0.1:{server.port}"
        else:
            server, target = echo_service.start_sync_server(pipeline, hop.handlers())
        started.append((server, pipeline))
        return hop, target

    yield start
    for server, pipeline in started:
        if isinstance(server, AioServerThread):
            server.stop()
        else:
            server.stop(0)
        pipeline.shutdown()


def client(target: str, ratio: float) -> tuple[object, SpanPipeline, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    pipeline = SpanPipeline(
        exporter=exporter, sampling=Sampling(ratio, True), export_interval_ms=20
    )
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    look = channel.unary_unary(METHOD, BytesValue.SerializeToString, BytesValue.FromString)
    return look, pipeline, exporter


def wait_for_spans(pipeline: SpanPipeline, exporter: InMemorySpanExporter, count: int = 1):
    """A server finishes its record just after the client has its response: wait (bounded)."""
    deadline = time.monotonic() + 10
    while True:
        pipeline.force_flush()
        spans = exporter.get_finished_spans()
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.01)


def flags(traceparent: str) -> tuple[int, str]:
    """(trace id, flags) of a traceparent header."""
    return int(traceparent[3:35], 16), traceparent[53:55]


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_a_sampled_out_call_has_no_spans_but_its_trace_context_travels_on(hops, aio):
    back, back_target = hops(1.0)
    middle, middle_target = hops(1.0, aio=aio)
    middle.downstream, downstream_pipeline, downstream_exporter = client(back_target, 1.0)
    look, pipeline, exporter = client(middle_target, 0.0)

    for _ in range(3):
        assert look(BytesValue(value=b"x"), timeout=10).value == b"x"

    pipeline.force_flush()
    downstream_pipeline.force_flush()
    assert exporter.get_finished_spans() == ()
    assert middle.spans() == [] and back.spans() == []
    assert downstream_exporter.get_finished_spans() == ()
    for upstream, downstream in zip(middle.seen, back.seen, strict=True):
        trace_id, sampled_flag = flags(upstream["metadata"]["traceparent"])
        assert sampled_flag == "00"
        # No timing header for a call nobody records.
        assert REQUEST_START_HEADER not in upstream["metadata"]
        # The middle handler runs inside the caller's (unsampled) trace ...
        assert upstream["trace_id"] == trace_id and upstream["sampled"] is False
        # ... so its own call continues that trace, still not sampled.
        assert flags(downstream["metadata"]["traceparent"]) == (trace_id, "00")
        assert downstream["trace_id"] == trace_id and downstream["sampled"] is False
    assert len({seen["trace_id"] for seen in middle.seen}) == 3  # one trace per root call
    pipeline.shutdown()
    downstream_pipeline.shutdown()


@pytest.mark.parametrize("aio", [False, True], ids=["sync", "aio"])
def test_servers_follow_a_sampled_parent_whatever_their_own_ratio(hops, aio):
    back, back_target = hops(0.0)
    middle, middle_target = hops(0.0, aio=aio)
    middle.downstream, downstream_pipeline, downstream_exporter = client(back_target, 0.0)
    look, pipeline, exporter = client(middle_target, 1.0)

    look(BytesValue(value=b"x"), timeout=10)

    [root] = wait_for_spans(pipeline, exporter)
    [middle_span] = wait_for_spans(middle.pipeline, middle.exporter)
    [downstream_span] = wait_for_spans(downstream_pipeline, downstream_exporter)
    [back_span] = wait_for_spans(back.pipeline, back.exporter)
    trace_id = root.context.trace_id
    for span in (middle_span, downstream_span, back_span):
        assert span.context.trace_id == trace_id
    assert middle_span.parent.span_id == root.context.span_id
    assert back_span.parent.span_id == downstream_span.context.span_id
    assert middle.seen[0]["sampled"] is True
    pipeline.shutdown()
    downstream_pipeline.shutdown()


@pytest.mark.parametrize(
    ("ratio", "sent_flags", "expect_span"),
    [(1.0, "00", False), (0.0, "01", True), (1.0, "01", True), (0.0, "00", False)],
)
def test_a_server_follows_the_flag_an_uninstrumented_caller_sends(
    hops, ratio, sent_flags, expect_span
):
    hop, target = hops(ratio)
    traceparent = f"00-{'ab' * 16}-{'cd' * 8}-{sent_flags}"
    with grpc.insecure_channel(target) as channel:
        look = channel.unary_unary(METHOD, BytesValue.SerializeToString, BytesValue.FromString)
        look(BytesValue(value=b"x"), metadata=(("traceparent", traceparent),), timeout=10)
    spans = wait_for_spans(hop.pipeline, hop.exporter) if expect_span else hop.spans()
    assert len(spans) == (1 if expect_span else 0)
    assert hop.seen[0]["trace_id"] == int("ab" * 16, 16)
    assert hop.seen[0]["sampled"] is expect_span
    if expect_span:
        assert spans[0].parent.span_id == int("cd" * 8, 16)


def test_a_root_call_left_out_by_the_server_still_gets_a_trace_for_its_handler(hops):
    hop, target = hops(0.0)
    with grpc.insecure_channel(target) as channel:
        look = channel.unary_unary(METHOD, BytesValue.SerializeToString, BytesValue.FromString)
        look(BytesValue(value=b"x"), timeout=10)
        look(BytesValue(value=b"x"), timeout=10)
    assert hop.spans() == []
    first, second = hop.seen
    assert first["trace_id"] and second["trace_id"] and first["trace_id"] != second["trace_id"]
    assert first["sampled"] is False


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sampler", "argument", "expected"),
    [
        ("parentbased_traceidratio", "0.01", Sampling(0.01, True)),
        ("parentbased_traceidratio", "0.1", Sampling(0.1, True)),
        ("traceidratio", "0.5", Sampling(0.5, False)),
        ("parentbased_always_off", None, Sampling(0.0, True)),
        ("always_on", None, Sampling(1.0, False)),
        (None, None, Sampling(1.0, True)),
    ],
)
def test_the_standard_sampler_variables_configure_the_ratio(
    monkeypatch, sampler, argument, expected
):
    for name, value in (("OTEL_TRACES_SAMPLER", sampler), ("OTEL_TRACES_SAMPLER_ARG", argument)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert Sampling.from_environment() == expected


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sampler", "argument", "message"),
    [
        ("parentbased_traceidratio", "ten percent", "not a ratio"),
        ("parentbased_traceidratio", "1.5", "not a ratio"),
        ("jaeger_remote", None, "not supported"),
    ],
)
def test_bad_sampler_settings_warn_and_keep_every_call(
    monkeypatch, caplog, sampler, argument, message
):
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", sampler)
    if argument is not None:
        monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", argument)
    with caplog.at_level(logging.WARNING):
        assert Sampling.from_environment().ratio == 1.0
    assert message in caplog.text

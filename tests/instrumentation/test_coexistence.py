"""Next to opentelemetry-instrumentation-grpc, in process: one trace per call, theirs folded.

Their interceptors and ours wrap each other in both orders on each side (which
one is outside depends on which instrumentor loaded first): whichever it is,
their span of a call we record carries ``grpc_overhead.folded_into`` = our
span id, the four spans share one trace, and our server span's parent is the
key our client half is stored under (its own id, or ``grpc_overhead.call_span_id``
when the request carried their traceparent). The real-process matrix is
tests/pipeline/test_coexistence_e2e.py.
"""

from __future__ import annotations

from concurrent import futures

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import client_interceptor, server_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.instrumentation import coexistence, instrument_channel
from grpc_overhead.instrumentation.executor import timed_executor
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.server import ServerInterceptor
from tests.instrumentation import echo_service

pytestmark = pytest.mark.e2e


@pytest.fixture
def official():
    """Their spans, from an SDK provider of their own with our folding processor on it
    (the global provider is not this test's to set)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert coexistence.install(provider)
    yield provider, exporter
    provider.shutdown()


def _folding(recorder: Recorder) -> Recorder:
    recorder.folding = True  # what Recorder() decides when the global provider is an SDK one
    return recorder


@pytest.mark.parametrize("client_outside", ["theirs", "ours"])
@pytest.mark.parametrize("server_outside", ["theirs", "ours"])
@pytest.mark.parametrize("method", ["Echo", "Split"])
def test_their_spans_fold_into_ours_in_one_trace(
    captured, official, client_outside, server_outside, method
):
    provider, exporter = official
    theirs_server = server_interceptor(tracer_provider=provider)
    ours_server = ServerInterceptor(_folding(Recorder(captured.pipeline)))
    order = [theirs_server, ours_server]
    if server_outside == "ours":
        order.reverse()
    server = grpc.server(
        timed_executor(futures.ThreadPoolExecutor(max_workers=2)),
        handlers=[echo_service.sync_handlers()],
        interceptors=order,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"127.0.0.1:{port}"
    sent = _SentHeaders()
    raw = grpc.intercept_channel(grpc.insecure_channel(target), sent)  # innermost: what grpcio gets
    theirs_client = client_interceptor(tracer_provider=provider)
    if client_outside == "theirs":
        ours = instrument_channel(raw, target, pipeline=captured.pipeline)
        channel = intercept_channel(ours, theirs_client)
    else:
        ours = instrument_channel(
            intercept_channel(raw, theirs_client), target, pipeline=captured.pipeline
        )
        channel = ours
    _folding(ours._recorder)
    try:
        call = echo_service.multicallables(channel)[method]
        reply = call(BytesValue(value=b"x"))
        if method == "Split":
            reply = list(reply)
        assert reply
        our_client, our_server = _ours(captured)
    finally:
        channel.close()
        server.stop(0)

    # One traceparent per request (W3C), whichever instrumentation is inside. (grpcio's
    # own server keeps only the last of several; other servers may see them all.)
    assert [key for key, _ in sent.metadata if key == "traceparent"] == ["traceparent"]
    their_spans = exporter.get_finished_spans()
    assert len(their_spans) == 2
    ours_by_kind = {our_client.kind.name: our_client, our_server.kind.name: our_server}
    for span in their_spans:
        mine = ours_by_kind[span.kind.name]
        assert span.attributes["grpc_overhead.folded_into"] == f"{mine.context.span_id:016x}"
        assert span.context.trace_id == our_client.context.trace_id
    assert our_server.context.trace_id == our_client.context.trace_id
    key = our_client.attributes.get("grpc_overhead.call_span_id")
    expected_parent = f"{our_client.context.span_id:016x}" if key is None else key
    assert f"{our_server.parent.span_id:016x}" == expected_parent
    if client_outside == "ours":  # theirs inner: the request carried their traceparent
        [their_client] = [s for s in their_spans if s.kind.name == "CLIENT"]
        assert key == f"{their_client.context.span_id:016x}"
        assert their_client.parent.span_id == our_client.context.span_id
    else:  # theirs outside: ours is its child, and the request carried ours
        [their_client] = [s for s in their_spans if s.kind.name == "CLIENT"]
        assert key is None
        assert our_client.parent.span_id == their_client.context.span_id
    # Nothing stays current in the caller once the call is over (their streaming
    # generator restores the context it found: ours must be gone by then).
    assert not trace.get_current_span().get_span_context().is_valid


class _SentHeaders(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    """The metadata of the last call as the instrumentations hand it to grpcio."""

    def __init__(self) -> None:
        self.metadata: tuple = ()

    def intercept_unary_unary(self, continuation, client_call_details, request):
        self.metadata = tuple(client_call_details.metadata or ())
        return continuation(client_call_details, request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        self.metadata = tuple(client_call_details.metadata or ())
        return continuation(client_call_details, request)


def _ours(captured):
    spans = captured.spans(at_least=2)
    [client] = [s for s in spans if s.kind.name == "CLIENT"]
    [server] = [s for s in spans if s.kind.name == "SERVER"]
    return client, server

"""Errors, propagation, trailers, compression, queuing and sampling, on real servers."""

from __future__ import annotations

import gc
import itertools
import threading
from concurrent import futures

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.sdk.trace import TracerProvider

from grpc_overhead.instrumentation import (
    Sampling,
    SpanPipeline,
    call_attributes,
    instrument_channel,
    instrumented_server,
)
from grpc_overhead.instrumentation.vocabulary import RESIDENCE_TRAILER
from tests.instrumentation import echo_service

pytestmark = pytest.mark.e2e


#: Each served server's thread pool, for ``stop_after_workers``.
_POOLS: dict[grpc.Server, futures.ThreadPoolExecutor] = {}


def serve(pipeline: SpanPipeline, workers: int = 4, handlers=None, **kwargs):
    pool = futures.ThreadPoolExecutor(max_workers=workers)
    server = instrumented_server(
        pool,
        handlers=[handlers or echo_service.sync_handlers()],
        pipeline=pipeline,
        **kwargs,
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    _POOLS[server] = pool
    return server, f"127.0.0.1:{port}"


def stop_after_workers(server: grpc.Server) -> None:
    """Stop ``server`` and wait until its workers are done.

    A sync server's worker submits the call's record after handing the response to the
    transport, so the client can have its answer first; ``Server.stop(grace)`` returns
    at once and waits for no worker (run9d flushed before the server span came)."""
    server.stop(None)
    _POOLS.pop(server).shutdown(wait=True)


def test_handler_exception_is_an_error_on_both_sides_and_never_breaks_the_call(
    captured, sync_client
):
    with pytest.raises(grpc.RpcError) as raised:
        sync_client["Echo"](BytesValue(value=b"raise"))
    assert raised.value.code() is grpc.StatusCode.UNKNOWN
    [(client, server)] = captured.pairs().items()
    assert client.status.status_code.name == "ERROR"
    assert client.attributes["rpc.grpc.status_code"] == 2
    assert server.status.status_code.name == "ERROR"
    [exception] = [e for e in server.events if e.name == "exception"]
    assert exception.attributes["exception.type"] == "ValueError"
    assert "on purpose" in exception.attributes["exception.message"]
    # The channel still works afterwards.
    assert sync_client["Echo"](BytesValue(value=b"ok")).value == b"ok"


def test_abort_status_is_recorded_with_its_code(captured, sync_client):
    with pytest.raises(grpc.RpcError) as raised:
        sync_client["Echo"](BytesValue(value=b"abort"))
    assert raised.value.code() is grpc.StatusCode.NOT_FOUND
    [(client, server)] = captured.pairs().items()
    assert client.attributes["rpc.grpc.status_code"] == 5
    assert server.attributes["rpc.grpc.status_code"] == 5
    # Semantic conventions: NOT_FOUND is the client's error, not the server's.
    assert server.status.status_code.name == "UNSET"
    assert "no such entity" in client.status.description


def test_parent_span_and_handler_context_propagate(captured):
    seen = {}

    def record_context(request, context):
        from opentelemetry import trace

        seen["span"] = trace.get_current_span().get_span_context()
        return request

    handlers = grpc.method_handlers_generic_handler(
        "test.Context",
        {
            "Look": grpc.unary_unary_rpc_method_handler(
                record_context, BytesValue.FromString, BytesValue.SerializeToString
            )
        },
    )
    server, target = serve(captured.pipeline, handlers=handlers)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=captured.pipeline)
    look = channel.unary_unary(
        "/test.Context/Look", BytesValue.SerializeToString, BytesValue.FromString
    )
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("checkout") as parent:
        look(BytesValue(value=b"x"))
    [(client, server_span)] = captured.pairs().items()
    assert client.context.trace_id == parent.get_span_context().trace_id
    assert client.parent.span_id == parent.get_span_context().span_id
    assert server_span.context.trace_id == parent.get_span_context().trace_id
    # Spans started inside the handler become children of our server span.
    assert seen["span"].span_id == server_span.context.span_id
    assert client.attributes["server.address"] == "127.0.0.1"
    assert server_span.attributes["network.peer.address"] == "127.0.0.1"
    channel.close()
    server.stop(0)


def test_residence_trailer_reaches_the_client_and_keeps_application_trailers(captured):
    def with_trailer(request, context):
        context.set_trailing_metadata((("x-app", "kept"),))
        return request

    handlers = grpc.method_handlers_generic_handler(
        "test.Trailer",
        {
            "Get": grpc.unary_unary_rpc_method_handler(
                with_trailer, BytesValue.FromString, BytesValue.SerializeToString
            )
        },
    )
    server, target = serve(captured.pipeline, handlers=handlers)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=captured.pipeline)
    get = channel.unary_unary(
        "/test.Trailer/Get", BytesValue.SerializeToString, BytesValue.FromString
    )
    _, call = get.with_call(BytesValue(value=b"x"))
    trailers = dict(call.trailing_metadata())
    assert trailers["x-app"] == "kept"
    residence = int(trailers[RESIDENCE_TRAILER])
    [(client, server_span)] = captured.pairs().items()
    assert client.attributes["grpc_overhead.server_residence_ns"] == residence
    assert server_span.attributes["grpc_overhead.server_residence_ns"] == residence
    started = next(e.timestamp for e in server_span.events if e.name == "serverCallStarted")
    sent = next(e.timestamp for e in server_span.events if e.name == "outboundMessageSent")
    assert abs((sent - started) - residence) <= 2_000  # wall-clock conversion rounding
    assert 0 < residence < client.end_time - client.start_time
    channel.close()
    server.stop(0)


def test_grpc_gzip_is_recorded_with_exact_compressed_sizes(captured, monkeypatch):
    monkeypatch.setenv("GRPC_OVERHEAD_COMPRESSED_SIZE_EVERY", "1")
    server, target = serve(captured.pipeline)
    channel = instrument_channel(
        grpc.insecure_channel(target, compression=grpc.Compression.Gzip),
        target,
        compression=grpc.Compression.Gzip,
        pipeline=captured.pipeline,
    )
    stubs = echo_service.multicallables(channel)
    payload = BytesValue(value=b"feature " * 4096)
    stubs["Echo"](payload)
    stubs["Echo"](payload, compression=grpc.Compression.Deflate)
    spans = captured.spans(at_least=4)
    clients = sorted((s for s in spans if s.kind.name == "CLIENT"), key=lambda s: s.start_time)
    assert [c.attributes["grpc.compression"] for c in clients] == ["gzip", "deflate"]
    for client in clients:
        [sent] = [e for e in client.events if e.name == "outboundMessageSent"]
        uncompressed = sent.attributes["rpc.message.uncompressed_size"]
        assert uncompressed == len(payload.SerializeToString())
        assert 0 < sent.attributes["rpc.message.compressed_size"] < uncompressed / 10
    channel.close()
    server.stop(0)


def test_waiting_for_a_worker_is_measured_as_call_scheduled(captured):
    """One worker, three 150 ms calls at once: each is picked up 150 ms after the last."""
    server, target = serve(captured.pipeline, workers=1)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=captured.pipeline)
    echo = echo_service.multicallables(channel)["Echo"]
    echo(BytesValue(value=b"warm"))
    captured.spans(at_least=2)
    captured.exporter.clear()
    with futures.ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda _: echo(BytesValue(value=b"sleep:150")), range(3)))
    servers = [s for s in captured.spans(at_least=6) if s.kind.name == "SERVER"]
    picked = sorted(
        (
            next(e.timestamp for e in s.events if e.name == "callScheduled"),
            next(e.timestamp for e in s.events if e.name == "serverCallStarted"),
        )
        for s in servers
    )
    assert len(picked) == 3
    # One worker: a call is picked up (callScheduled) only once the one before it has
    # slept its 150 ms. The arrivals (serverCallStarted) spread on a loaded machine, whose
    # client threads start late (the last call waited 242 ms, not 300, at load 7), so the
    # waits are judged against the pickups, not against one arrival for all three.
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(picked)]
    assert min(gaps) >= 150e6, picked
    # The calls did queue: a call that arrived while the worker was busy has a wait of its
    # own, so the events are a pickup and an arrival, not one moment twice.
    queued = [
        scheduled - started
        for (previous, _), (scheduled, started) in itertools.pairwise(picked)
        if started < previous + 150e6
    ]
    assert queued and min(queued) > 0, picked
    # ... and the wait is not counted as processing: each call's request is read once a
    # worker picked it up, and its handler's 150 ms follow. (No upper bound on a
    # handler's time: a loaded machine stretches a sleeping thread's wake-up, which is
    # no measure of this.)
    for span in servers:
        scheduled = next(e.timestamp for e in span.events if e.name == "callScheduled")
        read = next(e.timestamp for e in span.events if e.name == "inboundMessageRead")
        made = next(e.timestamp for e in span.events if e.name == "predictionsMade")
        assert scheduled <= read, (scheduled, read)
        assert made - read >= 140e6, made - read
    channel.close()
    server.stop(0)


def test_run_id_and_call_attributes_reach_both_spans(captured, sync_client):
    with call_attributes({"grpc_overhead.run_id": "run-42", "grpc_overhead.payload.codec": "zstd"}):
        sync_client["Echo"](BytesValue(value=b"x"))
    [(client, server)] = captured.pairs().items()
    assert client.attributes["grpc_overhead.run_id"] == "run-42"
    assert client.attributes["grpc_overhead.payload.codec"] == "zstd"
    assert server.attributes["grpc_overhead.run_id"] == "run-42"


@pytest.mark.parametrize(
    ("sampling", "expect_spans"), [(Sampling(0.0, True), 0), (Sampling(1.0, True), 2)]
)
def test_head_sampling_keeps_both_halves_together(sampling, expect_spans):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    pipeline = SpanPipeline(exporter=exporter, sampling=sampling, export_interval_ms=20)
    server, target = serve(pipeline)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    assert echo_service.multicallables(channel)["Echo"](BytesValue(value=b"x")).value == b"x"
    stop_after_workers(server)
    pipeline.force_flush()
    assert len(exporter.get_finished_spans()) == expect_spans
    channel.close()
    pipeline.shutdown()


def test_ratio_sampling_is_decided_once_per_trace():
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    pipeline = SpanPipeline(exporter=exporter, sampling=Sampling(0.5, True), export_interval_ms=20)
    server, target = serve(pipeline)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    echo = echo_service.multicallables(channel)["Echo"]
    for _ in range(60):
        echo(BytesValue(value=b"x"))
    stop_after_workers(server)
    pipeline.force_flush()
    spans = exporter.get_finished_spans()
    clients = {s.context.trace_id for s in spans if s.kind.name == "CLIENT"}
    servers = {s.context.trace_id for s in spans if s.kind.name == "SERVER"}
    assert clients == servers  # never half a call
    assert 5 < len(clients) < 55  # some sampled, some not (p of failing ~ 1e-10)
    channel.close()
    pipeline.shutdown()


def test_a_stream_abandoned_by_its_reader_is_still_exported(captured, sync_client):
    stream = sync_client["Split"](BytesValue(value=b"x"))
    next(stream)
    stream.cancel()
    del stream
    gc.collect()
    spans = captured.spans(at_least=2)
    [client] = [s for s in spans if s.kind.name == "CLIENT"]
    received = [e for e in client.events if e.name == "inboundMessageRead"]
    assert len(received) >= 1
    assert client.attributes["rpc.grpc.status_code"] == 1 or client.attributes.get(
        "grpc_overhead.abandoned"
    )


def test_a_full_export_queue_drops_and_counts_without_blocking_calls():
    """A real, slow OTLP endpoint: the queue fills, calls keep flowing, drops are counted."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from tests.conftest import start_otlp_sink

    sink_server, sink, port = start_otlp_sink(delay_s=1.0)
    pipeline = SpanPipeline(
        exporter=OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True),
        max_queue_size=4,
        export_batch_size=2,
        export_interval_ms=10,
    )
    server, target = serve(pipeline)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    echo = echo_service.multicallables(channel)["Echo"]
    replies = [echo(BytesValue(value=b"x")).value for _ in range(40)]
    assert replies == [b"x"] * 40
    stop_after_workers(server)
    assert pipeline.dropped_calls > 0
    pipeline.shutdown(timeout_s=15)
    assert pipeline.dropped_calls + pipeline.exported_spans + pipeline.failed_spans == 80
    assert len(sink.spans()) == pipeline.exported_spans
    channel.close()
    sink_server.stop(0)


def test_spans_travel_over_real_otlp_with_resource_identity(otlp_sink, monkeypatch):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    from grpc_overhead.instrumentation.resource import process_resource

    sink, port = otlp_sink
    monkeypatch.setenv(
        "OTEL_RESOURCE_ATTRIBUTES", "host.name=skewed-host,deployment.environment=test"
    )
    monkeypatch.setenv("OTEL_SERVICE_NAME", "otlp-test")
    pipeline = SpanPipeline(
        exporter=OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True),
        resource=process_resource(),
        export_interval_ms=20,
    )
    server, target = serve(pipeline)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    echo_service.multicallables(channel)["Echo"](BytesValue(value=b"x"))
    stop_after_workers(server)
    pipeline.shutdown()
    spans = sink.wait_for_spans(2)
    assert len(spans) == 2
    for resource, span in spans:
        attributes = {a.key: a.value.string_value for a in resource.attributes}
        assert attributes["host.name"] == "skewed-host"  # OTEL_RESOURCE_ATTRIBUTES wins
        assert attributes["service.name"] == "otlp-test"
        assert attributes["service.instance.id"]
        assert len(span.events) >= 5
    channel.close()


def test_concurrent_calls_from_many_threads_each_get_their_own_record(captured, sync_client):
    errors = []

    def worker(index: int) -> None:
        try:
            for _ in range(10):
                value = f"{index}".encode()
                assert sync_client["Echo"](BytesValue(value=value)).value == value
        except Exception as error:  # pragma: no cover - surfaced below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    pairs = captured.pairs(calls=60)
    assert len(pairs) == 60
    for client, _server in pairs.items():
        assert [e.name for e in client.events].count("outboundMessageSent") == 1

"""A known mix of calls for tail-aware sampling's tests and its benchmark
(``bench/sampling.py``): a handler that is slow or fails when asked, the mix of asks,
trace ids spread evenly over their range, and the calls made one by one under those
ids, each timed by the caller."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry import context as otel_context
from opentelemetry import trace

from grpc_overhead.instrumentation import SpanPipeline, instrument_channel, instrumented_server

SERVICE, METHOD_NAME = "test.Tail", "Look"
METHOD = f"/{SERVICE}/{METHOD_NAME}"
SLOW_S = 0.02


class MixedHandler:
    """Calls asked to be slow take ``SLOW_S``, those asked to fail fail (UNAVAILABLE); the
    ask opens the request (a payload may follow it), which is echoed."""

    def look(self, request: BytesValue, context) -> BytesValue:
        if request.value.startswith(b"slow"):
            time.sleep(SLOW_S)
        elif request.value.startswith(b"fail"):
            context.abort(grpc.StatusCode.UNAVAILABLE, "asked to fail")
        return request

    def handlers(self) -> grpc.GenericRpcHandler:
        method = grpc.unary_unary_rpc_method_handler(
            self.look, BytesValue.FromString, BytesValue.SerializeToString
        )
        return grpc.method_handlers_generic_handler(SERVICE, {METHOD_NAME: method})


def kinds(calls: int, seed: int = 3) -> list[str]:
    """1.25 % slow (so that the p99 is a slow call, not the edge between the two groups),
    1 % failing, the rest fast; shuffled."""
    mix = ["slow" if i % 80 == 37 else "fail" if i % 100 == 73 else "ok" for i in range(calls)]
    random.Random(seed).shuffle(mix)
    return mix


def spread_trace_ids(calls: int) -> list[int]:
    """Trace ids whose low 64 bits (what a trace-id ratio compares) are spread evenly over
    their range, in random order: W3C ids are uniform, and a base rate of r then keeps
    exactly r of the calls, so a test checks the decision and the weights, not a draw."""
    stride = (1 << 64) // calls
    slots = list(range(calls))
    random.Random(4).shuffle(slots)
    return [(random.getrandbits(64) << 64) | (slot * stride + stride // 2) for slot in slots]


def make_calls(
    look: Callable, mix: list[str], trace_ids: list[int], padding: bytes = b""
) -> dict[int, tuple[str, float]]:
    """Each call under its trace id (an unsampled parent: tail-aware sampling ignores
    that flag), its ask followed by ``padding``; {trace id: (kind, seconds the caller
    measured)}."""
    measured: dict[int, tuple[str, float]] = {}
    requests = {kind: BytesValue(value=kind.encode() + padding) for kind in set(mix)}
    for kind, trace_id in zip(mix, trace_ids, strict=True):
        parent = trace.SpanContext(trace_id, 1, False, trace.TraceFlags(0))
        token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(parent)))
        started = time.perf_counter()
        try:
            look(requests[kind], timeout=10)
        except grpc.RpcError as error:
            assert kind == "fail" and error.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            otel_context.detach(token)
        measured[trace_id] = (kind, time.perf_counter() - started)
    return measured


def exact_quantile(values: list[float], quantile: float) -> float:
    ordered = sorted(values)
    return ordered[int(quantile * (len(ordered) - 1))]


def weighted_quantile(values: list[tuple[float, float]], quantile: float) -> float:
    """The smallest value whose cumulative weight reaches ``quantile`` of the total."""
    ordered = sorted(values)
    total = sum(weight for _, weight in ordered)
    seen = 0.0
    for value, weight in ordered:
        seen += weight
        if seen >= quantile * total:
            return value
    return ordered[-1][0]


@contextlib.contextmanager
def mixed_pair(server_pipeline: SpanPipeline, client_pipeline: SpanPipeline) -> Iterator[Any]:
    """A real server with ``MixedHandler`` and an instrumented channel to it, each with its
    own pipeline; yields the method to call. Leaving closes both, waits until every record
    is finished (a server record is finished by its worker: executor.py) and flushes and
    shuts down both pipelines, so every span kept has been exported."""
    workers = futures.ThreadPoolExecutor(max_workers=2)
    handlers = [MixedHandler().handlers()]
    server = instrumented_server(workers, handlers=handlers, pipeline=server_pipeline)
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=client_pipeline)
    try:
        yield channel.unary_unary(METHOD, BytesValue.SerializeToString, BytesValue.FromString)
    finally:
        channel.close()
        server.stop(5).wait()
        workers.shutdown(wait=True)
        for pipeline in (client_pipeline, server_pipeline):
            assert pipeline.force_flush(30)
            pipeline.shutdown()

"""``bench.instrumentation``'s tight loop: our per-call code alone, without gRPC.

Runs exactly the functions a sampled unary call runs on each side (client: start,
serializer and deserializer wrappers, finish; server: interceptor, executor pickup,
deserializer, handler and serializer wrappers, finish, trailer), back to back in one
thread, with warm caches, and hands the records to a pipeline whose exporter drops
them. The difference between this and what the same code adds inside real calls
(the per-thread table) is what running inside gRPC costs: see the notes in
bench/results/instrumentation.md. The server side needs a ``ServicerContext``; a
minimal one stands in for grpcio's here (this is a measurement, not a test).
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import grpc
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.sdk.trace.export import SpanExportResult

from grpc_overhead.instrumentation import SpanPipeline
from grpc_overhead.instrumentation.client_calls import (
    bind_slot_serializers,
    finish_client_call,
    start_client_call,
)
from grpc_overhead.instrumentation.executor import timed_executor
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CURRENT_SERVER_CALL
from grpc_overhead.instrumentation.server import ServerInterceptor


class _DroppingExporter:
    accepts_call_records = True

    def set_resource(self, resource: Any) -> None:
        pass

    def export(self, records: Any) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class _Details:
    __slots__ = ("invocation_metadata", "method")

    def __init__(self, method: str, metadata: tuple) -> None:
        self.method = method
        self.invocation_metadata = metadata


class _Context:
    """What our wrappers ask of grpcio's ServicerContext, answered at once."""

    def __init__(self) -> None:
        self._trailers: tuple = ()

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"

    def time_remaining(self) -> None:
        return None

    def code(self) -> None:
        return None

    def trailing_metadata(self) -> tuple:
        return self._trailers

    def set_trailing_metadata(self, trailers: tuple) -> None:
        self._trailers = trailers


class _InlineExecutor:
    """Runs what the server submits right away, as a worker would."""

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        fn(*args, **kwargs)


def _echo(request: BytesValue, context: Any) -> BytesValue:
    return request


def tight_loop_us(calls: int = 20_000, size: int = 1024) -> dict[str, float]:
    """Microseconds of CPU per call of our code alone, per side (median of 5 runs)."""
    pipeline = SpanPipeline(exporter=_DroppingExporter(), export_interval_ms=50)
    recorder = Recorder(pipeline)
    request = BytesValue(value=b"x" * size)
    payload = request.SerializeToString()
    handler = grpc.unary_unary_rpc_method_handler(
        _echo, BytesValue.FromString, BytesValue.SerializeToString
    )
    interceptor = ServerInterceptor(recorder)
    executor = timed_executor(_InlineExecutor())  # type: ignore[arg-type]
    method = "/bench.Echo/Echo"

    # A blocking unary call's serializer wrappers are made once per thread and read the
    # call's record from a slot (client._ThreadSlot).
    slot = SimpleNamespace(record=None)
    serialize, deserialize = bind_slot_serializers(
        slot, BytesValue.SerializeToString, BytesValue.FromString
    )

    def client_call() -> None:
        record, _metadata = start_client_call(
            recorder, "127.0.0.1:50051", method, "unary_unary", None, None, 30.0
        )
        slot.record = record
        deserialize(serialize(request))
        slot.record = None
        finish_client_call(record, grpc.StatusCode.OK, None, (("x-server-residence-ns", "1"),))

    metadata = start_client_call(recorder, "", method, "unary_unary", None, None)[1]
    details = _Details(method, metadata)

    def server_call() -> None:
        # grpcio runs the interceptor inside a copy of the serving thread's context.
        context = contextvars.copy_context()
        wrapped = context.run(interceptor.intercept_service, lambda _: handler, details)
        servicer_context = _Context()

        def behavior_runner() -> None:
            message = wrapped.request_deserializer(payload)
            response = wrapped.unary_unary(message, servicer_context)
            wrapped.response_serializer(response)

        executor.submit(context.run, behavior_runner)
        assert context.get(CURRENT_SERVER_CALL) is not None

    result = {}
    for side, call in (("client", client_call), ("server", server_call)):
        runs = []
        for _ in range(5):
            started = time.thread_time_ns()
            for _ in range(calls // 5):
                call()
            runs.append((time.thread_time_ns() - started) / (calls // 5) / 1e3)
        result[side] = round(sorted(runs)[2], 1)
    pipeline.shutdown()
    return result


if __name__ == "__main__":
    print(tight_loop_us())


def in_call_us(target: str, calls: int = 3_000, size: int = 1024) -> dict[str, float]:
    """The same client functions timed in place, inside real calls to ``target``.

    Each of our client functions is wrapped with the calling thread's CPU clock (the
    clock's own cost, calibrated, is taken off), then sampled calls run one after the
    other: µs per call of each, and of the caller thread in total. Set against
    ``tight_loop_us`` this is how much slower the same code runs between gRPC's work.
    """
    import grpc_overhead.instrumentation.client as client_module
    from grpc_overhead.instrumentation import instrument_channel

    clock = time.thread_time_ns
    spent = dict.fromkeys(("start", "serializer", "deserializer", "finish"), 0)

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def measured(*args: Any, **kwargs: Any) -> Any:
            started = clock()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] += clock() - started

        return measured

    def binder(bind_function: Callable[..., Any]) -> Callable[..., Any]:
        def bind(record: Any, serializer: Any, deserializer: Any) -> tuple[Any, Any]:
            serialize, deserialize = bind_function(record, serializer, deserializer)
            return timed("serializer", serialize), timed("deserializer", deserialize)

        return bind

    # Blocking unary calls take the per-thread slot path (bind_slot_serializers once,
    # finish_client_call); other call styles bind_serializers and finish_from_call.
    names = (
        "start_client_call",
        "finish_client_call",
        "finish_from_call",
        "bind_serializers",
        "bind_slot_serializers",
    )
    originals = {name: getattr(client_module, name) for name in names}
    pipeline = SpanPipeline(exporter=_DroppingExporter(), export_interval_ms=50)
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
    echo = channel.unary_unary(
        "/bench.Echo/Echo",
        request_serializer=BytesValue.SerializeToString,
        response_deserializer=BytesValue.FromString,
        _registered_method=True,
    )
    request = BytesValue(value=b"x" * size)
    try:
        client_module.start_client_call = timed("start", originals["start_client_call"])
        client_module.finish_client_call = timed("finish", originals["finish_client_call"])
        client_module.finish_from_call = timed("finish", originals["finish_from_call"])
        client_module.bind_serializers = binder(originals["bind_serializers"])
        client_module.bind_slot_serializers = binder(originals["bind_slot_serializers"])
        for _ in range(300):
            echo(request, timeout=30)
        started = clock()
        for _ in range(1000):
            clock()
            clock()
        clock_pair = (clock() - started) / 1000
        spent.update(dict.fromkeys(spent, 0))
        started = clock()
        for _ in range(calls):
            echo(request, timeout=30)
        caller = (clock() - started) / calls
    finally:
        for name, function in originals.items():
            setattr(client_module, name, function)
        channel.close()
        pipeline.shutdown()
    result = {name: round((ns / calls - clock_pair) / 1e3, 2) for name, ns in spent.items()}
    result["ours_total"] = round(sum(result.values()), 1)
    result["caller_thread_per_call"] = round(caller / 1e3, 1)
    return result

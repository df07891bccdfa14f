"""The pieces of ``bench.instrumentation``: plans, the echo service, telemetry, and the
server, client and OTLP-sink worker processes it drives (see that module's docstring)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import grpc
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.grpc import client_interceptor, server_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

from bench.common import (
    cpu_by_thread,
    process_cpu_ns,
    serve_commands,
    thread_cpu_ns,
)
from bench.instrumentation_propagation import ExtractingInterceptor, injecting
from grpc_overhead.instrumentation import SpanPipeline, instrument_channel, instrumented_server
from grpc_overhead.instrumentation.otlp import CallRecordOTLPExporter

NAME = "instrumentation"
#: ours at the parent-based sampling ratios production runs (OTEL_TRACES_SAMPLER=
#: parentbased_traceidratio, OTEL_TRACES_SAMPLER_ARG=ratio, set in both processes).
SAMPLED = {"ours": 1.0, "ours 10%": 0.1, "ours 1%": 0.01}
#: ours with tail-aware sampling (GRPC_OVERHEAD_SAMPLING=tail at this base rate, the
#: adaptive threshold): every call timed, slow and failed ones kept, the rest at the rate.
TAIL = {"ours tail": 0.01}
OURS = (*SAMPLED, *TAIL)
CONFIGS = ("bare", "propagation-only", "official", *OURS)
# "propagation-only": W3C trace context and nothing else: the client sends a fresh
# traceparent per call, the server parses it and makes it current for the handler (so
# the handler's own calls would continue the trace); no spans, no timestamps. The floor
# any instrumentation that propagates trace context through grpcio pays.
INSTRUMENTED = ("official", *OURS)
SEQUENTIAL, SATURATION = "sequential", "saturation"
SIDES = ("client", "server")
METHOD = "/bench.Echo/Echo"
SERVER_WORKERS = 8
# The same export settings for both instrumented configurations.
EXPORT_BATCH_SIZE = 512
EXPORT_QUEUE_SIZE = 8192
EXPORT_INTERVAL_MS = 1000
_MESSAGE_LIMIT = 64 * 1024 * 1024
_OPTIONS = [
    ("grpc.max_receive_message_length", _MESSAGE_LIMIT),
    ("grpc.max_send_message_length", _MESSAGE_LIMIT),
]


@dataclass(frozen=True)
class Payload:
    label: str
    size: int
    sequential_calls: int
    saturation_calls: int


@dataclass(frozen=True)
class Plan:
    rounds: int
    payloads: tuple[Payload, ...]
    threads: int = 8
    warmup_calls: int = 300
    block_timeout_s: float = 20.0
    budget_s: float = 600.0  # no new round starts after this


# Many short rounds rather than a few long ones: on a shared machine the load moves from
# second to second, and a round's configurations only share conditions if they run close
# together (a 1 KB round is about 10 s).
FULL = Plan(
    rounds=30,
    payloads=(
        Payload("1 KB", 1024, sequential_calls=500, saturation_calls=1500),
        Payload("1 MB", 1024 * 1024, sequential_calls=40, saturation_calls=80),
    ),
    budget_s=900.0,
)
QUICK = Plan(
    rounds=2,
    payloads=(
        Payload("1 KB", 1024, sequential_calls=200, saturation_calls=600),
        Payload("1 MB", 1024 * 1024, sequential_calls=10, saturation_calls=24),
    ),
    warmup_calls=100,
    budget_s=60.0,
)


# -- the service --------------------------------------------------------------------------------
def _echo(request: BytesValue, context: grpc.ServicerContext) -> BytesValue:
    return BytesValue(value=request.value)


def _echo_handler() -> grpc.GenericRpcHandler:
    service, method = METHOD.strip("/").split("/")
    return grpc.method_handlers_generic_handler(
        service,
        {
            method: grpc.unary_unary_rpc_method_handler(
                _echo,
                request_deserializer=BytesValue.FromString,
                response_serializer=BytesValue.SerializeToString,
            )
        },
    )


# -- telemetry of one configuration in one process ---------------------------------------------
class _Counting:
    """Counts what an exporter delivered (one addition per batch)."""

    exported_spans = 0
    failed_spans = 0

    def export(self, spans: Any) -> SpanExportResult:
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            self.exported_spans += len(spans)
        else:
            self.failed_spans += len(spans)
        return result


class _CountingOTLPExporter(_Counting, OTLPSpanExporter):
    """The official configuration's exporter: the SDK's OTLP/gRPC exporter."""


class _CountingRecordExporter(_Counting, CallRecordOTLPExporter):
    """Ours' shipped exporter: the same SDK OTLP/gRPC exporter (channel, retries,
    settings) with its translation step replaced by direct encoding of call records."""


_THREAD_ROLES = (
    ("grpc-overhead-export", "export"),
    ("OtelBatchSpanRecordProcessor", "export"),
    ("(_serve)", "grpc serving thread"),
    ("ThreadPoolExecutor", "handler pool"),
)
EXITED = "exited / unattributed"


def _thread_comm(native_id: int) -> str:
    """The kernel's name of a thread (/proc/self/task/TID/comm): gRPC core names its own
    (event_engine = I/O pollers, grpc_global_tim = timers, lifeguard)."""
    try:
        with open(f"/proc/self/task/{native_id}/comm", encoding="utf-8") as comm:
            return comm.read().strip()
    except OSError:
        return "?"


def _thread_role(native_id: int, name: str | None, side: str) -> str:
    if name is None:  # a thread gRPC's C core started
        return f"grpc core ({_thread_comm(native_id)})"
    if name == "MainThread":
        return "caller" if side == "client" else "main (idle)"
    for marker, role in _THREAD_ROLES:
        if marker in name:
            return role
    return "other python"


class _Telemetry:
    """A configuration's tracing in one process, and the process's CPU by thread role.

    "export" is the export worker thread plus what flushes cost the thread that
    asked for them (the SDK's ``force_flush`` exports on the caller's thread;
    ours waits for its worker); that flush cost is taken off the flushing thread (the
    client's caller, the server's idle main thread).
    """

    def __init__(self, config: str, side: str, sink_port: int) -> None:
        self.provider: TracerProvider | None = None
        self.pipeline: SpanPipeline | None = None
        self._processor: BatchSpanProcessor | None = None
        self._exporter: _Counting | None = None
        self._flush_cpu_ns = 0
        self._side = side
        if config in ("bare", "propagation-only"):
            return
        if config in SAMPLED:  # the standard variables, read by SpanPipeline
            os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            os.environ["OTEL_TRACES_SAMPLER_ARG"] = str(SAMPLED[config])
        elif config in TAIL:  # ours, read by SpanPipeline too
            os.environ["GRPC_OVERHEAD_SAMPLING"] = "tail"
            os.environ["GRPC_OVERHEAD_SAMPLING_RATE"] = str(TAIL[config])
        os.environ["OTEL_SERVICE_NAME"] = f"bench-{config}-{side}"
        endpoint = f"http://127.0.0.1:{sink_port}"
        if config == "official":
            self._exporter = _CountingOTLPExporter(endpoint=endpoint, insecure=True)
            self._processor = BatchSpanProcessor(
                self._exporter,
                max_queue_size=EXPORT_QUEUE_SIZE,
                schedule_delay_millis=EXPORT_INTERVAL_MS,
                max_export_batch_size=EXPORT_BATCH_SIZE,
            )
            self.provider = TracerProvider(resource=Resource.create())
            self.provider.add_span_processor(self._processor)
        else:
            self._exporter = _CountingRecordExporter(endpoint=endpoint, insecure=True)
            self.pipeline = SpanPipeline(
                exporter=self._exporter,
                max_queue_size=EXPORT_QUEUE_SIZE,
                export_batch_size=EXPORT_BATCH_SIZE,
                export_interval_ms=EXPORT_INTERVAL_MS,
            )

    def flush(self) -> None:
        started = thread_cpu_ns()
        if self._processor is not None:
            self._processor.force_flush()
        if self.pipeline is not None:
            self.pipeline.force_flush()
        self._flush_cpu_ns += thread_cpu_ns() - started

    def snapshot(self) -> dict[str, int]:
        """CPU ns so far: "process" (all threads, ever) and per live thread role."""
        total = process_cpu_ns()
        names = {thread.native_id: thread.name for thread in threading.enumerate()}
        roles: dict[str, int] = {
            "process": total,
            "export": self._flush_cpu_ns,
            "caller" if self._side == "client" else "main (idle)": -self._flush_cpu_ns,
        }
        for native_id, cpu_ns in cpu_by_thread().items():
            role = _thread_role(native_id, names.get(native_id), self._side)
            roles[role] = roles.get(role, 0) + cpu_ns
        return roles

    def flush_and_snapshot(self) -> dict[str, int]:
        self.flush()
        return self.snapshot()

    def counts(self) -> dict[str, int]:
        if self._exporter is None:
            return {}
        counts = {
            "exported_spans": self._exporter.exported_spans,
            "failed_spans": self._exporter.failed_spans,
        }
        if self.pipeline is not None:
            counts["dropped_calls"] = self.pipeline.dropped_calls
        return counts

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()
        if self.pipeline is not None:
            self.pipeline.shutdown()


def _per_call_us(before: dict[str, int], after: dict[str, int], calls: int) -> dict[str, float]:
    """CPU µs per call by thread role over a block; threads that ended during the block
    (a saturation block's callers) are what the process clock has and the live threads lack."""
    delta = {role: after.get(role, 0) - before.get(role, 0) for role in after}
    total = delta.pop("process")
    delta[EXITED] = total - sum(delta.values())
    per_call = {role: round(ns / calls / 1e3, 2) for role, ns in delta.items()}
    per_call["process"] = round(total / calls / 1e3, 2)
    return per_call


# -- processes ----------------------------------------------------------------------------------
class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = 0
        self.spans = 0

    def Export(self, request: Any, context: grpc.ServicerContext) -> Any:
        spans = sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
        with self._lock:
            self.requests += 1
            self.spans += spans
        return trace_service_pb2.ExportTraceServiceResponse()


def _sink_process(connection: Connection) -> None:
    """An OTLP trace receiver that counts spans and discards them."""
    sink = _Sink()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_OPTIONS)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    connection.send(port)
    serve_commands(connection, {"counts": lambda: {"requests": sink.requests, "spans": sink.spans}})
    server.stop(grace=1).wait()


def _server_process(connection: Connection, config: str, sink_port: int) -> None:
    telemetry = _Telemetry(config, "server", sink_port)
    pool = futures.ThreadPoolExecutor(max_workers=SERVER_WORKERS)
    handlers = [_echo_handler()]
    if config in OURS:
        server = instrumented_server(
            pool, handlers=handlers, pipeline=telemetry.pipeline, options=_OPTIONS
        )
    else:
        interceptors = []
        if config == "official":
            interceptors.append(server_interceptor(tracer_provider=telemetry.provider))
        elif config == "propagation-only":
            interceptors.append(ExtractingInterceptor())
        server = grpc.server(pool, handlers=handlers, interceptors=interceptors, options=_OPTIONS)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    connection.send(port)
    serve_commands(
        connection,
        {
            "snapshot": telemetry.snapshot,
            "flush": telemetry.flush_and_snapshot,
            "counts": telemetry.counts,
        },
    )
    server.stop(grace=1).wait()
    telemetry.shutdown()


def _sequential(call: Callable[..., Any], request: Any, calls: int, deadline: float) -> dict:
    latencies = []
    errors = 0
    clock = time.perf_counter_ns
    started = clock()
    for _ in range(calls):
        before = clock()
        try:
            call(request, timeout=30)
        except grpc.RpcError:
            errors += 1
        latencies.append(clock() - before)
        if time.monotonic() > deadline:
            break
    return {
        "calls": len(latencies),
        "errors": errors,
        "wall_ns": clock() - started,
        "latencies_ns": latencies,
    }


def _saturation(
    call: Callable[..., Any], request: Any, calls: int, threads: int, deadline: float
) -> dict:
    """``threads`` callers in a closed loop until ``calls`` calls were started."""
    tickets = itertools.count()
    done = [0] * threads
    errors = [0] * threads
    start = threading.Barrier(threads + 1)

    def caller(index: int) -> None:
        start.wait()
        while next(tickets) < calls and time.monotonic() < deadline:
            try:
                call(request, timeout=30)
            except grpc.RpcError:
                errors[index] += 1
            done[index] += 1

    workers = [threading.Thread(target=caller, args=(index,)) for index in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    started = time.perf_counter_ns()
    for worker in workers:
        worker.join()
    return {"calls": sum(done), "errors": sum(errors), "wall_ns": time.perf_counter_ns() - started}


def _client_process(connection: Connection, config: str, server_port: int, sink_port: int) -> None:
    telemetry = _Telemetry(config, "client", sink_port)
    target = f"127.0.0.1:{server_port}"
    channel = grpc.insecure_channel(target, options=_OPTIONS)
    if config == "official":
        channel = intercept_channel(channel, client_interceptor(tracer_provider=telemetry.provider))
    elif config in OURS:
        channel = instrument_channel(channel, target=target, pipeline=telemetry.pipeline)
    echo = channel.unary_unary(
        METHOD,
        request_serializer=BytesValue.SerializeToString,
        response_deserializer=BytesValue.FromString,
        _registered_method=True,
    )
    if config == "propagation-only":
        echo = injecting(echo)
    requests: dict[int, BytesValue] = {}

    def block(kind: str, size: int, calls: int, threads: int, timeout_s: float) -> dict:
        request = requests.setdefault(size, BytesValue(value=b"x" * size))
        deadline = time.monotonic() + timeout_s
        before = telemetry.snapshot()
        if kind == SEQUENTIAL:
            result = _sequential(echo, request, calls, deadline)
        else:
            result = _saturation(echo, request, calls, threads, deadline)
        result["cpu_us"] = _per_call_us(
            before, telemetry.flush_and_snapshot(), max(result["calls"], 1)
        )
        return result

    connection.send(os.getpid())
    serve_commands(connection, {"block": block, "counts": telemetry.counts})
    channel.close()
    telemetry.shutdown()

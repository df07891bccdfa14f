"""What the instrumentation costs: bare grpcio, opentelemetry-instrumentation-grpc and ours,
side by side in one run.

Three configurations of the same echo service (protobuf ``BytesValue``, unary-unary):

- ``bare``: grpcio alone;
- ``official``: ``server_interceptor()`` / ``client_interceptor()`` of
  opentelemetry-instrumentation-grpc, an SDK ``TracerProvider`` and ``BatchSpanProcessor``;
- ``ours``: ``instrumented_server`` + ``instrument_channel`` with a ``SpanPipeline``.

Both instrumented configurations pay for export the same way: the OTLP gRPC
exporter (same batch size, queue and interval) sending to a real OTLP sink that
runs in its own process and discards what it receives (after counting spans).

Every configuration has its own server process and its own client process, all
alive for the whole run, so each side's CPU is read from its own process clock
(all threads: gRPC's, the handler pool's, the export worker's). The export
worker's thread clock, plus whatever a flush costs the flushing thread, is
reported apart as "export". After every block both sides flush, so a block pays
for exporting its own spans and nothing else.

Blocks are interleaved: every round runs, for each payload and each kind of
block (sequential calls: CPU and latency; 8 client threads in a closed loop:
throughput), all three configurations in a shuffled order. Reported numbers
are medians over rounds; "added" CPU is computed per round against that
round's bare block, then the median is taken.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import asdict, dataclass, replace
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
    Worker,
    log,
    machine_info,
    markdown_table,
    median,
    percentile,
    process_cpu_ns,
    rounded,
    serve_commands,
    thread_cpu_ns,
    write_results,
)
from grpc_overhead.instrumentation import SpanPipeline, instrument_channel, instrumented_server

NAME = "instrumentation"
CONFIGS = ("bare", "official", "ours")
INSTRUMENTED = ("official", "ours")
SEQUENTIAL, SATURATION = "sequential", "saturation"
SIDES = ("client", "server")
METHOD = "/bench.Echo/Echo"
SERVER_WORKERS = 8
TARGET_ADDED_CPU_US = 25.0
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
    budget_s: float = 330.0  # no new round starts after this


FULL = Plan(
    rounds=5,
    payloads=(
        Payload("1 KB", 1024, sequential_calls=800, saturation_calls=3000),
        Payload("1 MB", 1024 * 1024, sequential_calls=40, saturation_calls=120),
    ),
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
class _CountingExporter(OTLPSpanExporter):
    """The OTLP gRPC exporter, counting what it delivered (one addition per batch)."""

    def __init__(self, endpoint: str) -> None:
        super().__init__(endpoint=endpoint, insecure=True)
        self.exported_spans = 0
        self.failed_spans = 0

    def export(self, spans: Any) -> SpanExportResult:
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            self.exported_spans += len(spans)
        else:
            self.failed_spans += len(spans)
        return result


class _Telemetry:
    """A configuration's tracing in one process, with its export CPU kept apart.

    The export cost is the export worker thread's CPU plus what flushes cost the
    thread that asked for them (the SDK's ``force_flush`` exports on the caller's
    thread; ours waits for its worker).
    """

    def __init__(self, config: str, side: str, sink_port: int) -> None:
        self.config = config
        self.provider: TracerProvider | None = None
        self.pipeline: SpanPipeline | None = None
        self._processor: BatchSpanProcessor | None = None
        self._exporter: _CountingExporter | None = None
        self._export_thread: int | None = None
        self._flush_cpu_ns = 0
        if config == "bare":
            return
        os.environ["OTEL_SERVICE_NAME"] = f"bench-{config}-{side}"
        self._exporter = _CountingExporter(f"http://127.0.0.1:{sink_port}")
        if config == "official":
            self._processor = BatchSpanProcessor(
                self._exporter,
                max_queue_size=EXPORT_QUEUE_SIZE,
                schedule_delay_millis=EXPORT_INTERVAL_MS,
                max_export_batch_size=EXPORT_BATCH_SIZE,
            )
            self.provider = TracerProvider(resource=Resource.create())
            self.provider.add_span_processor(self._processor)
            # Private attribute, read only to give the worker thread's CPU its own line.
            self._export_thread = self._processor._batch_processor._worker_thread.ident
        else:
            self.pipeline = SpanPipeline(
                exporter=self._exporter,
                max_queue_size=EXPORT_QUEUE_SIZE,
                export_batch_size=EXPORT_BATCH_SIZE,
                export_interval_ms=EXPORT_INTERVAL_MS,
            )
            self._export_thread = self.pipeline._worker.ident

    def flush(self) -> None:
        started = thread_cpu_ns()
        if self._processor is not None:
            self._processor.force_flush()
        if self.pipeline is not None:
            self.pipeline.force_flush()
        self._flush_cpu_ns += thread_cpu_ns() - started

    def snapshot(self) -> tuple[int, int]:
        """(process CPU ns, export CPU ns) so far."""
        export = self._flush_cpu_ns
        if self._export_thread is not None:
            export += thread_cpu_ns(self._export_thread)
        return process_cpu_ns(), export

    def flush_and_snapshot(self) -> tuple[int, int]:
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
    if config == "ours":
        server = instrumented_server(
            pool, handlers=handlers, pipeline=telemetry.pipeline, options=_OPTIONS
        )
    else:
        interceptors = []
        if config == "official":
            interceptors.append(server_interceptor(tracer_provider=telemetry.provider))
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
    return {"calls": len(latencies), "errors": errors, "wall_ns": clock() - started,
            "latencies_ns": latencies}  # fmt: skip


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
    elif config == "ours":
        channel = instrument_channel(channel, target=target, pipeline=telemetry.pipeline)
    echo = channel.unary_unary(
        METHOD,
        request_serializer=BytesValue.SerializeToString,
        response_deserializer=BytesValue.FromString,
        _registered_method=True,
    )
    requests: dict[int, BytesValue] = {}

    def block(kind: str, size: int, calls: int, threads: int, timeout_s: float) -> dict:
        request = requests.setdefault(size, BytesValue(value=b"x" * size))
        deadline = time.monotonic() + timeout_s
        before = telemetry.snapshot()
        if kind == SEQUENTIAL:
            result = _sequential(echo, request, calls, deadline)
        else:
            result = _saturation(echo, request, calls, threads, deadline)
        after = telemetry.flush_and_snapshot()
        result["cpu_ns"] = after[0] - before[0]
        result["export_cpu_ns"] = after[1] - before[1]
        return result

    connection.send(os.getpid())
    serve_commands(connection, {"block": block, "counts": telemetry.counts})
    channel.close()
    telemetry.shutdown()


# -- the run ------------------------------------------------------------------------------------
def _measure(
    plan: Plan, payload: Payload, kind: str, client: Worker, server: Worker
) -> dict[str, Any]:
    calls = payload.sequential_calls if kind == SEQUENTIAL else payload.saturation_calls
    server_before = server.call("snapshot")
    result = client.call(
        "block", kind, payload.size, calls, plan.threads, plan.block_timeout_s,
        timeout_s=plan.block_timeout_s + 60,
    )  # fmt: skip
    server_after = server.call("flush")
    done = max(result["calls"], 1)
    block: dict[str, Any] = {
        "calls": result["calls"],
        "errors": result["errors"],
        "wall_s": round(result["wall_ns"] / 1e9, 3),
        "client_cpu_us": result["cpu_ns"] / done / 1e3,
        "client_export_us": result["export_cpu_ns"] / done / 1e3,
        "server_cpu_us": (server_after[0] - server_before[0]) / done / 1e3,
        "server_export_us": (server_after[1] - server_before[1]) / done / 1e3,
    }
    if kind == SEQUENTIAL:
        latencies = result["latencies_ns"]
        block["latency_p50_us"] = percentile(latencies, 50) / 1e3
        block["latency_p99_us"] = percentile(latencies, 99) / 1e3
    else:
        block["throughput_calls_s"] = result["calls"] / (result["wall_ns"] / 1e9)
    return {key: rounded(value, 2) if isinstance(value, float) else value
            for key, value in block.items()}  # fmt: skip


def run(plan: Plan, seed: int | None = None) -> dict[str, Any]:
    """Start the processes, run the interleaved rounds, return the raw blocks and counts."""
    shuffler = random.Random(seed)
    started = time.monotonic()
    workers: list[Worker] = []
    try:
        sink = Worker("otlp-sink", _sink_process)
        workers.append(sink)
        sink_port = sink.wait_ready()
        servers = {config: Worker(f"server-{config}", _server_process, config, sink_port)
                   for config in CONFIGS}  # fmt: skip
        workers += servers.values()
        ports = {config: server.wait_ready() for config, server in servers.items()}
        clients = {config: Worker(f"client-{config}", _client_process, config, ports[config],
                                  sink_port) for config in CONFIGS}  # fmt: skip
        workers += clients.values()
        for client in clients.values():
            client.wait_ready()

        log(f"warming up ({plan.warmup_calls} calls per configuration and payload)")
        calls_made = dict.fromkeys(CONFIGS, 0)
        for config in CONFIGS:
            for payload in plan.payloads:
                calls = max(plan.warmup_calls // max(payload.size // 1024, 1), 5)
                warmup = Payload(payload.label, payload.size, calls, calls)
                for kind in (SEQUENTIAL, SATURATION):
                    block = _measure(plan, warmup, kind, clients[config], servers[config])
                    calls_made[config] += block["calls"]

        blocks: list[dict[str, Any]] = []
        rounds_done = 0
        for round_index in range(plan.rounds):
            if rounds_done and time.monotonic() - started > plan.budget_s:
                log(f"time budget reached: stopping after {rounds_done} rounds")
                break
            for payload in plan.payloads:
                for kind in (SEQUENTIAL, SATURATION):
                    order = list(CONFIGS)
                    shuffler.shuffle(order)
                    for position, config in enumerate(order):
                        block = _measure(plan, payload, kind, clients[config], servers[config])
                        calls_made[config] += block["calls"]
                        blocks.append({"round": round_index, "payload": payload.label,
                                       "kind": kind, "config": config, "position": position,
                                       **block})  # fmt: skip
            rounds_done += 1
            log(f"round {rounds_done}/{plan.rounds} done at {time.monotonic() - started:.0f} s")

        counts: dict[str, Any] = {
            f"{side}-{config}": {"calls": calls_made[config], **worker.call("counts")}
            for config in INSTRUMENTED
            for side, worker in (("client", clients[config]), ("server", servers[config]))
        }
        counts["sink"] = sink.call("counts")
        exported = sum(counts[f"{s}-{c}"]["exported_spans"] for s in SIDES for c in INSTRUMENTED)
        counts["complete"] = exported == counts["sink"]["spans"] and all(
            counts[f"{s}-{c}"]["exported_spans"] == calls_made[c]
            for s in SIDES for c in INSTRUMENTED
        )  # fmt: skip
        return {"rounds": rounds_done, "blocks": blocks, "export_counts": counts,
                "runtime_s": round(time.monotonic() - started, 1)}  # fmt: skip
    finally:
        for worker in reversed(workers):
            worker.stop()


# -- summary ------------------------------------------------------------------------------------
def _values(blocks: list[dict], key: str) -> list[float]:
    return [block[key] for block in blocks if block.get(key) is not None]


def _paired(blocks: list[dict], config: str, key: str, combine: Callable) -> list[float]:
    """Per round: combine(config's value, bare's value), for rounds that have both."""
    by_round: dict[int, dict[str, float]] = {}
    for block in blocks:
        by_round.setdefault(block["round"], {})[block["config"]] = block[key]
    return [combine(values[config], values["bare"]) for values in by_round.values()
            if config in values and "bare" in values]  # fmt: skip


def summarize(raw: dict[str, Any], plan: Plan) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for payload in plan.payloads:
        per_config: dict[str, Any] = {}
        for config in CONFIGS:
            mine = [b for b in raw["blocks"] if b["payload"] == payload.label]
            sequential = [b for b in mine if b["kind"] == SEQUENTIAL]
            saturation = [b for b in mine if b["kind"] == SATURATION]
            own_sequential = [b for b in sequential if b["config"] == config]
            own_saturation = [b for b in saturation if b["config"] == config]
            entry: dict[str, Any] = {
                "cpu_us_per_call": {s: rounded(median(_values(own_sequential, f"{s}_cpu_us")))
                                    for s in SIDES},
                "export_cpu_us_per_call": {
                    s: rounded(median(_values(own_sequential, f"{s}_export_us"))) for s in SIDES},
                "latency_us": {
                    "p50": rounded(median(_values(own_sequential, "latency_p50_us"))),
                    "p99": rounded(median(_values(own_sequential, "latency_p99_us"))),
                },
                "throughput_calls_s": rounded(
                    median(_values(own_saturation, "throughput_calls_s"))),
                "saturation_cpu_us_per_call": {
                    s: rounded(median(_values(own_saturation, f"{s}_cpu_us"))) for s in SIDES},
            }  # fmt: skip
            if config != "bare":
                entry["added_cpu_us"] = {
                    side: rounded(median(_paired(sequential, config, f"{side}_cpu_us",
                                                 lambda mine, bare: mine - bare)))
                    for side in SIDES
                }  # fmt: skip
                entry["saturation_added_cpu_us"] = {
                    side: rounded(median(_paired(saturation, config, f"{side}_cpu_us",
                                                 lambda mine, bare: mine - bare)))
                    for side in SIDES
                }  # fmt: skip
                entry["throughput_vs_bare"] = rounded(
                    median(_paired(saturation, config, "throughput_calls_s",
                                   lambda mine, bare: mine / bare)), 3)  # fmt: skip
            per_config[config] = entry
        results[payload.label] = per_config
    return {"results": results, "target": _evaluate(results)}


def _evaluate(results: dict[str, Any]) -> dict[str, Any]:
    """Ours: added CPU per call per side below the official instrumentation's and <= 25 us."""
    verdict: dict[str, Any] = {"rule": f"ours added CPU per call per side < official's and "
                                       f"<= {TARGET_ADDED_CPU_US:g} us (sequential blocks)"}  # fmt: skip
    met_everywhere = True
    for label, per_config in results.items():
        ours, official = per_config["ours"]["added_cpu_us"], per_config["official"]["added_cpu_us"]
        sides = {}
        for side in SIDES:
            mine, theirs = ours[side], official[side]
            below_official = mine is not None and theirs is not None and mine < theirs
            within_budget = mine is not None and mine <= TARGET_ADDED_CPU_US
            sides[side] = {
                "ours_added_us": mine,
                "official_added_us": theirs,
                "ratio_ours_to_official": rounded(mine / theirs, 2) if mine is not None
                and theirs else None,
                "below_official": below_official,
                "within_budget": within_budget,
                "met": below_official and within_budget,
            }
            met_everywhere &= below_official and within_budget
        verdict[label] = sides
    verdict["met"] = met_everywhere
    return verdict


def render_markdown(summary: dict[str, Any], info: dict[str, Any], raw: dict[str, Any]) -> str:
    headers = ["payload", "config", "client CPU µs/call", "server CPU µs/call",
               "added client µs", "added server µs", "export client/server µs",
               "p50 µs", "p99 µs", "calls/s (8 threads)", "vs bare"]  # fmt: skip
    rows = []
    for label, per_config in summary["results"].items():
        for config, entry in per_config.items():
            added = entry.get("added_cpu_us", {})
            export = entry["export_cpu_us_per_call"]
            ratio = entry.get("throughput_vs_bare")
            rows.append([
                label, config, entry["cpu_us_per_call"]["client"],
                entry["cpu_us_per_call"]["server"], added.get("client"), added.get("server"),
                f"{export['client']:.1f} / {export['server']:.1f}" if config != "bare" else "–",
                entry["latency_us"]["p50"], entry["latency_us"]["p99"],
                entry["throughput_calls_s"], f"{ratio:.2f}×" if ratio else "–",
            ])  # fmt: skip
    target = summary["target"]
    verdict_rows = []
    for label in summary["results"]:
        for side in SIDES:
            check = target[label][side]
            verdict_rows.append([
                label, side, check["ours_added_us"], check["official_added_us"],
                check["ratio_ours_to_official"], "yes" if check["met"] else "**no**",
            ])  # fmt: skip
    versions = ", ".join(f"{name} {version}" for name, version in info["versions"].items())
    return (
        f"### Instrumentation overhead ({info['date'][:10]}, {info['cpu_count']} CPUs "
        f"{info['cpu_model']}, Python {info['python']}, {versions})\n\n"
        f"Median of {raw['rounds']} interleaved rounds; unary echo of a protobuf BytesValue "
        f"over loopback, client and server in separate processes. CPU is per call per "
        f"process (all threads, export included), from sequential calls; \"added\" is the "
        f"per-round difference to bare grpcio; \"export\" is the export worker's share "
        f"(OTLP/gRPC to a local sink, batches of {EXPORT_BATCH_SIZE}).\n\n"
        + markdown_table(headers, rows)
        + f"\nTarget — {target['rule']}: **{'met' if target['met'] else 'not met'}**\n\n"
        + markdown_table(["payload", "side", "ours added µs", "official added µs",
                          "ours/official", "met"], verdict_rows)  # fmt: skip
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.instrumentation", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run (2 rounds)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--seed", type=int, help="seed of the block order shuffle")
    options = parser.parse_args(argv or [])
    plan = QUICK if options.quick else FULL
    if options.rounds:
        plan = replace(plan, rounds=options.rounds)
    info = machine_info(("grpcio", "protobuf", "opentelemetry-sdk",
                         "opentelemetry-instrumentation-grpc", "grpc-overhead"))  # fmt: skip
    raw = run(plan, options.seed)
    summary = summarize(raw, plan)
    markdown = render_markdown(summary, info, raw)
    data = {"benchmark": NAME, "machine": info, "plan": asdict(plan), **summary,
            "export_counts": raw["export_counts"], "runtime_s": raw["runtime_s"],
            "rounds_completed": raw["rounds"], "raw_blocks": raw["blocks"]}  # fmt: skip
    paths = write_results(NAME, data, markdown)
    print(markdown)
    print("results: " + ", ".join(str(path) for path in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Intake throughput: OTLP/gRPC requests in, ``otel_traces`` rows stored, spans per second.

    python -m bench.intake [--spans-per-request 512] [--requests 160] [--senders 16]

One realistic request (spans like the instrumentation's: 9 transport events,
12 span attributes, message sizes on two events) is encoded once and sent
``--requests`` times, with distinct trace ids, by ``--senders`` threads over
raw gRPC stubs to an intake on a fresh chDB store in a temporary directory.
The clock stops when ``count()`` on ``otel_traces`` reaches every span sent
(each Export call returns only once its spans are stored, so the last reply
is that moment); the senders time themselves and run in a separate process,
as a collector would. Two stage numbers come with it, on the same store:
``store_stage_spans_per_second`` (the chDB exporter alone, 32 requests per
batch: protobuf parse + mapping + MergeTree write) and
``otel_traces_insert_rows_per_second`` (a plain INSERT ... SELECT of stored
rows into a second table with the exporter's schema: the write cost alone).
Writes ``bench/results/intake.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from grpc_overhead.analyzer import schema
from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.intake.exporter import ProtobufSqlExporter
from grpc_overhead.analyzer.store import Store, open_store

RESULTS = Path(__file__).parent / "results" / "intake.json"
EVENTS = (
    "requestCreated",
    "outboundMessage",
    "outboundMessageSent",
    "serverCallStarted",
    "callScheduled",
    "inboundMessage",
    "inboundMessageRead",
    "predictionsMade",
    "clientReceivedResponse",
)


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, bool):
        return KeyValue(key=key, value=AnyValue(bool_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def realistic_request(spans: int, seed: int) -> bytes:
    rng = random.Random(seed)
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        [
            _kv("service.name", "prediction-client"),
            _kv("host.name", "bench-host"),
            _kv("service.instance.id", "bench-1"),
            _kv("telemetry.sdk.language", "python"),
            _kv("telemetry.sdk.name", "opentelemetry"),
            _kv("telemetry.sdk.version", "1.45.2"),
        ]
    )
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name, scope_spans.scope.version = "grpc_overhead.instrumentation", "0.1.0"
    start = time.time_ns()
    for index in range(spans):
        span = scope_spans.spans.add()
        span.trace_id, span.span_id = rng.randbytes(16), rng.randbytes(8)
        span.parent_span_id = rng.randbytes(8) if index % 2 else b""
        span.name, span.kind = "/prediction.PredictionService/Predict", 3 if index % 2 else 2
        span.start_time_unix_nano = start + index * 1_000
        span.end_time_unix_nano = span.start_time_unix_nano + 11_000_000
        span.attributes.extend(
            [
                _kv("rpc.system", "grpc"),
                _kv("rpc.service", "prediction.PredictionService"),
                _kv("rpc.method", "Predict"),
                _kv("rpc.grpc.status_code", 0),
                _kv("server.address", "127.0.0.1"),
                _kv("server.port", 50051),
                _kv("network.peer.address", "127.0.0.1"),
                _kv("grpc.compression", "gzip"),
                _kv("grpc_overhead.run_id", "bench"),
                _kv("rpc.request.size", 123_456),
                _kv("rpc.response.size", 2_345),
                _kv("grpc_overhead.compression_ratio", 0.25),
            ]
        )
        for offset, name in enumerate(EVENTS):
            event = span.events.add()
            event.time_unix_nano, event.name = span.start_time_unix_nano + offset * 100_000, name
            if name in ("outboundMessageSent", "inboundMessageRead"):
                event.attributes.extend(
                    [
                        _kv("message.uncompressed_size", 123_456),
                        _kv("message.compressed_size", 3_456),
                    ]
                )
    return request.SerializeToString()


def run(spans_per_request: int, requests: int, senders: int, batch_mib: int) -> dict:
    expected = spans_per_request * requests
    with tempfile.TemporaryDirectory(prefix="bench-intake-") as directory:
        store = open_store(os.path.join(directory, "store"))
        config = IntakeConfig(port=0, batch_bytes=batch_mib << 20, max_pending_bytes=256 << 20)
        intake = Intake(store, config)
        intake.start()
        # The senders run in another process, as a collector would: the intake
        # process keeps both cores' worth of time for itself and the engine.
        export_before = intake.stats().export_seconds
        sent = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.intake",
                "--send-to",
                str(intake.port),
                "--requests",
                str(requests),
                "--senders",
                str(senders),
                "--spans-per-request",
                str(spans_per_request),
            ],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent.parent,
        )
        words = sent.stdout.split()
        refused, elapsed = int(words[1]), float(words[3])
        stored = int(store.query("SELECT count() AS n FROM otel_traces")["n"][0])
        stats = intake.stats()
        intake.stop()
        stages = _stage_numbers(store, spans_per_request)
        store.close()
    return {
        "spans_per_request": spans_per_request,
        "requests": requests,
        "senders": senders,
        "batch_mib": batch_mib,
        "request_bytes": len(realistic_request(spans_per_request, 0)),
        "spans_sent": expected,
        "spans_stored": stored,
        "seconds": round(elapsed, 3),
        "spans_per_second": round(stored / elapsed),
        "refused_and_retried": refused,
        "batches": stats.batches,
        "store_busy_fraction": round((stats.export_seconds - export_before) / elapsed, 2),
        **stages,
    }


def _stage_numbers(store: Store, spans_per_request: int) -> dict[str, int]:
    batch = [realistic_request(spans_per_request, 100 + seed) for seed in range(32)]
    exporter = ProtobufSqlExporter(store)
    exporter.start()
    best = min(_timed(lambda: exporter.export(batch)) for _ in range(3))
    exporter.shutdown()
    schema_copy = schema.SchemaOptions(traces_table="bench_insert_copy")
    schema.create_schema(store, schema_copy)
    rows = int(store.query("SELECT count() AS n FROM otel_traces")["n"][0])
    copy = f"INSERT INTO {schema_copy.qualified_traces_table()} SELECT * FROM otel_traces"
    insert = min(_timed(lambda: store.command(copy)) for _ in range(3))
    return {
        "store_stage_spans_per_second": round(len(batch) * spans_per_request / best),
        "otel_traces_insert_rows_per_second": round(rows / insert),
    }


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def send(port: int, spans_per_request: int, requests: int, senders: int) -> tuple[int, float]:
    """Send the requests from this process: (UNAVAILABLE answers retried, seconds taken)."""
    variants = [realistic_request(spans_per_request, seed) for seed in range(8)]
    channel = grpc.insecure_channel(
        f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
    )
    export = channel.unary_unary(
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        request_serializer=None,
        response_deserializer=ExportTraceServiceResponse.FromString,
    )
    counter = iter(range(requests))
    lock = threading.Lock()
    refused = 0

    def sender() -> None:
        nonlocal refused
        while True:
            with lock:
                index = next(counter, None)
            if index is None:
                return
            while True:
                try:
                    export(variants[index % len(variants)], timeout=120)
                    break
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    with lock:
                        refused += 1
                    time.sleep(0.05)

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    channel.close()
    return refused, elapsed


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--spans-per-request", type=int, default=512)
    args.add_argument("--requests", type=int, default=160)
    args.add_argument("--senders", type=int, default=16)
    args.add_argument("--batch-mib", type=int, default=16)
    args.add_argument("--send-to", type=int, help=argparse.SUPPRESS)
    options = args.parse_args()
    if options.send_to:
        refused, elapsed = send(
            options.send_to, options.spans_per_request, options.requests, options.senders
        )
        print("refused", refused, "seconds", elapsed)
        return
    result = run(options.spans_per_request, options.requests, options.senders, options.batch_mib)
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

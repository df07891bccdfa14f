"""The sender process of bench.intake: replays realistic requests (``harness.otlp_requests``)
against an intake (python -m bench.intake --send-to)."""

from __future__ import annotations

import sys
import threading
import time

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from harness.otlp_requests import realistic_request, trace_id_offsets, unique

__all__ = ["realistic_request", "send", "trace_id_offsets", "unique"]


def send(port: int, spans_per_request: int, requests: int, senders: int) -> tuple[int, float]:
    """Send the requests from this process: (UNAVAILABLE answers retried, seconds taken)."""
    variants = [realistic_request(spans_per_request, seed) for seed in range(4)]
    offsets = [trace_id_offsets(variant) for variant in variants]
    print("ready", flush=True)
    sys.stdin.readline()  # "go": the measuring process is ready too
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
                    variant = index % len(variants)
                    export(unique(variants[variant], index, offsets[variant]), timeout=120)
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


# -- report ---------------------------------------------------------------------------------

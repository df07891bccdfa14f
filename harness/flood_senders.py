"""The sender processes of ``harness.memory_flood``: paced, collector-like, every answer kept.

``python -m harness.flood_senders --send-to PORT ...`` sends one process's share of a
paced phase and prints its outcomes as JSON; ``--resend-to PORT --indexes ...`` resends
refused requests with the same bytes. Separate processes, as collectors are, so the
senders' own CPU and GIL are not the measured process's.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter
from statistics import median
from typing import Any

from harness.otlp_requests import realistic_request, trace_id_offsets, unique

SPANS_PER_REQUEST = 8192
TARGET_SPANS_PER_SECOND = 150_000
INTAKE_REFUSAL = "grpc-overhead intake:"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
#: Request indexes: the phase in the top byte, so each phase's requests are told apart.
PHASE_SHIFT = 24


class Requests:
    """The four encoded requests a sender varies, and the channel it sends them on.

    Request ``index`` is variant ``index % 4`` with trace ids that start with
    ``index``: the same index gives the same bytes, so a resend is a true retry.
    """

    def __init__(self, port: int) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceResponse,
        )

        self.variants = [realistic_request(SPANS_PER_REQUEST, seed) for seed in range(4)]
        self.offsets = [trace_id_offsets(variant) for variant in self.variants]
        self.channel = grpc.insecure_channel(
            f"127.0.0.1:{port}", options=[("grpc.max_send_message_length", 64 << 20)]
        )
        self.export = self.channel.unary_unary(
            EXPORT,
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )

    def encoded(self, index: int) -> bytes:
        variant = (index & ((1 << PHASE_SHIFT) - 1)) % 4
        return unique(self.variants[variant], index, self.offsets[variant])

    def deliver(self, index: int) -> tuple[str, str]:
        """One attempt, as a collector's sending queue makes it: (outcome, status code)."""
        import grpc

        try:
            self.export(self.encoded(index), timeout=10.0)
            return "acknowledged", "OK"
        except grpc.RpcError as error:
            code, details = error.code(), error.details() or ""
            if code == grpc.StatusCode.UNAVAILABLE and details.startswith(INTAKE_REFUSAL):
                return "refused", code.name
            return "unknown", code.name


def send_phase(
    port: int, process: int, processes: int, rate: float, seconds: float, threads: int, base: int
) -> dict[str, Any]:
    """Send this process's share of a paced phase; outcomes by request index."""
    requests = Requests(port)
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    interval = SPANS_PER_REQUEST / rate  # seconds between requests, all processes together
    lock = threading.Lock()
    outcomes: dict[str, list[int]] = {"acknowledged": [], "refused": [], "unknown": []}
    codes: Counter[str] = Counter()
    late: list[float] = []
    counter = iter(range(process, 1 << 20, processes))
    started = time.monotonic()

    def sender() -> None:
        while True:
            with lock:
                k = next(counter)
            due = started + k * interval
            if due - started >= seconds or time.monotonic() - started >= seconds:
                return  # behind schedule: what was sent is the rate offered
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                with lock:
                    late.append(-wait)
            outcome, code = requests.deliver(base + k)
            with lock:
                outcomes[outcome].append(base + k)
                codes[code] += 1

    workers = [threading.Thread(target=sender) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    requests.channel.close()
    return {
        "seconds": time.monotonic() - started,
        "outcomes": outcomes,
        "codes": dict(codes),
        "late_median_s": median(late) if late else 0.0,
        "request_bytes": len(requests.variants[0]),
    }


def resend(port: int, indexes: list[int]) -> dict[str, Any]:
    """Resend refused requests with the same bytes, each until acknowledged (10 tries)."""
    requests = Requests(port)
    acknowledged, attempts = [], 0
    for index in indexes:
        for _ in range(10):
            attempts += 1
            if requests.deliver(index)[0] == "acknowledged":
                acknowledged.append(index)
                break
            time.sleep(1.0)
    requests.channel.close()
    return {"acknowledged": acknowledged, "attempts": attempts}


def main(argv: list[str] | None = None) -> int:
    """The sender processes' entry point (``python -m harness.memory_flood --send-to``)."""
    parser = argparse.ArgumentParser(prog="harness.memory_flood")
    parser.add_argument("--send-to", type=int)
    parser.add_argument("--resend-to", type=int)
    parser.add_argument("--indexes", default="-")
    parser.add_argument("--process", type=int, default=0)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--rate", type=float, default=TARGET_SPANS_PER_SECOND)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--base", type=int, default=0)
    args = parser.parse_args(argv)
    if args.send_to:
        report = send_phase(
            args.send_to,
            args.process,
            args.processes,
            args.rate,
            args.seconds,
            args.threads,
            args.base,
        )
    elif args.resend_to:
        indexes = [] if args.indexes == "-" else [int(i) for i in args.indexes.split(",")]
        report = resend(args.resend_to, indexes)
    else:
        parser.error("--send-to or --resend-to")
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

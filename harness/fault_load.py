"""Load for the fault-injection suite: senders that remember every answer they got.

Each span has an id unique in the run (sender, request, index), so the store
can be compared with what senders were told:

* acknowledged: the request was answered OK (spans the answer rejected excluded);
* refused: the intake itself answered with a refusal (its status details say
  so), or INVALID_ARGUMENT; the sender gave up on it;
* unknown: the sender gave up after answers that were not the intake's (its
  own deadline, a connection cut by a kill -9): either outcome is allowed;
* poison: spans the intake must never store (values nested too deep).

Senders retry UNAVAILABLE and DEADLINE_EXCEEDED with the same bytes, as the
collector and the SDK exporters do, so a request refused first and stored on
a retry counts once, and any second copy shows up as a duplicate.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from harness import fault_load_http

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
INTAKE_REFUSAL = "grpc-overhead intake:"
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
#: Nesting beyond the intake's limit (32): the span is rejected alone.
POISON_DEPTH = 40


@dataclass
class Ledger:
    """What the senders were told, by span id (lowercase hex, as ``otel_traces.SpanId``)."""

    acknowledged: set[str] = field(default_factory=set)
    refused: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    poison: set[str] = field(default_factory=set)
    requests: Counter[str] = field(default_factory=Counter)
    attempts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, outcome: str, spans: list[str], poison: list[str]) -> None:
        with self.lock:
            self.requests[outcome] += 1
            {"acknowledged": self.acknowledged, "refused": self.refused}.get(
                outcome, self.unknown
            ).update(spans)
            self.poison.update(poison)

    def attempt(self, kind: str) -> None:
        with self.lock:
            self.attempts[kind] += 1


def _deep_value(depth: int) -> AnyValue:
    value = AnyValue(string_value="x")
    for _ in range(depth):
        outer = AnyValue()
        outer.array_value.values.append(value)
        value = outer
    return value


_POISON_VALUE = _deep_value(POISON_DEPTH)


def span_id(sender: int, request: int, index: int) -> bytes:
    return sender.to_bytes(2, "big") + request.to_bytes(4, "big") + index.to_bytes(2, "big")


def build_request(sender: int, number: int, spans: int, poison: bool) -> tuple[bytes, list, list]:
    """(encoded request, its good span ids, its poison span ids)."""
    message = ExportTraceServiceRequest()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.append(
        KeyValue(key="service.name", value=AnyValue(string_value=f"fault-sender-{sender}"))
    )
    scope = resource_spans.scope_spans.add()
    now = time.time_ns()
    good, bad = [], []
    for index in range(spans + (1 if poison else 0)):
        identifier = span_id(sender, number, index)
        span = Span(
            trace_id=b"\x0f" * 8 + identifier,
            span_id=identifier,
            name="fault/Load",
            kind=Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=now,
            end_time_unix_nano=now + 1000,
        )
        span.attributes.append(KeyValue(key="rpc.system", value=AnyValue(string_value="grpc")))
        if index == spans:  # the poison span
            span.attributes.append(KeyValue(key="deep", value=_POISON_VALUE))
            bad.append(identifier.hex())
        else:
            good.append(identifier.hex())
        scope.spans.append(span)
    return message.SerializeToString(), good, bad


@dataclass
class SenderPlan:
    """How one sender behaves; every loop is bounded by ``requests`` and ``stop``."""

    sender: int
    target: str
    requests: int
    spans: int = 50
    deadline_s: float = 10.0
    poison_every: int = 0  # 0: never
    garbage_every: int = 0
    attempts: int = 6
    pause_s: float = 0.0
    #: "grpc" (``target`` host:port), "http" (``target`` a /v1/traces URL; gzip'd
    #: protobuf) or "http-json" (OTLP/JSON).
    transport: str = "grpc"
    #: The ``Authorization`` value sent with every request ('' none).
    authorization: str = ""


def send(plan: SenderPlan, ledger: Ledger, stop: threading.Event) -> None:
    """Send ``plan.requests`` requests (fewer if ``stop`` is set), recording every outcome."""
    if plan.transport != "grpc":
        _send_http(plan, ledger, stop)
        return
    channel = grpc.insecure_channel(plan.target)
    export = channel.unary_unary(
        EXPORT, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
    )
    rng = random.Random(plan.sender)
    try:
        for number in range(plan.requests):
            if stop.is_set():
                return
            if plan.garbage_every and number % plan.garbage_every == plan.garbage_every - 1:
                _send_garbage(export, ledger)
                continue
            poison = bool(plan.poison_every) and number % plan.poison_every == 0
            data, good, bad = build_request(plan.sender, number, plan.spans, poison)
            outcome = _deliver(export, data, plan, ledger, stop, rng)
            ledger.record(outcome, good, bad)
            if plan.pause_s:
                stop.wait(plan.pause_s)
    finally:
        channel.close()


def _deliver(
    export: grpc.UnaryUnaryMultiCallable,
    data: bytes,
    plan: SenderPlan,
    ledger: Ledger,
    stop: threading.Event,
    rng: random.Random,
) -> str:
    """Send with retries; returns acknowledged, refused or unknown."""
    last = "unknown"
    metadata = (("authorization", plan.authorization),) if plan.authorization else None
    for attempt in range(plan.attempts):
        try:
            export(data, timeout=plan.deadline_s, metadata=metadata)
            ledger.attempt("ok")
            return "acknowledged"
        except grpc.RpcError as error:
            code, details = error.code(), error.details() or ""
            ledger.attempt(code.name)
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                return "refused"
            last = "refused" if details.startswith(INTAKE_REFUSAL) else "unknown"
            if code not in RETRYABLE or stop.is_set():
                return last
        stop.wait(min(2.0, 0.1 * 2**attempt) * (0.5 + rng.random()))
    return last


def _send_http(plan: SenderPlan, ledger: Ledger, stop: threading.Event) -> None:
    rng = random.Random(plan.sender)
    json_body = plan.transport == "http-json"
    for number in range(plan.requests):
        if stop.is_set():
            return
        if plan.garbage_every and number % plan.garbage_every == plan.garbage_every - 1:
            fault_load_http.send_garbage(plan.target, number // plan.garbage_every, ledger.attempt)
            with ledger.lock:
                ledger.requests["garbage"] += 1
            continue
        poison = bool(plan.poison_every) and number % plan.poison_every == 0
        data, good, bad = build_request(plan.sender, number, plan.spans, poison)
        outcome = fault_load_http.deliver(
            plan.target,
            data,
            json_body,
            plan.attempts,
            plan.deadline_s,
            ledger.attempt,
            stop,
            rng,
            plan.authorization,
        )
        ledger.record(outcome, good, bad)
        if plan.pause_s:
            stop.wait(plan.pause_s)


def _send_garbage(export: grpc.UnaryUnaryMultiCallable, ledger: Ledger) -> None:
    try:
        export(b"\x0a\xff\xff\xff\x0f", timeout=10)
        ledger.attempt("garbage-accepted")
    except grpc.RpcError as error:
        ledger.attempt(f"garbage-{error.code().name}")
    with ledger.lock:
        ledger.requests["garbage"] += 1


@dataclass(frozen=True)
class Scale:
    """How much load a run of the suite sends, and how its crash phase kills."""

    senders: int
    requests: int
    spans: int
    crash_seconds: float
    kills: int


def run_senders(plans: list[tuple[SenderPlan, Ledger]], stop: threading.Event) -> list:
    threads = [
        threading.Thread(target=send, args=(plan, ledger, stop), daemon=True)
        for plan, ledger in plans
    ]
    for thread in threads:
        thread.start()
    return threads


def stored_counts(directory: str) -> dict[str, int]:
    from grpc_overhead.analyzer.store import open_store

    with open_store(directory) as store:
        frame = store.query("SELECT SpanId, count() AS n FROM otel_traces GROUP BY SpanId")
    return dict(zip(frame["SpanId"], (int(n) for n in frame["n"]), strict=True))


def invariants(ledger: Ledger, stored: dict[str, int]) -> dict[str, int]:
    """The three invariants' numbers for one path (all zero when they hold)."""
    return {
        "spans_acknowledged": len(ledger.acknowledged),
        "spans_refused": len(ledger.refused),
        "spans_unknown": len(ledger.unknown),
        "poison_spans": len(ledger.poison),
        "lost": len(ledger.acknowledged - stored.keys()),
        "refused_but_stored": len(ledger.refused & stored.keys()),
        "poison_stored": len(ledger.poison & stored.keys()),
        "duplicates": sum(
            count - 1
            for span in ledger.acknowledged | ledger.refused | ledger.unknown
            if (count := stored.get(span, 0)) > 1
        ),
    }

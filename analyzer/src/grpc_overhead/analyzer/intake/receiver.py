"""The OTLP/gRPC trace receiver: ``TraceService/Export`` on a grpc server.

The handler takes the request as bytes (no deserializer): decoding happens
once, in the exporter, in a batch. Answers, per the OTLP specification:

* success, with ``partial_success`` (``rejected_spans`` + ``error_message``)
  when some spans were individually invalid;
* INVALID_ARGUMENT when the request cannot be decoded at all (not retryable);
* UNAVAILABLE when the store is down or not keeping up (retryable: the
  collector's retry queue resends). RESOURCE_EXHAUSTED would be retryable
  only with RetryInfo attached, so it is not used.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from grpc_overhead.analyzer.errors import brief
from grpc_overhead.analyzer.intake.exporter import RequestOutcome
from grpc_overhead.analyzer.intake.processor import BatchProcessor, Pending, Refused

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
EMPTY_RESPONSE = ExportTraceServiceResponse().SerializeToString()
#: The intake's longest wait for the store before it refuses a request (UNAVAILABLE,
#: not stored). Shorter than the collector's exporter timeout (``timeout: 10s`` in
#: collector/embedded.yaml), so the collector hears the answer instead of giving up
#: on a request that might still be stored.
DEFAULT_WAIT_TIMEOUT_S = 5.0


@dataclass
class IntakeStats:
    """Counters since start (read them any time; updates are not atomic across fields)."""

    requests_received: int = 0
    spans_received: int = 0
    spans_accepted: int = 0
    spans_rejected: int = 0
    requests_rejected: int = 0
    requests_refused: int = 0
    #: Requests without valid credentials (``security``): answered, nothing stored.
    requests_unauthenticated: int = 0
    spans_inserted: int = 0
    #: Spans of retries (new bytes, same spans) that were stored already: not stored again.
    duplicate_spans: int = 0
    batches: int = 0
    failed_batches: int = 0
    pending_bytes: int = 0
    export_seconds: float = 0.0
    last_error: str = ""


class TraceReceiver:
    def __init__(
        self,
        processor: BatchProcessor,
        *,
        wait_timeout: float = DEFAULT_WAIT_TIMEOUT_S,
    ) -> None:
        self.processor = processor
        self.wait_timeout = wait_timeout
        self._lock = threading.Lock()
        self._stats = IntakeStats()

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "Export": grpc.unary_unary_rpc_method_handler(
                    self.export,
                    request_deserializer=None,  # raw bytes
                    response_serializer=None,  # we hand back bytes too
                )
            },
        )

    def stats(self) -> IntakeStats:
        with self._lock:
            snapshot = IntakeStats(**vars(self._stats))
        batch = self.processor.stats
        snapshot.spans_inserted = batch.rows_inserted
        snapshot.duplicate_spans = batch.duplicate_spans
        snapshot.batches = batch.batches
        snapshot.failed_batches = batch.failed_batches
        snapshot.pending_bytes = self.processor.pending_bytes
        snapshot.export_seconds = batch.export_seconds
        snapshot.last_error = snapshot.last_error or batch.last_error
        return snapshot

    def _count(self, **increments: int) -> None:
        with self._lock:
            for name, value in increments.items():
                setattr(self._stats, name, getattr(self._stats, name) + value)

    def export(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        """``TraceService/Export``: the OTLP/gRPC answer to ``take``'s outcome."""
        try:
            outcome = self.take(request, context.time_remaining(), context.is_active)
        except Refused as refusal:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"grpc-overhead intake: {brief(refusal)}")
        except Malformed as malformed:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(malformed))
        return response_bytes(outcome)

    def take(
        self,
        request: bytes,
        time_remaining: float | None,
        is_active: Callable[[], bool],
    ) -> RequestOutcome:
        """Store one encoded ``ExportTraceServiceRequest``; the outcome once it is stored.

        The transport-neutral part of both receivers (gRPC and HTTP). Raises
        ``Refused`` (not stored: retry later) or ``Malformed`` (not decodable: do not
        retry). ``time_remaining``: the caller's deadline, None if it has none;
        ``is_active``: whether the caller is still there to hear the answer.
        """
        self._count(requests_received=1)
        if not request:
            return RequestOutcome()
        try:
            pending = self.processor.submit(request)
            outcome = self._wait(pending, time_remaining, is_active)
        except Refused as refusal:
            self._count(requests_refused=1)
            with self._lock:
                self._stats.last_error = brief(refusal)
            raise
        if outcome.malformed:
            self._count(requests_rejected=1)
            raise Malformed(brief(outcome.error))
        self._count(
            spans_received=outcome.spans,
            spans_accepted=outcome.accepted,
            spans_rejected=outcome.rejected,
        )
        return outcome

    def refuse_malformed(self) -> None:
        """Count a request the HTTP receiver could not even decode (bad JSON, bad gzip)."""
        self._count(requests_received=1, requests_rejected=1)

    def _wait(
        self, pending: Pending, time_remaining: float | None, is_active: Callable[[], bool]
    ) -> RequestOutcome:
        """Wait for ``pending``'s outcome, answering before the caller's own deadline.

        The wait ends ``DEADLINE_MARGIN`` before the caller's deadline (and after
        ``wait_timeout`` at most): a request still waiting then is withdrawn and
        refused, so it is never stored later. One already being stored is waited
        for and remembered, so the caller's retry cannot store it twice.
        """
        timeout = self.wait_timeout
        if time_remaining is not None:
            timeout = max(0.0, min(timeout, time_remaining - deadline_margin(time_remaining)))
        try:
            outcome = pending.wait(timeout)
        except TimeoutError:
            if self.processor.withdraw(pending):
                raise Refused(
                    f"timed out after {timeout:.1f} s waiting for the store; not stored, retry"
                ) from None
            # Being stored right now: the caller may leave before it hears the outcome.
            self.processor.remember(pending)
            try:
                outcome = pending.wait(STORING_WAIT_S)
            except TimeoutError:
                raise Refused("the store is not answering") from None
        else:
            if not is_active():
                self.processor.remember(pending)
        return outcome


class Malformed(ValueError):
    """A request that cannot be decoded at all: the sender must not retry it."""


def response_bytes(outcome: RequestOutcome) -> bytes:
    """The encoded ``ExportTraceServiceResponse``: empty, or with ``partial_success``."""
    if not outcome.rejected:
        return EMPTY_RESPONSE
    return response_message(outcome).SerializeToString()


def response_message(outcome: RequestOutcome) -> ExportTraceServiceResponse:
    if not outcome.rejected:
        return ExportTraceServiceResponse()
    return ExportTraceServiceResponse(
        partial_success=ExportTracePartialSuccess(
            rejected_spans=outcome.rejected, error_message=brief(outcome.error)
        )
    )


#: Longest wait for a request whose batch is already being written.
STORING_WAIT_S = 120.0


def deadline_margin(remaining: float) -> float:
    """Time kept back from a caller's deadline to answer in: a fifth of it, 2 s at most."""
    return min(2.0, remaining / 5)


def serve_receiver(
    receiver: TraceReceiver,
    host: str,
    port: int,
    *,
    workers: int = 32,
    max_message_bytes: int = 64 << 20,
    extra_ports: Sequence[int] = (),
    tls: grpc.ServerCredentials | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
) -> tuple[grpc.Server, int, list[int]]:
    """A started grpc server with the receiver on ``host:port`` (0: any free port); over
    TLS with ``tls``, every call through ``interceptors`` (authentication: ``security``).

    ``extra_ports`` are further ports the same server listens on when they are
    free (serve's standard OTLP port): one another process holds is skipped,
    never fatal (grpcio logs a line for it: callers that can check first do).
    Returns the server, the bound port and the extra ports bound.
    """
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="intake-grpc"),
        handlers=[receiver.handler()],
        interceptors=list(interceptors),
        options=options,
    )

    def add_port(address: str) -> int:
        if tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, tls)

    address = _address(host, port)
    bound = add_port(address)
    if bound == 0:
        raise OSError(f"cannot listen on {address}: address in use or not available")
    extra_bound = []
    for extra in extra_ports:
        try:  # grpcio answers 0 or raises RuntimeError for an address in use
            if add_port(_address(host, extra)):
                extra_bound.append(extra)
        except RuntimeError:
            pass
    server.start()
    return server, bound, extra_bound


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

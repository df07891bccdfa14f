"""``bench.instrumentation``'s "propagation-only" configuration: W3C trace context through
gRPC metadata and nothing else (no spans, no timestamps, no export).

What any instrumentation that propagates trace context through grpcio must do per
call, written as lean as it can be: the client generates a trace id and span id and
sends them as a ``traceparent`` header; the server parses the header and makes the
remote context current while the handler runs (so calls the handler makes would
continue the trace), through the only hook grpcio offers, a server interceptor that
wraps the handler. Ours at 1% sampling is judged against this floor.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace

_bits = random.getrandbits
_attach, _detach = otel_context.attach, otel_context.detach
_set_span_in_context = trace.set_span_in_context
_SpanContext, _NonRecordingSpan = trace.SpanContext, trace.NonRecordingSpan


def injecting(call: Callable[..., Any]) -> Callable[..., Any]:
    """A unary multicallable that sends a fresh W3C traceparent with every call."""

    def with_traceparent(request: Any, timeout: float | None = None) -> Any:
        traceparent = f"00-{_bits(128) or 1:032x}-{_bits(64) or 1:016x}-01"
        return call(request, timeout=timeout, metadata=(("traceparent", traceparent),))

    return with_traceparent


def _remote_context(metadata: Any) -> Any:
    for key, value in metadata or ():
        if key == "traceparent" and len(value) >= 55:
            try:
                trace_id, span_id = int(value[3:35], 16), int(value[36:52], 16)
                flags = trace.TraceFlags(int(value[53:55], 16) & 1)
            except ValueError:
                return None
            span = _NonRecordingSpan(_SpanContext(trace_id, span_id, True, flags))
            return _set_span_in_context(span)
    return None


class ExtractingInterceptor(grpc.ServerInterceptor):
    """Makes the caller's trace context current while a unary-unary handler runs."""

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        if handler is None or handler.unary_unary is None:
            return handler
        remote = _remote_context(details.invocation_metadata)
        if remote is None:
            return handler
        behavior = handler.unary_unary

        def in_context(request: Any, context: grpc.ServicerContext) -> Any:
            token = _attach(remote)
            try:
                return behavior(request, context)
            finally:
                _detach(token)

        return handler._replace(unary_unary=in_context)

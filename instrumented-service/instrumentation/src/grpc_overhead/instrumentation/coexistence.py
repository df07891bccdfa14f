"""Next to another gRPC instrumentation (opentelemetry-instrumentation-grpc): one call, one trace.

With both active, every RPC has four spans: theirs and ours on each side. The
decision (docs/architecture.md, "Next to OpenTelemetry's gRPC instrumentation"):

* **One trace.** Their span and ours on one side are parent and child, in
  whichever order the two wrap each other: when theirs is outside, ours
  starts inside it (its parent is their span); when ours is outside, our
  span is made current while the inner call runs, so theirs becomes our child.
* **Theirs is folded into ours.** Their span of a call we record gets the
  attribute ``grpc_overhead.folded_into`` = our span id; the analyzer skips
  spans carrying it, so the call counts once, with our transport events.
  Their spans still reach Jaeger or Tempo unchanged otherwise.
* **One key per call.** The request carries one ``traceparent``: the
  innermost instrumentation's. When that is theirs (ours outside), our client
  span says so in ``grpc_overhead.call_span_id``, and the analyzer keys the
  call by it, so our client and server halves still meet.

A span of theirs is recognised when it starts while our call is the current
one (``FoldingSpanProcessor``, on the SDK tracer provider their spans come
from) or when ours starts inside theirs (``fold_enclosing``): same kind, same
method. Calls we do not sample are left to theirs, so every RPC counts once.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import SpanKind

from grpc_overhead.instrumentation.records import (
    CURRENT_CLIENT_CALL,
    CURRENT_SERVER_CALL,
    CallRecord,
)
from grpc_overhead.instrumentation.vocabulary import CALL_SPAN_ID, FOLDED_INTO

_LOGGER = logging.getLogger(__name__)
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_equipped: weakref.WeakSet[Any] = weakref.WeakSet()


def _same_method(name: str, method: str) -> bool:
    """Span names are '/pkg.Service/Method' (grpcio's full method) or without the slash."""
    return name == method or name.lstrip("/") == method.lstrip("/")


def _fold(span: Any, record: CallRecord) -> None:
    span.set_attribute(FOLDED_INTO, f"{record.span_id:016x}")


class FoldingSpanProcessor(SpanProcessor):
    """Marks another instrumentation's span of a call we record as it starts (ours outside).

    Costs one context-variable read per span started anywhere in the process.
    """

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        kind = span.kind
        if kind is SpanKind.CLIENT:
            record = CURRENT_CLIENT_CALL.get()
        elif kind is SpanKind.SERVER:
            record = CURRENT_SERVER_CALL.get()
        else:
            return
        if record is None or record.finished or not _same_method(span.name, record.method):
            return
        _fold(span, record)
        if record.client:
            # Theirs is inner: the traceparent the request carries is theirs.
            attributes = record.attributes if record.attributes is not None else {}
            attributes[CALL_SPAN_ID] = f"{span.get_span_context().span_id:016x}"
            record.attributes = attributes

    def on_end(self, span: Any) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def install(provider: Any = None) -> bool:
    """Add the folding processor to ``provider`` (default: the global one) once.

    True when that provider has it (an SDK ``TracerProvider``); a proxy or no-op
    provider records no spans of anyone's, so there is nothing to fold.
    """
    provider = provider if provider is not None else trace.get_tracer_provider()
    if provider in _equipped:
        return True
    add = getattr(provider, "add_span_processor", None)
    if add is None:
        return False
    try:
        add(FoldingSpanProcessor())
        _equipped.add(provider)
    except Exception:  # telemetry never breaks the host
        _LOGGER.warning("could not add the folding span processor", exc_info=True)
        return False
    return True


def fold_enclosing(record: CallRecord) -> None:
    """Ours starts inside theirs (theirs outside): fold their current span into ours."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    kind = getattr(span, "kind", None)
    wanted = SpanKind.CLIENT if record.client else SpanKind.SERVER
    if kind is wanted and _same_method(getattr(span, "name", ""), record.method):
        _fold(span, record)


def enter_client_call(record: CallRecord) -> tuple[object, object]:
    """Make our client span current while the inner call starts (ours outside): spans
    another instrumentation starts there become its children and are folded."""
    span = trace.NonRecordingSpan(
        trace.SpanContext(record.trace_id, record.span_id, False, _SAMPLED)
    )
    return CURRENT_CLIENT_CALL.set(record), otel_context.attach(trace.set_span_in_context(span))


def leave_client_call(tokens: tuple[object, object]) -> None:
    call_token, context_token = tokens
    otel_context.detach(context_token)
    CURRENT_CLIENT_CALL.reset(call_token)

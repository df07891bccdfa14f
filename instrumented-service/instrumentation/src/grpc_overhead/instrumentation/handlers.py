"""grpcio handler plumbing shared by the server wrappers, and the wrapper of calls the
sampler left out.

An unsampled call is not timed at all: no record, no timestamps, its (de)serializers
untouched. Only its trace context is made current while the handler runs, so calls
the handler makes carry the caller's trace id with the not-sampled flag and the next
service follows the decision (parent-based sampling), as an SDK's non-recording span
would. That costs one context attach/detach per call, the same as any propagator.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace

# grpcio's own handler type, reached through its public factory (custom handler classes
# are accepted as input; what we return is always grpcio's).
RpcMethodHandler = type(grpc.unary_unary_rpc_method_handler(lambda request, context: None))
BEHAVIOR_INDEX = {"unary_unary": 0, "unary_stream": 1, "stream_unary": 2, "stream_stream": 3}
BEHAVIOR_ATTRIBUTES = {
    (False, False): "unary_unary",
    (False, True): "unary_stream",
    (True, False): "stream_unary",
    (True, True): "stream_stream",
}
PLAIN, COROUTINE, ASYNC_GENERATOR = 0, 1, 2
_behavior_kinds: dict[Any, int] = {}
_UNSAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)
_attach, _detach = otel_context.attach, otel_context.detach


def behavior_kind(behavior: Any) -> int:
    """How grpcio's aio server will run a behavior (it decides by inspecting it)."""
    kind = _behavior_kinds.get(behavior)
    if kind is None:
        if inspect.isasyncgenfunction(behavior):
            kind = ASYNC_GENERATOR
        elif inspect.iscoroutinefunction(behavior):
            kind = COROUTINE
        else:
            kind = PLAIN
        if len(_behavior_kinds) < 4096:
            _behavior_kinds[behavior] = kind
    return kind


def replace_behavior(
    handler: Any, attribute: str, behavior: Callable[..., Any], deserializer: Any, serializer: Any
) -> Any:
    """A copy of ``handler`` with another behavior and (de)serializers.

    Positional construction: namedtuple._replace costs several times more per call.
    """
    behaviors = [
        handler.unary_unary,
        handler.unary_stream,
        handler.stream_unary,
        handler.stream_stream,
    ]
    behaviors[BEHAVIOR_INDEX[attribute]] = behavior
    return RpcMethodHandler(
        handler.request_streaming,
        handler.response_streaming,
        deserializer,
        serializer,
        *behaviors,
    )


class Unsampled:
    """A call the sampler left out: just the trace context its handler runs in."""

    __slots__ = ("remote", "span_id", "trace_id")

    def __init__(self, trace_id: int, span_id: int, remote: bool) -> None:
        self.trace_id = trace_id
        self.span_id = span_id
        self.remote = remote

    def context(self) -> otel_context.Context:
        span_context = trace.SpanContext(self.trace_id, self.span_id, self.remote, _UNSAMPLED)
        return trace.set_span_in_context(trace.NonRecordingSpan(span_context))


class _InContext:
    """A sync response iterator resumed inside the call's trace context."""

    __slots__ = ("_context", "_iterator")

    def __init__(self, iterator: Iterator[Any], context: otel_context.Context) -> None:
        self._iterator = iterator
        self._context = context

    def __iter__(self) -> _InContext:
        return self

    def __next__(self) -> Any:
        token = _attach(self._context)
        try:
            return next(self._iterator)
        finally:
            _detach(token)


def wrap_unsampled(handler: Any, call: Unsampled, aio: bool) -> Any:
    """``handler`` whose behavior runs inside the unsampled call's trace context."""
    attribute = BEHAVIOR_ATTRIBUTES[(handler.request_streaming, handler.response_streaming)]
    behavior = getattr(handler, attribute)
    if behavior is None or getattr(behavior, "experimental_non_blocking", False):
        return handler
    kind = behavior_kind(behavior) if aio else PLAIN
    unary_response = not handler.response_streaming

    if kind == COROUTINE:

        async def in_context_coroutine(request: Any, context: Any) -> Any:
            token = _attach(call.context())
            try:
                return await behavior(request, context)
            finally:
                _detach(token)

        wrapped: Callable[..., Any] = in_context_coroutine
    elif kind == ASYNC_GENERATOR:

        async def in_context_async_generator(request: Any, context: Any) -> Any:
            token = _attach(call.context())
            try:
                async for response in behavior(request, context):
                    yield response
            finally:
                _detach(token)

        wrapped = in_context_async_generator
    else:

        def in_context(request: Any, context: Any) -> Any:
            trace_context = call.context()
            token = _attach(trace_context)
            try:
                result = behavior(request, context)
            finally:
                _detach(token)
            return result if unary_response else _InContext(iter(result), trace_context)

        wrapped = in_context
    pool = getattr(behavior, "experimental_thread_pool", None)
    if pool is not None:
        wrapped.experimental_thread_pool = pool  # type: ignore[attr-defined]
    return replace_behavior(
        handler, attribute, wrapped, handler.request_deserializer, handler.response_serializer
    )

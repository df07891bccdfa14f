"""Server-side per-call wrappers shared by the sync and aio servers.

grpcio binds a call's deserializer, handler and serializer through one
``RpcMethodHandler``; the interceptor replaces it with closures bound to the
call's ``CallRecord`` (closures, not thread-locals or contextvars: the request
deserializer of a sync server runs on the serving thread, outside the call's
context). Wrappers keep the handler's kind (plain function, generator,
coroutine function, async generator function) because grpcio's aio server
decides how to run a handler by inspecting it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace

from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.coexistence import fold_enclosing
from grpc_overhead.instrumentation.handlers import (
    ASYNC_GENERATOR,
    BEHAVIOR_ATTRIBUTES,
    PLAIN,
    Unsampled,
    behavior_kind,
    replace_behavior,
)
from grpc_overhead.instrumentation.propagation import parse_traceparent, read_incoming
from grpc_overhead.instrumentation.recorder import Recorder, new_span_id
from grpc_overhead.instrumentation.records import (
    CURRENT_SERVER_CALL,
    STATUS_CANCELLED,
    STATUS_UNKNOWN,
    CallRecord,
)
from grpc_overhead.instrumentation.servicers import handler_returned
from grpc_overhead.instrumentation.vocabulary import (
    CALL_SCHEDULED,
    INSTANCE_TRAILER,
    INTERCEPTORS_ENTERED,
    INTERCEPTORS_RETURNED,
    KEPT_TRAILER,
    RESIDENCE_TRAILER,
    SERVER_CALL_STARTED,
)

_LOGGER = logging.getLogger(__name__)
_INTERNAL = 13
_SAMPLED = trace.TraceFlags(trace.TraceFlags.SAMPLED)
_UNSAMPLED = trace.TraceFlags(trace.TraceFlags.DEFAULT)
_CALL_TYPES = {
    (False, False): "unary_unary",
    (False, True): "unary_stream",
    (True, False): "stream_unary",
    (True, True): "stream_stream",
}
#: gRPC core's longest deadline (27,000 hours); beyond it means "no deadline".
_LONGEST_DEADLINE_S = 27_000 * 3600 + 1


def start_server_record(
    recorder: Recorder, details: grpc.HandlerCallDetails, handler: Any, started: int
) -> CallRecord | Unsampled:
    """The call's record, or, when the call is not sampled, the trace context to make
    current for its handler (then nothing is timed and no span is built)."""
    traceparent, run_id = read_incoming(details.invocation_metadata)
    parent = parse_traceparent(traceparent) if traceparent else None
    if parent is None:
        trace_id, parent_span_id, parent_sampled = new_span_id(128) or 1, 0, None
    else:
        trace_id, parent_span_id, parent_sampled = parent
    sampler = recorder.sampler
    if not sampler.should_sample(trace_id, parent_sampled):
        return Unsampled(trace_id, parent_span_id or new_span_id(64) or 1, parent is not None)
    call_type = _CALL_TYPES[(handler.request_streaming, handler.response_streaming)]
    record = CallRecord(
        recorder,
        False,
        details.method,
        call_type,
        trace_id,
        new_span_id(64) or 1,
        parent_span_id,
        started,
    )
    record.event(SERVER_CALL_STARTED, started)
    record.run_id = run_id or recorder.run_id
    if sampler.tail is not None:
        record.parent_sampled = parent_sampled
        record.flagged = sampler.tail.flag(trace_id, parent_sampled)
    return record


def _status_code(context: Any) -> tuple[int, str | None] | None:
    """The non-OK status a handler set on its context (set_code / abort), if any."""
    try:
        code = context.code()
    except (AttributeError, NotImplementedError):
        return None
    if code is None or code is grpc.StatusCode.OK:
        return None
    try:
        details = context.details()
    except (AttributeError, NotImplementedError):
        details = None
    if isinstance(details, bytes):
        details = details.decode("utf-8", "replace")
    return code.value[0], details


def _record_failure(record: CallRecord, context: Any, exception: BaseException) -> None:
    status = _status_code(context)
    if status is not None:
        record.fail(status[0], status[1], exception)
    elif isinstance(exception, (GeneratorExit, asyncio.CancelledError)):
        record.fail(STATUS_CANCELLED, "cancelled", exception)
    else:
        record.fail(STATUS_UNKNOWN, f"{type(exception).__name__}: {exception}", exception)


def _record_handler_status(record: CallRecord, context: Any) -> None:
    status = _status_code(context)
    if status is not None:
        record.fail(status[0], status[1])


def chain_returned(record: CallRecord, returned: int) -> None:
    """The interceptor chain's behavior (everything inside our interceptor) returned.

    Where the servicer's method was timed innermost (servicers.py) this ends the
    chain's after-work (server_interceptors); otherwise the chain is all we saw of the
    handler, and its return is the handler's (predictionsMade, as before).
    """
    if record.handler_started:
        record.event(INTERCEPTORS_RETURNED, returned)
    else:
        handler_returned(record, returned)


def _peer(context: Any) -> str | None:
    try:
        return context.peer()
    except Exception:  # a context without a transport (tests, odd servers)
        return None


def _activate(record: CallRecord) -> object:
    """Make the server span current, so spans the handler starts become its children."""
    flags = _SAMPLED if record.flagged else _UNSAMPLED
    span = trace.NonRecordingSpan(trace.SpanContext(record.trace_id, record.span_id, False, flags))
    return otel_context.attach(trace.set_span_in_context(span))


def _set_residence_trailer(record: CallRecord, sent: int) -> None:
    """Return the server's residence time to the client in trailing metadata.

    Merges with trailers the handler set. grpcio's aio server gives sync
    handlers a context that cannot read trailers back; there the trailer is
    skipped rather than risk overwriting the application's (documented).
    Never lets a telemetry problem fail the call.
    """
    context = record.context
    record.context = None
    residence = sent - record.start
    record.residence_ns = residence
    # Tail-aware sampling decides here, on the residence, so that the client hears of a
    # call kept as slow at the server and keeps its half too (tail_sampling.py).
    tail = record.recorder.sampler.tail
    kept = tail is not None and tail.decide(record, residence)
    if context is None or not (record.recorder.residence_trailer or kept):
        return
    try:
        read_trailers = getattr(context, "trailing_metadata", None)
        if read_trailers is None:
            return
        existing = read_trailers()
        trailer: tuple[tuple[str, str], ...] = ()
        if record.recorder.residence_trailer:
            trailer = ((RESIDENCE_TRAILER, str(residence)),)
        if kept:
            trailer += ((KEPT_TRAILER, repr(record.sampling_weight)),)
        elif tail is not None and trailer and record.recorder.instance_id:
            # Dropped here: name this instance for the client's half, should it keep it
            # (off with the residence trailer: GRPC_OVERHEAD_RESIDENCE_TRAILER=false).
            trailer += ((INSTANCE_TRAILER, record.recorder.instance_id),)
        context.set_trailing_metadata(tuple(existing) + trailer if existing else trailer)
    except Exception:
        _LOGGER.debug("could not set the residence trailer", exc_info=True)


def read_deadline(record: CallRecord, context: Any) -> None:
    """Keep the call's deadline as gRPC core set it, on the monotonic clock.

    The server's core computes the deadline from the grpc-timeout header when it
    parses the headers, on its own threads, before any Python (and so any GIL or
    event-loop wait) is involved. With the client's deadline that times the wait
    between the core seeing the call and serverCallStarted (spans.deadline_budget).
    Calls without a deadline (or past it: grpcio reports 0) keep none.
    """
    try:
        remaining = context.time_remaining()
    except Exception:  # a context without a deadline API (tests, odd servers)
        return
    if remaining is not None and 0 < remaining < _LONGEST_DEADLINE_S:
        record.deadline = now() + int(remaining * 1_000_000_000)


def wrap_handler(handler: Any, record: CallRecord, aio: bool) -> Any:
    """A copy of ``handler`` whose deserializer, behavior and serializer time this call.

    Sync servers finish the record when the worker is done with the call (see
    executor.py); aio servers finish it when the response is complete.
    """
    unary_response = not handler.response_streaming
    deserializer = handler.request_deserializer
    serializer = handler.response_serializer

    def deserialize(payload: bytes) -> Any:
        started = now()
        try:
            return deserializer(payload) if deserializer is not None else payload
        except BaseException as exception:
            record.fail(_INTERNAL, "request deserialization failed", exception)
            if aio:
                record.finish()
            raise
        finally:
            record.inbound(started, now(), len(payload))

    def serialize(response: Any) -> bytes:
        started = now()
        try:
            payload = serializer(response) if serializer is not None else response
        except BaseException as exception:
            record.fail(_INTERNAL, "response serialization failed", exception)
            if aio:
                record.finish()
            raise
        sent = now()
        record.outbound(started, sent, payload)
        if unary_response:
            _set_residence_trailer(record, sent)
            if aio:
                record.finish(sent)
        return payload

    attribute = BEHAVIOR_ATTRIBUTES[(handler.request_streaming, handler.response_streaming)]
    behavior = getattr(handler, attribute)
    if getattr(behavior, "experimental_non_blocking", False):
        wrapped = behavior  # callback-style streaming: timed by the executor and (de)serializers
    elif aio:
        wrapped = _wrap_aio_behavior(behavior, record, unary_response)
    else:
        wrapped = _wrap_sync_behavior(behavior, record, unary_response, scheduled_here=False)
    if wrapped is not behavior:
        pool = getattr(behavior, "experimental_thread_pool", None)
        if pool is not None:
            from grpc_overhead.instrumentation.executor import timed_executor

            wrapped.experimental_thread_pool = timed_executor(pool)
    return replace_behavior(handler, attribute, wrapped, deserialize, serialize)


class _ResponseIterator:
    """Times a sync handler chain's response generator; its end is the chain's return."""

    __slots__ = ("_finish", "_iterator", "_record")

    def __init__(self, iterator: Iterator[Any], record: CallRecord, finish: bool) -> None:
        self._iterator = iterator
        self._record = record
        self._finish = finish

    def __iter__(self) -> _ResponseIterator:
        return self

    def __next__(self) -> Any:
        record = self._record
        token = _activate(record)
        try:
            return next(self._iterator)
        except StopIteration:
            returned = now()
            chain_returned(record, returned)
            _set_residence_trailer(record, returned)
            if self._finish:
                record.finish(returned)
            raise
        except BaseException as exception:
            chain_returned(record, now())
            _record_failure(record, record.context, exception)
            if self._finish:
                record.finish()
            raise
        finally:
            otel_context.detach(token)


def _wrap_sync_behavior(
    behavior: Callable[..., Any], record: CallRecord, unary_response: bool, scheduled_here: bool
) -> Callable[..., Any]:
    """scheduled_here: the wrapper's start is the pool pickup (aio servers' sync handlers)."""
    finish_here = scheduled_here  # aio: nothing else finishes a failed or streaming call

    def timed_behavior(request: Any, context: Any) -> Any:
        call_token = None
        if scheduled_here:  # a worker thread of its own: make the call findable there too
            record.event(CALL_SCHEDULED, now())
            call_token = CURRENT_SERVER_CALL.set(record)
        record.context = context
        record.peer = _peer(context)
        read_deadline(record, context)
        if record.recorder.folding:
            fold_enclosing(record)
        token = _activate(record)
        record.event(INTERCEPTORS_ENTERED, now())
        try:
            result = behavior(request, context)
        except BaseException as exception:
            chain_returned(record, now())
            _record_failure(record, context, exception)
            if finish_here:
                record.finish()
            raise
        finally:
            otel_context.detach(token)
            if call_token is not None:
                CURRENT_SERVER_CALL.reset(call_token)
        if not unary_response:
            return _ResponseIterator(iter(result), record, finish_here)
        chain_returned(record, now())
        _record_handler_status(record, context)
        return result

    return timed_behavior


def _wrap_aio_behavior(
    behavior: Callable[..., Any], record: CallRecord, unary_response: bool
) -> Callable[..., Any]:
    kind = behavior_kind(behavior)
    if kind == PLAIN:
        return _wrap_sync_behavior(behavior, record, unary_response, scheduled_here=True)

    def fail(context: Any, exception: BaseException) -> None:
        chain_returned(record, now())
        _record_failure(record, context, exception)
        record.finish()

    def returned(context: Any) -> None:
        done = now()
        chain_returned(record, done)
        _record_handler_status(record, context)
        if not unary_response:
            _set_residence_trailer(record, done)
            record.finish(done)

    if kind == ASYNC_GENERATOR:

        async def timed_async_generator(request: Any, context: Any) -> Any:
            record.event(CALL_SCHEDULED, now())
            record.context = context
            record.peer = _peer(context)
            read_deadline(record, context)
            CURRENT_SERVER_CALL.set(record)
            if record.recorder.folding:
                fold_enclosing(record)
            token = _activate(record)
            record.event(INTERCEPTORS_ENTERED, now())
            try:
                async for response in behavior(request, context):
                    yield response
            except BaseException as exception:
                fail(context, exception)
                raise
            finally:
                otel_context.detach(token)
            returned(context)

        return timed_async_generator

    async def timed_coroutine(request: Any, context: Any) -> Any:
        record.event(CALL_SCHEDULED, now())
        record.context = context
        record.peer = _peer(context)
        read_deadline(record, context)
        CURRENT_SERVER_CALL.set(record)
        if record.recorder.folding:
            fold_enclosing(record)
        token = _activate(record)
        record.event(INTERCEPTORS_ENTERED, now())
        try:
            result = await behavior(request, context)
        except BaseException as exception:
            fail(context, exception)
            raise
        finally:
            otel_context.detach(token)
        returned(context)
        if unary_response and record.status_code:
            record.finish()  # grpcio skips the serializer for a non-OK status
        return result

    return timed_coroutine

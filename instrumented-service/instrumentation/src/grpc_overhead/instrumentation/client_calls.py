"""Client-side per-call start and finish, shared by the sync and aio channel wrappers.

Interceptors only see Python objects, so serialization cannot be timed from
one. grpcio binds serializers when a multicallable is created, so a call gets
a multicallable whose serializer wrappers reach its record: for blocking
unary-unary calls (which serialize and deserialize on the calling thread) one
per thread, reading the record from a slot (``bind_slot_serializers``); for
every other call style a copy per call with closures bound to the record
(``bind_serializers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.trace.propagation import _SPAN_KEY

from grpc_overhead.instrumentation.annotations import CALL_ATTRIBUTES
from grpc_overhead.instrumentation.clock import now, wall_offset_ns
from grpc_overhead.instrumentation.connect import ChannelReadiness
from grpc_overhead.instrumentation.lag_probe import loop_probe, thread_probe
from grpc_overhead.instrumentation.propagation import format_traceparent
from grpc_overhead.instrumentation.recorder import Recorder, compression_name, new_span_id
from grpc_overhead.instrumentation.records import STATUS_UNKNOWN, CallRecord
from grpc_overhead.instrumentation.vocabulary import (
    INSTANCE_TRAILER,
    KEPT_TRAILER,
    REQUEST_CREATED,
    REQUEST_START_HEADER,
    RESIDENCE_TRAILER,
    RUN_ID,
    RUN_ID_HEADER,
    TRACEPARENT_HEADER,
)

_get_current = otel_context.get_current
_Span = trace.Span
Metadata = tuple[tuple[str, str | bytes], ...]
#: The largest weight a server's kept trailer may give (the analyzer's bound too).
_MAX_WEIGHT = 1e9
#: gRPC core caps deadlines at 27,000 hours; longer timeouts are sent as that.
_LONGEST_TIMEOUT_S = 27_000 * 3600


def _with_trace_context(metadata: Any, ours: Metadata) -> Metadata:
    """The call's metadata with our headers last and no other ``traceparent``.

    An instrumentation wrapping ours (opentelemetry-instrumentation-grpc's client
    interceptor outside) has put its own in already; W3C allows one per request, and
    ours is the span the server's halves must hang under.
    """
    if not metadata:
        return ours
    return tuple(item for item in metadata if item[0] != TRACEPARENT_HEADER) + ours


def start_client_call(
    recorder: Recorder,
    target: str,
    method: str,
    call_type: str,
    metadata: Any,
    compression: grpc.Compression | None,
    timeout: float | None = None,
    readiness: ChannelReadiness | None = None,
    aio: bool = False,
) -> tuple[CallRecord | None, Metadata]:
    """The call's record (None when not sampled) and its metadata with trace context added.

    ``timeout`` (seconds, as given to grpcio) becomes the record's deadline: with the
    server's, it times the server's dispatch wait (spans.deadline_budget).
    ``readiness`` (the channel's) says whether the call will wait for a connection
    (client_connect); the process's lag probe (the event loop's with ``aio``) samples
    the wait for the caller to run again once the response is in (client_dispatch).
    """
    started = now()
    current = _get_current()  # one context lookup for both keys
    if current.get(_SUPPRESS_INSTRUMENTATION_KEY):  # an exporter's own calls
        return None, metadata
    span = current.get(_SPAN_KEY)  # what trace.get_current_span reads
    parent = span.get_span_context() if span is not None and isinstance(span, _Span) else None
    if parent is not None and parent.is_valid:
        trace_id, parent_span_id = parent.trace_id, parent.span_id
        parent_sampled: bool | None = parent.trace_flags.sampled
    else:
        trace_id, parent_span_id, parent_sampled = new_span_id(128) or 1, 0, None
    span_id = new_span_id(64) or 1
    sampler = recorder.sampler
    if not sampler.should_sample(trace_id, parent_sampled):
        # trace context only: no timestamps kept, no record, no span
        traceparent = ((TRACEPARENT_HEADER, format_traceparent(trace_id, span_id, False)),)
        return None, _with_trace_context(metadata, traceparent)
    attributes = CALL_ATTRIBUTES.get()
    run_id = attributes.get(RUN_ID) if attributes else None
    run_id = run_id or recorder.run_id
    # Tail-aware: pass on the sampled flag only for the base decision or a caller's ask.
    flagged = True if sampler.tail is None else sampler.tail.flag(trace_id, parent_sampled)
    ours: Metadata = (
        (TRACEPARENT_HEADER, format_traceparent(trace_id, span_id, flagged)),
        (REQUEST_START_HEADER, str(started + wall_offset_ns())),
    )
    if run_id:
        ours += ((RUN_ID_HEADER, str(run_id)),)
    outgoing = _with_trace_context(metadata, ours)
    record = CallRecord(
        recorder, True, method, call_type, trace_id, span_id, parent_span_id, started
    )
    record.events.append((REQUEST_CREATED, started, 0, -1, None))  # record.event, inlined
    if not flagged:
        record.flagged = False
    record.parent_sampled = parent_sampled
    record.peer = target
    if timeout is not None and 0 < timeout < _LONGEST_TIMEOUT_S:
        record.deadline = started + int(timeout * 1_000_000_000)
    if attributes:
        record.attributes = dict(attributes)
    if run_id:
        record.run_id = str(run_id)
    if compression is not None:
        record.compression = compression_name(compression)
    if readiness is not None:
        record.connect_watch = readiness.at_call(record.deadline, aio)
    try:
        record.lag_probe = loop_probe() if aio else thread_probe()
    except RuntimeError:  # an aio call object made outside its event loop
        pass
    return record, outgoing


def bind_serializers(
    record: CallRecord,
    serializer: Callable[[Any], bytes] | None,
    deserializer: Callable[[bytes], Any] | None,
) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    def serialize(message: Any) -> bytes:
        started = now()
        payload = serializer(message) if serializer is not None else message
        record.outbound(started, now(), payload)
        return payload

    def deserialize(payload: bytes) -> Any:
        started = now()
        try:
            return deserializer(payload) if deserializer is not None else payload
        finally:
            record.received(started, now(), len(payload))

    return serialize, deserialize


class _Slot(Protocol):
    record: CallRecord | None


def bind_slot_serializers(
    slot: _Slot,
    serializer: Callable[[Any], bytes] | None,
    deserializer: Callable[[bytes], Any] | None,
) -> tuple[Callable[[Any], bytes], Callable[[bytes], Any]]:
    """``bind_serializers`` for a call whose record is in ``slot`` while it runs (a blocking
    unary call: both run on the calling thread), so they are made once, not per call."""

    def serialize(message: Any) -> bytes:
        record = slot.record
        started = now()
        payload = serializer(message) if serializer is not None else message
        record.outbound(started, now(), payload)
        return payload

    def deserialize(payload: bytes) -> Any:
        record = slot.record
        started = now()
        try:
            return deserializer(payload) if deserializer is not None else payload
        finally:
            record.received(started, now(), len(payload))

    return serialize, deserialize


#: The longest server instance id taken from a trailer (a UUID is 36 characters).
_MAX_INSTANCE_CHARS = 256


class PeerTrailers(NamedTuple):
    """What the server said in its trailers about the call (one pass over them).

    ``residence_ns``: its ``RESIDENCE_TRAILER`` (-1 when absent or not a number).
    ``kept_weight``: the weight it kept the call with (``KEPT_TRAILER``), 0 when it did not
    say or said something that is no weight >= 1. ``dropped_by``: the server instance that
    dropped its half (``INSTANCE_TRAILER``), None when it did not say or said something
    that is no instance id.
    """

    residence_ns: int = -1
    kept_weight: float = 0.0
    dropped_by: str | None = None


def peer_trailers(trailing_metadata: Any) -> PeerTrailers:
    residence = weight = instance = None  # the first of a repeated key counts
    for key, value in trailing_metadata or ():
        if key == RESIDENCE_TRAILER and residence is None:
            residence = _whole(value)
        elif key == KEPT_TRAILER and weight is None:
            weight = _weight(value)
        elif key == INSTANCE_TRAILER and instance is None:
            instance = _instance(value) or ""
    return PeerTrailers(-1 if residence is None else residence, weight or 0.0, instance or None)


def _whole(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _weight(value: Any) -> float:
    try:
        weight = float(value)
    except (TypeError, ValueError):
        return 0.0
    return weight if 1.0 <= weight <= _MAX_WEIGHT else 0.0


def _instance(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= _MAX_INSTANCE_CHARS and value.isprintable():
        return value
    return None


def finish_client_call(
    record: CallRecord, code: grpc.StatusCode | None, details: str | None, trailing_metadata: Any
) -> None:
    said = peer_trailers(trailing_metadata)
    record.residence_ns = said.residence_ns
    if record.recorder.sampler.tail is not None:
        record.peer_weight = said.kept_weight
        if not said.kept_weight:
            record.peer_instance = said.dropped_by
    if code is not None and code is not grpc.StatusCode.OK:
        record.fail(code.value[0], details)
    record.finish()


def finish_from_call(record: CallRecord, call: Any) -> None:
    """Finish from a completed sync grpc.Call / Future (codes and trailers are ready).

    A generator another instrumentation returned instead of grpcio's call (see
    streaming_call.LazyStreamingCall) has no status: having ended, the call was OK.
    """
    if not hasattr(call, "code"):
        finish_client_call(record, None, None, None)
        return
    try:
        code = call.code()
        details = call.details() if code is not grpc.StatusCode.OK else None
        trailing = call.trailing_metadata()
    except Exception as exception:  # e.g. a future cancelled before it started
        record.fail(STATUS_UNKNOWN, str(exception), exception)
        record.finish()
        return
    finish_client_call(record, code, details, trailing)


def fail_unexpected(record: CallRecord, exception: BaseException) -> None:
    record.fail(STATUS_UNKNOWN, f"{type(exception).__name__}: {exception}", exception)
    record.finish()

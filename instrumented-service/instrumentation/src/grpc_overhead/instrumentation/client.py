"""Sync client instrumentation: a ``grpc.Channel`` wrapper that times every call.

Works with generated stubs (they pass ``_registered_method=True``; it is kept)
and with every call style: blocking, ``with_call``, ``future`` and streams.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from grpc_overhead.instrumentation.client_calls import (
    bind_serializers,
    bind_slot_serializers,
    fail_unexpected,
    finish_client_call,
    finish_from_call,
    start_client_call,
)
from grpc_overhead.instrumentation.coexistence import (
    enter_client_call,
    fold_enclosing,
    leave_client_call,
)
from grpc_overhead.instrumentation.connect import ChannelReadiness
from grpc_overhead.instrumentation.environment import instrumentation_disabled
from grpc_overhead.instrumentation.pipeline import SpanPipeline
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.streaming_call import LazyStreamingCall, StreamingCall

_CALL_TYPES = {
    "unary_unary": "unary_unary",
    "unary_stream": "unary_stream",
    "stream_unary": "stream_unary",
    "stream_stream": "stream_stream",
}


class InstrumentedChannel(grpc.Channel):
    def __init__(self, channel: grpc.Channel, recorder: Recorder, target: str) -> None:
        self._channel = channel
        self._recorder = recorder
        self._target = target
        self._readiness = ChannelReadiness(channel)

    @property
    def wrapped_channel(self) -> grpc.Channel:
        return self._channel

    def subscribe(self, callback: Callable[..., None], try_to_connect: bool = False) -> None:
        self._channel.subscribe(callback, try_to_connect=try_to_connect)

    def unsubscribe(self, callback: Callable[..., None]) -> None:
        self._channel.unsubscribe(callback)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> InstrumentedChannel:
        return self

    def __exit__(self, *exc_info: Any) -> bool:
        self._channel.close()
        return False

    def unary_unary(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _UnaryResponse(
            self,
            "unary_unary",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )

    def stream_unary(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _UnaryResponse(
            self,
            "stream_unary",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )

    def unary_stream(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _StreamResponse(
            self,
            "unary_stream",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )

    def stream_stream(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _StreamResponse(
            self,
            "stream_stream",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )


def _slots(cls: type) -> tuple[str, ...]:
    return tuple(name for klass in cls.__mro__ for name in getattr(klass, "__slots__", ()))


def _cloner(template: Any) -> Callable[[Any, Any], Any] | None:
    """A fast per-call copy of grpcio's multicallable with other (de)serializers.

    Creating a multicallable through the channel costs a few microseconds (census
    context, call-management closure, method encoding); a copy of one made
    earlier costs a fraction, and calls still get their own serializer closures.
    grpcio 1.85's sync multicallables keep their state in these slots plus
    ``_registered_call_handle``; anything else falls back to the channel factory.
    """
    cls = type(template)
    names = _slots(cls)
    if "_request_serializer" not in names or "_response_deserializer" not in names:
        return None
    copied = tuple(n for n in names if n not in ("_request_serializer", "_response_deserializer"))
    extra = dict(getattr(template, "__dict__", {}))
    new = object.__new__
    values = tuple(getattr(template, name) for name in copied)

    def clone(serializer: Any, deserializer: Any) -> Any:
        copy = new(cls)
        for name, value in zip(copied, values, strict=True):
            object.__setattr__(copy, name, value)
        if extra:
            copy.__dict__.update(extra)
        copy._request_serializer = serializer
        copy._response_deserializer = deserializer
        return copy

    return clone


try:  # grpcio's blocking unary call, split where the status is in (see _ThreadSlot)
    from grpc._channel import _end_unary_response_blocking as _end_blocking
    from grpc._channel import _UnaryUnaryMultiCallable as _GRPC_UNARY_UNARY
except ImportError:  # another grpcio layout: every sampled call takes with_call
    _end_blocking = _GRPC_UNARY_UNARY = None
if not hasattr(_GRPC_UNARY_UNARY, "_blocking"):  # the pin (grpcio 1.85) moved: the old path
    _end_blocking = _GRPC_UNARY_UNARY = None

_OK = grpc.StatusCode.OK


class _ThreadSlot:
    """One thread's multicallable for blocking unary-unary calls, made once.

    A blocking unary-unary call serializes and deserializes on the calling thread, so
    its serializer wrappers can read the call's record from this slot instead of
    being bound to it: no multicallable copy and no closures per call. ``record`` is
    saved and restored around each call, so a call made from inside a serializer
    (same thread, same method) cannot steal the outer call's record.
    """

    __slots__ = ("bound", "record")

    def __init__(self, multicallable: _MultiCallable) -> None:
        self.record: CallRecord | None = None
        serialize, deserialize = bind_slot_serializers(
            self, multicallable._serializer, multicallable._deserializer
        )
        self.bound = multicallable._bind(serialize, deserialize)


class _MultiCallable:
    __slots__ = (
        "_call_type",
        "_channel",
        "_clone",
        "_deserializer",
        "_local",
        "_method",
        "_plain",
        "_registered",
        "_serializer",
    )

    def __init__(
        self,
        channel: InstrumentedChannel,
        call_type: str,
        method: str,
        serializer: Any,
        deserializer: Any,
        registered: Any,
    ) -> None:
        self._channel = channel
        self._call_type = call_type
        self._method = method
        self._serializer = serializer
        self._deserializer = deserializer
        self._registered = registered
        self._plain: Any = self._factory()(
            method, serializer, deserializer, _registered_method=registered
        )
        self._clone = _cloner(self._plain)
        # The slot path needs grpcio's own unary-unary multicallable (not another
        # instrumentation's interceptor in between) and no folding (coexistence.py).
        blocking = call_type == "unary_unary" and type(self._plain) is _GRPC_UNARY_UNARY
        self._local = None if not blocking or channel._recorder.folding else threading.local()

    def _factory(self) -> Callable[..., Any]:
        return getattr(self._channel._channel, self._call_type)

    def _start(
        self, metadata: Any, compression: Any, timeout: float | None
    ) -> tuple[CallRecord | None, Any, Any]:
        """(record, outgoing metadata, the multicallable to use for this call)."""
        channel = self._channel
        record, outgoing = start_client_call(
            channel._recorder,
            channel._target,
            self._method,
            self._call_type,
            metadata,
            compression,
            timeout,
            channel._readiness,
        )
        if record is None:
            return None, outgoing, self._plain
        if channel._recorder.folding:
            fold_enclosing(record)
        serialize, deserialize = bind_serializers(record, self._serializer, self._deserializer)
        return record, outgoing, self._bind(serialize, deserialize)

    def _bind(self, serialize: Any, deserialize: Any) -> Any:
        """grpcio's multicallable for this method with these (de)serializers."""
        if self._clone is not None:
            return self._clone(serialize, deserialize)
        return self._factory()(
            self._method, serialize, deserialize, _registered_method=self._registered
        )


class _UnaryResponse(_MultiCallable, grpc.UnaryUnaryMultiCallable, grpc.StreamUnaryMultiCallable):
    """unary_unary and stream_unary: one response, finished when the status is in."""

    __slots__ = ()

    def _invoke(
        self, request, timeout, metadata, credentials, wait_for_ready, compression, with_call=True
    ):
        if timeout is None:
            timeout = self._channel._recorder.timing_deadline_s
        if self._local is not None:
            return self._call_blocking(
                request, timeout, metadata, credentials, wait_for_ready, compression, with_call
            )
        record, outgoing, bound = self._start(metadata, compression, timeout)
        if record is None:  # not sampled: grpcio's own call, with the traceparent added
            if with_call:
                return bound.with_call(
                    request, timeout, outgoing, credentials, wait_for_ready, compression
                )
            return bound(request, timeout, outgoing, credentials, wait_for_ready, compression)
        tokens = enter_client_call(record) if self._channel._recorder.folding else None
        try:
            response, call = bound.with_call(
                request, timeout, outgoing, credentials, wait_for_ready, compression
            )
        except grpc.RpcError as error:
            finish_from_call(record, error)
            raise
        except BaseException as exception:
            fail_unexpected(record, exception)
            raise
        finally:
            if tokens is not None:
                leave_client_call(tokens)
        finish_from_call(record, call)
        return (response, call) if with_call else response

    def _call_blocking(
        self, request, timeout, metadata, credentials, wait_for_ready, compression, with_call
    ):
        """A blocking unary-unary call through this thread's slot, finished from grpcio's
        call state: no multicallable copy, no closures, no rendezvous unless asked for."""
        channel = self._channel
        record, outgoing = start_client_call(
            channel._recorder,
            channel._target,
            self._method,
            "unary_unary",
            metadata,
            compression,
            timeout,
            channel._readiness,
        )
        if record is None:  # not sampled: grpcio's own call, with the traceparent added
            if with_call:
                return self._plain.with_call(
                    request, timeout, outgoing, credentials, wait_for_ready, compression
                )
            return self._plain(request, timeout, outgoing, credentials, wait_for_ready, compression)
        local = self._local
        try:
            slot = local.slot
        except AttributeError:
            slot = local.slot = _ThreadSlot(self)
        outer = slot.record
        slot.record = record
        try:
            state, call = slot.bound._blocking(
                request, timeout, outgoing, credentials, wait_for_ready, compression
            )
        except grpc.RpcError as error:  # e.g. the request serializer failed
            finish_from_call(record, error)
            raise
        except BaseException as exception:
            fail_unexpected(record, exception)
            raise
        finally:
            slot.record = outer
        code = state.code
        finish_client_call(
            record, code, state.details if code is not _OK else None, state.trailing_metadata
        )
        return _end_blocking(state, call, with_call, None)

    def __call__(
        self,
        request,
        timeout=None,
        metadata=None,
        credentials=None,
        wait_for_ready=None,
        compression=None,
    ):
        return self._invoke(
            request, timeout, metadata, credentials, wait_for_ready, compression, with_call=False
        )

    def with_call(
        self,
        request,
        timeout=None,
        metadata=None,
        credentials=None,
        wait_for_ready=None,
        compression=None,
    ):
        return self._invoke(request, timeout, metadata, credentials, wait_for_ready, compression)

    def future(
        self,
        request,
        timeout=None,
        metadata=None,
        credentials=None,
        wait_for_ready=None,
        compression=None,
    ):
        if timeout is None:
            timeout = self._channel._recorder.timing_deadline_s
        record, outgoing, bound = self._start(metadata, compression, timeout)
        tokens = enter_client_call(record) if record and self._channel._recorder.folding else None
        try:
            future = bound.future(
                request, timeout, outgoing, credentials, wait_for_ready, compression
            )
        finally:
            if tokens is not None:
                leave_client_call(tokens)
        if record is not None:
            future.add_done_callback(lambda done: finish_from_call(record, done))
        return future


class _StreamResponse(
    _MultiCallable, grpc.UnaryStreamMultiCallable, grpc.StreamStreamMultiCallable
):
    """unary_stream and stream_stream: finished when the reader reaches the end."""

    __slots__ = ()

    def __call__(
        self,
        request,
        timeout=None,
        metadata=None,
        credentials=None,
        wait_for_ready=None,
        compression=None,
    ):
        if timeout is None:
            timeout = self._channel._recorder.timing_deadline_s
        record, outgoing, bound = self._start(metadata, compression, timeout)
        if record is None:
            return bound(request, timeout, outgoing, credentials, wait_for_ready, compression)
        if not self._channel._recorder.folding:
            return StreamingCall(
                bound(request, timeout, outgoing, credentials, wait_for_ready, compression), record
            )
        tokens = enter_client_call(record)
        try:
            call = bound(request, timeout, outgoing, credentials, wait_for_ready, compression)
        finally:
            leave_client_call(tokens)
        if not isinstance(call, grpc.Call):  # an interceptor's generator: runs on first next()
            return LazyStreamingCall(call, record)
        return StreamingCall(call, record)


def instrument_channel(
    channel: grpc.Channel,
    target: str = "",
    *,
    compression: grpc.Compression | None = None,
    pipeline: SpanPipeline | None = None,
) -> grpc.Channel:
    """Wrap a channel so every call through it is timed; ``target`` names the server on
    the span (``server.address``); ``compression`` is the channel's default, if set."""
    if isinstance(channel, InstrumentedChannel) or instrumentation_disabled():
        return channel
    return InstrumentedChannel(channel, Recorder(pipeline, compression), target)

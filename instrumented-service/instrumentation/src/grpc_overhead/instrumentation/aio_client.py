"""aio client instrumentation: a ``grpc.aio.Channel`` wrapper that times every call.

aio calls report status and trailers through coroutines, so the call object a
caller gets is a thin proxy that finishes the record when the caller awaits
the response (unary responses) or reaches the end of the stream; everything
else is delegated to grpcio's call object.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from grpc_overhead.instrumentation.client_calls import (
    bind_serializers,
    fail_unexpected,
    finish_client_call,
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
from grpc_overhead.instrumentation.records import STATUS_CANCELLED, CallRecord


async def _finish_from_aio_call(record: CallRecord, call: Any) -> None:
    try:
        code = await call.code()
        details = await call.details() if code is not grpc.StatusCode.OK else None
        trailing = await call.trailing_metadata()
    except asyncio.CancelledError:
        record.fail(STATUS_CANCELLED, "cancelled")
        record.finish()
        raise
    except Exception as exception:
        fail_unexpected(record, exception)
        return
    finish_client_call(record, code, details, trailing)


def _finish_from_aio_error(record: CallRecord, error: grpc.aio.AioRpcError) -> None:
    finish_client_call(record, error.code(), error.details(), error.trailing_metadata())


class AioUnaryResponseCall:
    """Awaitable like grpcio's UnaryUnaryCall / StreamUnaryCall; finishes the record."""

    __slots__ = ("_call", "_record")

    def __init__(self, call: Any, record: CallRecord) -> None:
        self._call = call
        self._record = record

    def __await__(self) -> Any:
        return self._complete().__await__()

    async def _complete(self) -> Any:
        record = self._record
        try:
            response = await self._call
        except grpc.aio.AioRpcError as error:
            _finish_from_aio_error(record, error)
            raise
        except asyncio.CancelledError:
            record.fail(STATUS_CANCELLED, "cancelled")
            record.finish()
            raise
        except BaseException as exception:
            fail_unexpected(record, exception)
            raise
        if not record.finished:
            await _finish_from_aio_call(record, self._call)
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class AioStreamResponseCall:
    """Async-iterable like grpcio's UnaryStreamCall / StreamStreamCall; finishes the record
    when the reader reaches the end (``async for`` or ``read()`` returning EOF)."""

    __slots__ = ("_call", "_record")

    def __init__(self, call: Any, record: CallRecord) -> None:
        self._call = call
        self._record = record

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Any]:
        record = self._record
        try:
            async for response in self._call:
                yield response
        except grpc.aio.AioRpcError as error:
            _finish_from_aio_error(record, error)
            raise
        except asyncio.CancelledError:
            record.fail(STATUS_CANCELLED, "cancelled")
            record.finish()
            raise
        if not record.finished:
            await _finish_from_aio_call(record, self._call)

    async def read(self) -> Any:
        record = self._record
        try:
            message = await self._call.read()
        except grpc.aio.AioRpcError as error:
            _finish_from_aio_error(record, error)
            raise
        if message is grpc.aio.EOF and not record.finished:
            await _finish_from_aio_call(record, self._call)
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class _AioMultiCallable:
    __slots__ = (
        "_call_type",
        "_channel",
        "_deserializer",
        "_method",
        "_plain",
        "_registered",
        "_serializer",
        "_unary_response",
    )

    def __init__(
        self,
        channel: InstrumentedAioChannel,
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
        self._plain: Any = None
        self._unary_response = call_type in ("unary_unary", "stream_unary")

    def __call__(
        self,
        request=None,
        *,
        timeout=None,
        metadata=None,
        credentials=None,
        wait_for_ready=None,
        compression=None,
    ):
        channel = self._channel
        factory = getattr(channel._channel, self._call_type)
        if timeout is None:
            timeout = channel._recorder.timing_deadline_s
        record, outgoing = start_client_call(
            channel._recorder,
            channel._target,
            self._method,
            self._call_type,
            metadata,
            compression,
            timeout,
            channel._readiness,
            aio=True,
        )
        if record is None:
            if self._plain is None:
                self._plain = factory(
                    self._method,
                    self._serializer,
                    self._deserializer,
                    _registered_method=self._registered,
                )
            bound = self._plain
        else:
            serialize, deserialize = bind_serializers(record, self._serializer, self._deserializer)
            bound = factory(
                self._method, serialize, deserialize, _registered_method=self._registered
            )
        tokens = None
        if record is not None and channel._recorder.folding:
            fold_enclosing(record)
            # The interceptors' task copies this context: their spans become our children.
            tokens = enter_client_call(record)
        try:
            call = bound(
                request,
                timeout=timeout,
                metadata=outgoing,
                credentials=credentials,
                wait_for_ready=wait_for_ready,
                compression=compression,
            )
        finally:
            if tokens is not None:
                leave_client_call(tokens)
        if record is None:
            return call
        if self._unary_response:
            return AioUnaryResponseCall(call, record)
        return AioStreamResponseCall(call, record)


class InstrumentedAioChannel(grpc.aio.Channel):
    def __init__(self, channel: grpc.aio.Channel, recorder: Recorder, target: str) -> None:
        self._channel = channel
        self._recorder = recorder
        self._target = target
        self._readiness = ChannelReadiness(channel)

    @property
    def wrapped_channel(self) -> grpc.aio.Channel:
        return self._channel

    async def __aenter__(self) -> InstrumentedAioChannel:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._channel.close()

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self._channel.channel_ready()

    def unary_unary(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _AioMultiCallable(
            self,
            "unary_unary",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )

    def unary_stream(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _AioMultiCallable(
            self,
            "unary_stream",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )

    def stream_unary(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _AioMultiCallable(
            self,
            "stream_unary",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )

    def stream_stream(
        self, method, request_serializer=None, response_deserializer=None, _registered_method=False
    ):
        return _AioMultiCallable(
            self,
            "stream_stream",
            method,
            request_serializer,
            response_deserializer,
            _registered_method,
        )


def instrument_aio_channel(
    channel: grpc.aio.Channel,
    target: str = "",
    *,
    compression: grpc.Compression | None = None,
    pipeline: SpanPipeline | None = None,
) -> grpc.aio.Channel:
    if isinstance(channel, InstrumentedAioChannel) or instrumentation_disabled():
        return channel
    return InstrumentedAioChannel(channel, Recorder(pipeline, compression), target)

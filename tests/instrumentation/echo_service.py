"""A small real gRPC service with all four call shapes, for instrumentation tests.

Messages are protobuf ``BytesValue``s so (de)serialization is real protobuf work.
Payload prefixes steer the handlers: b"raise" raises, b"abort" aborts with
NOT_FOUND, b"sleep:<ms>" sleeps before answering, b"mark" calls
``mark_predictions_made()`` (twice) and notes what it returned on the span.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from concurrent import futures

import grpc
from google.protobuf.wrappers_pb2 import BytesValue

from grpc_overhead.instrumentation import (
    SpanPipeline,
    annotate_call,
    instrumented_server,
    mark_predictions_made,
)

SERVICE = "test.Echo"
METHODS = {
    "Echo": "unary_unary",
    "Split": "unary_stream",
    "Join": "stream_unary",
    "Chat": "stream_stream",
}
SPLIT_PARTS = 3


def _steer(payload: bytes, context: grpc.ServicerContext) -> None:
    if payload.startswith(b"raise"):
        raise ValueError("handler failed on purpose")
    if payload.startswith(b"abort"):
        context.abort(grpc.StatusCode.NOT_FOUND, "no such entity")
    if payload.startswith(b"sleep:"):
        time.sleep(int(payload.split(b":")[1]) / 1000)
    if payload.startswith(b"mark"):
        # The model is done: what follows is post-processing. A second mark is ignored.
        annotate_call("test.marked", mark_predictions_made())
        annotate_call("test.marked_again", mark_predictions_made())


def echo(request: BytesValue, context: grpc.ServicerContext) -> BytesValue:
    _steer(request.value, context)
    annotate_call("test.annotated", "yes")
    return BytesValue(value=request.value)


def split(request: BytesValue, context: grpc.ServicerContext) -> Iterator[BytesValue]:
    _steer(request.value, context)
    for index in range(SPLIT_PARTS):
        yield BytesValue(value=request.value + str(index).encode())


def join(requests: Iterator[BytesValue], context: grpc.ServicerContext) -> BytesValue:
    return BytesValue(value=b"".join(request.value for request in requests))


def chat(requests: Iterator[BytesValue], context: grpc.ServicerContext) -> Iterator[BytesValue]:
    for request in requests:
        yield BytesValue(value=request.value.upper())


async def echo_async(request: BytesValue, context: grpc.aio.ServicerContext) -> BytesValue:
    if request.value.startswith(b"raise"):
        raise ValueError("handler failed on purpose")
    if request.value.startswith(b"abort"):
        await context.abort(grpc.StatusCode.NOT_FOUND, "no such entity")
    annotate_call("test.annotated", "yes")
    return BytesValue(value=request.value)


async def split_async(
    request: BytesValue, context: grpc.aio.ServicerContext
) -> AsyncIterator[BytesValue]:
    for index in range(SPLIT_PARTS):
        await asyncio.sleep(0)
        yield BytesValue(value=request.value + str(index).encode())


async def join_async(requests: AsyncIterator[BytesValue], context) -> BytesValue:
    parts = [request.value async for request in requests]
    return BytesValue(value=b"".join(parts))


async def chat_async(requests: AsyncIterator[BytesValue], context) -> None:
    async for request in requests:
        await context.write(BytesValue(value=request.value.upper()))


def _handlers(functions: dict[str, object]) -> grpc.GenericRpcHandler:
    factories = {
        "unary_unary": grpc.unary_unary_rpc_method_handler,
        "unary_stream": grpc.unary_stream_rpc_method_handler,
        "stream_unary": grpc.stream_unary_rpc_method_handler,
        "stream_stream": grpc.stream_stream_rpc_method_handler,
    }
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            name: factories[METHODS[name]](
                functions[name],
                request_deserializer=BytesValue.FromString,
                response_serializer=BytesValue.SerializeToString,
            )
            for name in METHODS
        },
    )


def sync_handlers() -> grpc.GenericRpcHandler:
    return _handlers({"Echo": echo, "Split": split, "Join": join, "Chat": chat})


def start_sync_server(
    pipeline: SpanPipeline, handlers: grpc.GenericRpcHandler | None = None, workers: int = 2
) -> tuple[grpc.Server, str]:
    """An instrumented sync server (these handlers unless others are given) on a free
    loopback port, started: the server and its target."""
    server = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=workers),
        handlers=[handlers or sync_handlers()],
        pipeline=pipeline,
    )
    target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    return server, target


def async_handlers() -> grpc.GenericRpcHandler:
    return _handlers(
        {"Echo": echo_async, "Split": split_async, "Join": join_async, "Chat": chat_async}
    )


def multicallables(channel: grpc.Channel | grpc.aio.Channel) -> dict[str, object]:
    """What a generated stub would build, including ``_registered_method=True``."""
    return {
        name: getattr(channel, kind)(
            f"/{SERVICE}/{name}",
            request_serializer=BytesValue.SerializeToString,
            response_deserializer=BytesValue.FromString,
            _registered_method=True,
        )
        for name, kind in METHODS.items()
    }

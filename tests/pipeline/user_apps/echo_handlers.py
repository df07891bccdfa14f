"""Generic-handler services for all four call shapes, sync and aio, plus grpcio's standard
health and reflection services: a service of a user's, with no tracing code at all.

Copied with ``server.py`` and ``client.py`` into a temporary directory outside the
repository and run there in the user venv (harness/user_venv.py): it imports
nothing of this repository.
"""

from __future__ import annotations

import grpc

SERVICE = "coexistence.Echo"
METHODS = ("UnaryUnary", "UnaryStream", "StreamUnary", "StreamStream")
STREAM_LENGTH = 3


def _unary_unary(request: bytes, context) -> bytes:
    return b"uu:" + request


def _unary_stream(request: bytes, context):
    for index in range(STREAM_LENGTH):
        yield b"us%d:" % index + request


def _stream_unary(requests, context) -> bytes:
    return b"su:" + b"+".join(requests)


def _stream_stream(requests, context):
    for request in requests:
        yield b"ss:" + request


async def _aio_unary_unary(request: bytes, context) -> bytes:
    return b"uu:" + request


async def _aio_unary_stream(request: bytes, context):
    for index in range(STREAM_LENGTH):
        yield b"us%d:" % index + request


async def _aio_stream_unary(requests, context) -> bytes:
    return b"su:" + b"+".join([request async for request in requests])


async def _aio_stream_stream(requests, context):
    async for request in requests:
        yield b"ss:" + request


def handlers(aio: bool) -> grpc.GenericRpcHandler:
    """Bytes in, bytes out (no serializers): the generic-handler way."""
    if aio:
        functions = (_aio_unary_unary, _aio_unary_stream, _aio_stream_unary, _aio_stream_stream)
    else:
        functions = (_unary_unary, _unary_stream, _stream_unary, _stream_stream)
    kinds = (
        grpc.unary_unary_rpc_method_handler,
        grpc.unary_stream_rpc_method_handler,
        grpc.stream_unary_rpc_method_handler,
        grpc.stream_stream_rpc_method_handler,
    )
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            name: kind(function)
            for name, kind, function in zip(METHODS, kinds, functions, strict=True)
        },
    )


def expected(payload: bytes) -> dict[str, list[bytes]]:
    """What each shape answers to ``payload`` (streams: as a list)."""
    return {
        "UnaryUnary": [b"uu:" + payload],
        "UnaryStream": [b"us%d:" % index + payload for index in range(STREAM_LENGTH)],
        "StreamUnary": [b"su:" + payload + b"+" + payload],
        "StreamStream": [b"ss:" + payload, b"ss:" + payload],
    }

"""A user's client: every call shape over a sync and an aio channel, grpcio's health check
and a reflection request. No tracing code. Prints one JSON line of what came back.

Usage: client.py SYNC_TARGET AIO_TARGET REPEAT
"""

from __future__ import annotations

import asyncio
import json
import sys

import echo_handlers
import grpc
import grpc.aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

PAYLOAD = b"hello"


def _path(method: str) -> str:
    return f"/{echo_handlers.SERVICE}/{method}"


def sync_calls(target: str, repeat: int) -> dict:
    answers: dict = {}
    with grpc.insecure_channel(target) as channel:
        for _ in range(repeat):
            answers.setdefault("UnaryUnary", []).append(
                [channel.unary_unary(_path("UnaryUnary"))(PAYLOAD, timeout=10)]
            )
            answers.setdefault("UnaryStream", []).append(
                list(channel.unary_stream(_path("UnaryStream"))(PAYLOAD, timeout=10))
            )
            answers.setdefault("StreamUnary", []).append(
                [channel.stream_unary(_path("StreamUnary"))(iter([PAYLOAD, PAYLOAD]), timeout=10)]
            )
            answers.setdefault("StreamStream", []).append(
                list(
                    channel.stream_stream(_path("StreamStream"))(
                        iter([PAYLOAD, PAYLOAD]), timeout=10
                    )
                )
            )
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=echo_handlers.SERVICE), timeout=10
        )
        listed = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
        )
        services = [s.name for reply in listed for s in reply.list_services_response.service]
    return {"echo": answers, "health": health.status, "services": sorted(services)}


async def aio_calls(target: str, repeat: int) -> dict:
    answers: dict = {}

    async def two():
        for _ in range(2):
            yield PAYLOAD

    async with grpc.aio.insecure_channel(target) as channel:
        for _ in range(repeat):
            answers.setdefault("UnaryUnary", []).append(
                [await channel.unary_unary(_path("UnaryUnary"))(PAYLOAD, timeout=10)]
            )
            answers.setdefault("UnaryStream", []).append(
                [r async for r in channel.unary_stream(_path("UnaryStream"))(PAYLOAD, timeout=10)]
            )
            answers.setdefault("StreamUnary", []).append(
                [await channel.stream_unary(_path("StreamUnary"))(two(), timeout=10)]
            )
            answers.setdefault("StreamStream", []).append(
                [r async for r in channel.stream_stream(_path("StreamStream"))(two(), timeout=10)]
            )
        health = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=echo_handlers.SERVICE), timeout=10
        )
        call = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(timeout=10)
        await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
        await call.done_writing()
        services = [s.name async for reply in call for s in reply.list_services_response.service]
    return {"echo": answers, "health": health.status, "services": sorted(services)}


def main() -> None:
    sync_target, aio_target, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
    result = {
        "sync": sync_calls(sync_target, repeat),
        "aio": asyncio.run(aio_calls(aio_target, repeat)),
    }
    for side in result.values():
        side["echo"] = {
            name: [[item.decode() for item in call] for call in calls]
            for name, calls in side["echo"].items()
        }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()

"""A user's service: a sync ``grpc.server`` and a ``grpc.aio.server`` in one process, each
serving the echo shapes, grpcio's health service and reflection. No tracing code.

Prints ``ports SYNC AIO`` once both listen, then serves until stdin closes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from concurrent import futures
from importlib.metadata import entry_points

import echo_handlers
import grpc
import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection


def sync_server() -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers([echo_handlers.handlers(aio=False)])
    servicer = health.HealthServicer()
    servicer.set(echo_handlers.SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    names = (echo_handlers.SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, port


async def aio_main(ready: threading.Event, ports: list[int], stop: asyncio.Event) -> None:
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([echo_handlers.handlers(aio=True)])
    servicer = health_aio.HealthServicer()
    await servicer.set(echo_handlers.SERVICE, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    names = (echo_handlers.SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME)
    reflection.enable_server_reflection(names, server)
    ports.append(server.add_insecure_port("127.0.0.1:0"))
    await server.start()
    ready.set()
    await stop.wait()
    await server.stop(1)


def main() -> None:
    order = [entry.name for entry in entry_points(group="opentelemetry_instrumentor")]
    print("instrumentors", json.dumps(order), flush=True)
    server, port = sync_server()
    loop = asyncio.new_event_loop()
    ready, ports, stop = threading.Event(), [], asyncio.Event()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(aio_main(ready, ports, stop),), daemon=True
    )
    thread.start()
    if not ready.wait(30):
        raise SystemExit("the aio server did not start")
    print("ports", port, ports[0], flush=True)
    sys.stdin.read()  # until the test closes stdin
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)
    server.stop(1).wait()


if __name__ == "__main__":
    main()

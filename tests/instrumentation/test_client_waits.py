"""The client's own waits on real calls: a connection wait (client_connect) and the wake-up
lag sample (client_dispatch), sync and aio, recorded as span attributes."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent import futures

import grpc
from google.protobuf.wrappers_pb2 import BytesValue

from grpc_overhead.instrumentation import (
    instrument_aio_channel,
    instrument_channel,
    instrumented_server,
)
from grpc_overhead.instrumentation.vocabulary import (
    CLIENT_CONNECT_NS,
    CLIENT_DISPATCH_NS,
    DEADLINE_BUDGET_NS,
    OUTBOUND_MESSAGE_SENT,
)
from grpc_overhead.processes import free_port
from tests.instrumentation import echo_service

REQUEST = BytesValue(value=b"x" * 100)
TIMEOUT_S = 20.0


def _clients(spans):
    return sorted(
        (span for span in spans if span.kind.name == "CLIENT"), key=lambda span: span.start_time
    )


def test_a_new_channel_s_first_call_records_its_connection_wait_later_calls_none(
    captured, sync_server
):
    channel = instrument_channel(
        grpc.insecure_channel(sync_server), sync_server, pipeline=captured.pipeline
    )
    echo = echo_service.multicallables(channel)["Echo"]
    for _ in range(3):
        echo(REQUEST, timeout=TIMEOUT_S)
    channel.close()
    first, *later = _clients(captured.spans(at_least=6))
    assert first.attributes[CLIENT_CONNECT_NS] > 0
    assert [span.attributes[CLIENT_CONNECT_NS] for span in later] == [0, 0]
    # The connection wait is inside the call, after the request was handed to gRPC.
    sent = next(e.timestamp for e in first.events if e.name == OUTBOUND_MESSAGE_SENT)
    assert sent + first.attributes[CLIENT_CONNECT_NS] <= first.end_time
    for span in (first, *later):
        assert span.attributes[CLIENT_DISPATCH_NS] >= 0


def test_a_call_waiting_for_a_late_server_records_the_wait_not_the_server_s(captured):
    """wait_for_ready on a port where a server starts 0.5 s later: the call's connection
    wait covers that delay, and the deadline budget the client records is what gRPC core
    had left when it could send (after the wait): the server's dispatch wait excludes it."""
    port = free_port()
    target = f"127.0.0.1:{port}"
    servers = []

    def start_late() -> None:
        time.sleep(0.5)
        server = instrumented_server(
            futures.ThreadPoolExecutor(max_workers=2),
            handlers=[echo_service.sync_handlers()],
            pipeline=captured.pipeline,
        )
        server.add_insecure_port(target)
        server.start()
        servers.append(server)

    options = [("grpc.initial_reconnect_backoff_ms", 20), ("grpc.max_reconnect_backoff_ms", 20)]
    channel = instrument_channel(
        grpc.insecure_channel(target, options), target, pipeline=captured.pipeline
    )
    starter = threading.Thread(target=start_late)
    made = time.time_ns()
    starter.start()
    echo_service.multicallables(channel)["Echo"](REQUEST, timeout=TIMEOUT_S, wait_for_ready=True)
    starter.join()
    channel.close()
    [client] = _clients(captured.spans(at_least=2))
    for server in servers:
        server.stop(None)
    connect = client.attributes[CLIENT_CONNECT_NS]
    sent = next(e.timestamp for e in client.events if e.name == OUTBOUND_MESSAGE_SENT)
    assert connect >= 500_000_000 - (sent - made)  # no earlier than the server existed
    assert sent + connect <= client.end_time
    budget = client.attributes[DEADLINE_BUDGET_NS]
    assert budget <= TIMEOUT_S * 1e9 - connect


async def _aio_calls(target: str, pipeline) -> None:
    channel = instrument_aio_channel(grpc.aio.insecure_channel(target), target, pipeline=pipeline)
    echo = echo_service.multicallables(channel)["Echo"]
    for _ in range(3):
        await echo(REQUEST, timeout=TIMEOUT_S)
    await channel.close()


def test_aio_first_call_records_its_connection_wait_and_a_loop_lag(captured, aio_server):
    asyncio.run(_aio_calls(aio_server, captured.pipeline))
    first, *later = _clients(captured.spans(at_least=6))
    assert first.attributes[CLIENT_CONNECT_NS] > 0
    assert [span.attributes[CLIENT_CONNECT_NS] for span in later] == [0, 0]
    for span in (first, *later):
        assert span.attributes[CLIENT_DISPATCH_NS] >= 0

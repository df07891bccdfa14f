"""Real servers and instrumented channels on free loopback ports."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.instrumentation import (
    SpanPipeline,
    instrument_channel,
    instrumented_aio_server,
)
from tests.instrumentation import echo_service


@dataclass
class Captured:
    pipeline: SpanPipeline
    exporter: InMemorySpanExporter

    def spans(self, at_least: int = 0, timeout_s: float = 10.0):
        """Exported spans; waits (bounded) until at least ``at_least`` arrived, because a
        server finishes its record after the client may already have its response."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.pipeline.force_flush()
            spans = list(self.exporter.get_finished_spans())
            if len(spans) >= at_least or time.monotonic() > deadline:
                return spans
            time.sleep(0.01)

    def pairs(self, calls: int = 1):
        """{client span: server span} joined on trace id + parent span id."""
        spans = self.spans(at_least=2 * calls)
        clients = {span.context.span_id: span for span in spans if span.kind.name == "CLIENT"}
        servers = [span for span in spans if span.kind.name == "SERVER"]
        return {clients[s.parent.span_id]: s for s in servers if s.parent.span_id in clients}


@pytest.fixture
def captured() -> Iterator[Captured]:
    exporter = InMemorySpanExporter()
    pipeline = SpanPipeline(exporter=exporter, export_interval_ms=20)
    yield Captured(pipeline, exporter)
    pipeline.shutdown()


@pytest.fixture
def sync_server(captured: Captured) -> Iterator[str]:
    server, target = echo_service.start_sync_server(captured.pipeline, workers=4)
    yield target
    server.stop(0)


@pytest.fixture
def sync_client(captured: Captured, sync_server: str) -> Iterator[dict]:
    channel = instrument_channel(
        grpc.insecure_channel(sync_server), sync_server, pipeline=captured.pipeline
    )
    yield echo_service.multicallables(channel)
    channel.close()


class AioServerThread:
    """An aio server on its own event loop thread, so sync test code can call it."""

    def __init__(self, handlers: grpc.GenericRpcHandler, pipeline: SpanPipeline) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = None
        self.port = asyncio.run_coroutine_threadsafe(self._start(handlers, pipeline), self.loop)
        self.port = self.port.result(10)

    async def _start(self, handlers, pipeline) -> int:
        self.server = instrumented_aio_server(
            migration_thread_pool=futures.ThreadPoolExecutor(max_workers=4),
            handlers=[handlers],
            pipeline=pipeline,
        )
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return port

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(0), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@pytest.fixture(params=["async_handlers", "sync_handlers"])
def aio_server(request, captured: Captured) -> Iterator[str]:
    handlers = getattr(echo_service, request.param)()
    thread = AioServerThread(handlers, captured.pipeline)
    yield f"127.0.0.1:{thread.port}"
    thread.stop()

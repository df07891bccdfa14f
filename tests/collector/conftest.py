"""Shared fixtures for the collector tests: the real binary, free ports, an OTLP sink.

The binary is built once per session with ``build_collector()`` (a no-op when
``make collector`` already ran). Without Go the collector tests fail, saying why:
``make test`` builds everything it needs, so a missing toolchain is a broken setup
to be seen, never a silent skip.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from grpc_overhead.collector import CollectorUnavailable, build_collector
from grpc_overhead.processes import free_port as free_port_once


@pytest.fixture(scope="session")
def collector_bin() -> Path:
    """The real collector; without Go it fails with build.sh's message (make test installs
    nothing it cannot build, so a missing toolchain must be seen, not skipped)."""
    try:
        return build_collector(echo=False)
    except CollectorUnavailable as error:
        pytest.fail(f"the collector cannot be built here: {error}", pytrace=False)


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A function returning a loopback port that was free a moment ago (all distinct)."""
    given: set[int] = set()

    def pick() -> int:
        while True:
            port = free_port_once()
            if port not in given:
                given.add(port)
                return port

    return pick


@dataclass
class OtlpSink:
    """A real OTLP/gRPC TraceService that records every export request."""

    port: int
    requests: queue.Queue[trace_service_pb2.ExportTraceServiceRequest] = field(
        default_factory=queue.Queue
    )

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def spans(self, count: int, timeout: float) -> list[tuple[object, object]]:
        """Wait for ``count`` spans; return (resource_spans, span) pairs."""
        found: list[tuple[object, object]] = []
        while len(found) < count:
            request = self.requests.get(timeout=timeout)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    found.extend((resource_spans, span) for span in scope_spans.spans)
        return found


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: OtlpSink) -> None:
        self.sink = sink

    def Export(
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.sink.requests.put(request)
        return trace_service_pb2.ExportTraceServiceResponse()


def _start_sink(port: int) -> tuple[grpc.Server, OtlpSink]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    sink = OtlpSink(port=0)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Servicer(sink), server)
    sink.port = server.add_insecure_port(f"127.0.0.1:{port}")
    if sink.port == 0:
        raise RuntimeError(f"could not bind the OTLP sink to 127.0.0.1:{port}")
    server.start()
    return server, sink


@pytest.fixture
def start_otlp_sink() -> Iterator[Callable[[int], OtlpSink]]:
    """A function starting an OTLP sink on a port (0: any free one); all stop at teardown."""
    servers: list[grpc.Server] = []

    def start(port: int = 0) -> OtlpSink:
        server, sink = _start_sink(port)
        servers.append(server)
        return sink

    yield start
    for server in servers:
        server.stop(grace=None)


@pytest.fixture
def otlp_sink(start_otlp_sink: Callable[[int], OtlpSink]) -> OtlpSink:
    """An OTLP sink standing in for the analyzer intake, on a free loopback port."""
    return start_otlp_sink(0)

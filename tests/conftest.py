"""Fixtures shared by every component's tests: free ports and real OTLP sinks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

#: Files that judge real calls' timings against a baseline of their own (ground truth,
#: experiments, clock offsets); some deliberately burn CPU (a busy client, a saturated
#: server). They carry the ``timing`` mark: ``make test`` runs them alone, after the rest
#: has run on its workers, so none is measured beside another test's load.
TIMING_FILES = frozenset(
    {
        "tests/ground_truth/test_findings_ground_truth_e2e.py",
        "tests/ground_truth/test_injected_causes_e2e.py",
        "tests/cli/test_experiment_command.py",
        "tests/pipeline/test_clock_skew_e2e.py",
    }
)


#: The files that take longest (seconds summed over their tests, a quiet fresh-clone run),
#: slowest first. The workers take files in collection order, so these start first and
#: the short ones fill in at the end: no worker is left alone on a long file while the
#: other idles (about 20 s of wall time on two workers).
SLOW_FILES = (
    "tests/app/test_demo.py",  # 104 s (run14a)
    "tests/app/test_browser.py",  # 91 s
    "tests/app/test_app_command.py",  # 71 s
    "tests/reliability/test_fault_suite.py",  # 61 s
    "tests/cli/test_serve_security.py",  # 48 s
    "tests/reliability/test_memory_flood.py",  # 47 s
    "tests/load_generator/test_cpu_wait.py",  # 40-45 s (new, measured alone at load 2-4)
    "tests/app/test_oidc_login.py",  # 40 s
    "tests/jaeger/test_jaeger.py",  # 39 s
    "tests/test_quickstart.py",  # 37 s
    "tests/dashboards/test_dashboards.py",  # 35 s
    "tests/cli/test_experiment_connections.py",  # 35 s
    "tests/prediction/test_prediction_e2e.py",  # 35 s
    "tests/pipeline/test_coexistence_e2e.py",  # 35 s
    "tests/analyzer/test_insights_settled_calls.py",  # 33 s
    "tests/app/test_streamlit_run.py",  # 28 s
    "tests/pipeline/test_tail_sampling_e2e.py",  # 26 s
    "tests/cli/test_serve_retention_e2e.py",  # 24 s
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``timing`` mark on every test of ``TIMING_FILES`` (before ``-m`` selects);
    on the workers of ``pytest -n``, ``SLOW_FILES`` first."""
    for item in items:
        if item.nodeid.split("::", 1)[0] in TIMING_FILES:
            item.add_marker(pytest.mark.timing)
    stale = [name for name in SLOW_FILES if not (config.rootpath / name).is_file()]
    if stale:
        raise pytest.UsageError(f"tests/conftest.py: SLOW_FILES names missing files: {stale}")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: index for index, name in enumerate(SLOW_FILES)}
        items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


@pytest.fixture(scope="session", autouse=True)
def _collector_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Collectors started by tests keep their on-disk queues in a temporary state dir.

    Their default is one folder per config and OTLP port under the user's state
    dir: a test must neither leave queues there nor resend a queue an earlier
    run left behind on the same port.
    """
    previous = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if previous is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = previous


class OtlpSink(trace_service_pb2_grpc.TraceServiceServicer):
    """A real OTLP/gRPC trace endpoint that keeps what it receives (optionally slowly)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def Export(self, request, context):
        if self.delay_s:
            time.sleep(self.delay_s)
        with self._lock:
            self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list:
        with self._lock:
            return [
                (resource_spans.resource, span)
                for request in self.requests
                for resource_spans in request.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            ]

    def wait_for_spans(self, count: int, timeout_s: float = 15.0) -> list:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            spans = self.spans()
            if len(spans) >= count:
                return spans
            time.sleep(0.05)
        return self.spans()


def start_otlp_sink(delay_s: float = 0.0) -> tuple[grpc.Server, OtlpSink, int]:
    sink = OtlpSink(delay_s)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, sink, port


@pytest.fixture(scope="module")
def exporter():
    """The SDK's in-memory span exporter, shared by a module's tests."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def pipeline(exporter):
    """A real SpanPipeline exporting into ``exporter``."""
    from grpc_overhead.instrumentation import SpanPipeline

    pipeline = SpanPipeline(exporter=exporter)
    yield pipeline
    pipeline.shutdown()


@pytest.fixture
def otlp_sink() -> Iterator[tuple[OtlpSink, int]]:
    server, sink, port = start_otlp_sink()
    yield sink, port
    server.stop(0)

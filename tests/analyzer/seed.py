"""Realistic spans for the analyzer's tests, with exact, known timestamps.

Two sources, both ending as ``otel_traces`` rows written the intake's way:

* ``synthetic_call``: the client and server spans of one call as our
  instrumentation emits them, built from a ``Truth`` (durations of every
  phase in true time, the server clock's offset), so a test knows every
  phase to the nanosecond. ``official=True`` drops the events, as
  ``opentelemetry-instrumentation-grpc`` does.
* ``readable_span_rows``: real SDK ``ReadableSpan``s (from a real
  instrumented server and client) through the SDK's own OTLP encoder and the
  intake's ``request_rows``, exactly as the intake would store them.

Fixtures: ``module_store`` (a real chDB store with every analyzer table,
one per test module: chDB runs one engine per process, and opening one
costs about half a second) and ``store`` (that store, emptied for the
test). Use them with
``from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401``.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from grpc_overhead.analyzer.intake.rows import COLUMNS, Rows, request_rows
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.real_spans import official_spans as official_spans
from tests.analyzer.real_spans import real_spans as real_spans

MS = 1_000_000
US = 1_000
BASE_NS = 1_790_000_000 * 1_000_000_000  # 2026-09-21, a fixed wall-clock origin

_ids = itertools.count(1)


def new_ids() -> tuple[str, str, str]:
    """(trace id, client span id, server span id) as lower-case hex, unique per call."""
    n = next(_ids)
    return f"{n:032x}", f"{2 * n:016x}", f"{2 * n + 1:016x}"


@dataclass(frozen=True)
class Truth:
    """One call's timeline in true time (ns); the server clock reads ``server_offset`` ahead.

    The defaults describe a plausible 1 KB unary call on one host.
    """

    start: int = BASE_NS
    before_serialize: int = 20 * US  # requestCreated -> outboundMessage
    client_serialize: int = 15 * US
    request_network: int = 300 * US
    pool_wait: int = 40 * US  # serverCallStarted -> callScheduled
    server_queue: int = 60 * US  # serverCallStarted -> inboundMessage (includes pool_wait)
    request_deserialize: int = 12 * US
    processing: int = 2 * MS
    before_response: int = 5 * US  # predictionsMade -> outboundMessage
    response_serialize: int = 9 * US
    response_network: int = 250 * US
    client_deserialize: int = 11 * US
    after_response: int = 7 * US  # client inboundMessageRead -> span end
    server_offset: int = 0
    # The server's interceptor chain (events only with ``chain``): intercept_service
    # (serverCallStarted -> serviceIntercepted, inside server_queue and pool_wait), the
    # chain's behaviour before the servicer's method (after a 10 µs handoff that is part of
    # processing) and after it; post_processing: a mark this long before the method
    # returned (0: no mark).
    chain: bool = False
    intercept_service: int = 0
    interceptors_before: int = 0
    interceptors_after: int = 0
    post_processing: int = 0
    # The client's own waits, recorded as its span's attributes when set (None: not
    # measured, as from other instrumentations): for a ready channel after the request was
    # handed to gRPC, and to run again after the response arrived.
    client_connect: int | None = None
    client_dispatch: int | None = None

    def expected_phases_us(self) -> dict[str, float]:
        """Every phase of the design as the analyzer must report it (raw, in µs)."""
        skew = self.server_offset
        intercepted = self.intercept_service if self.chain else 0
        chain = self.interceptors_before + self.interceptors_after
        consecutive = {
            "client_serialize": self.client_serialize,
            **({} if self.client_connect is None else {"client_connect": self.client_connect}),
            "request_network": self.request_network + skew,
            "server_queue": self.server_queue - intercepted,
            "request_deserialize": self.request_deserialize,
            "processing": self.processing + (0 if self.chain else chain),
            "response_serialize": self.response_serialize,
            "response_network": self.response_network - skew,
            **({} if self.client_dispatch is None else {"client_dispatch": self.client_dispatch}),
            "client_deserialize": self.client_deserialize,
        }
        if self.chain:
            consecutive["server_interceptors"] = intercepted + chain
        if self.post_processing:
            consecutive["post_processing"] = self.post_processing
        total = (
            self.before_serialize
            + sum(consecutive.values())
            + self.before_response
            + self.after_response
        )
        server_duration = (
            self.server_queue
            + self.request_deserialize
            + self.processing
            + chain
            + self.post_processing
            + self.before_response
            + self.response_serialize
        )
        phases = {
            **consecutive,
            "total": total,
            "server_residence": server_duration,
            "network_overhead": total - consecutive["processing"],
            "unattributed": total - sum(consecutive.values()),
            "pool_wait": self.pool_wait - intercepted,
            "server_duration": server_duration,
            "client_server_gap": total - server_duration,
        }
        return {name: value / US for name, value in phases.items()}


@dataclass
class Span:
    """One ``otel_traces`` row, with the fields the tests vary."""

    trace_id: str
    span_id: str
    parent_span_id: str
    kind: str
    start: int
    end: int
    service_name: str
    resource: dict[str, str]
    attributes: dict[str, str]
    events: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)
    status: str = "Unset"
    name: str = "predict.Predictor/Predict"
    scope: str = "grpc_overhead"
    status_message: str = ""

    def row(self) -> list[Any]:
        duration = (self.end - self.start) & ((1 << 64) - 1)  # the exporter's uint64 wrap
        return [
            self.start,
            self.trace_id,
            self.span_id,
            self.parent_span_id,
            "",
            self.name,
            self.kind,
            self.service_name,
            self.resource,
            self.scope,
            "0.1.0",
            self.attributes,
            duration,
            self.status,
            self.status_message,
            [time for _, time, _ in self.events],
            [name for name, _, _ in self.events],
            [attributes for _, _, attributes in self.events],
            [],
            [],
            [],
            [],
        ]


def _message(message_id: int, size: int, sent: bool, compressed: bool = False) -> dict[str, str]:
    attributes = {
        "rpc.message.type": "SENT" if sent else "RECEIVED",
        "rpc.message.id": str(message_id),
        "rpc.message.uncompressed_size": str(size),
    }
    if compressed:
        attributes["rpc.message.compressed_size"] = str(size)
    return attributes


def synthetic_call(
    truth: Truth | None = None,
    *,
    client_host: str = "host-a",
    server_host: str = "host-a",
    service: str = "predict.Predictor",
    method: str = "Predict",
    run_id: str = "run-1",
    official: bool = False,
    client_kind: str = "Client",
    server_kind: str = "Server",
    request_bytes: int = 1024,
    response_bytes: int = 512,
    ids: tuple[str, str, str] | None = None,
) -> tuple[Span, Span]:
    """The (client span, server span) of one unary call following ``truth`` exactly."""
    t = truth or Truth()
    trace_id, client_id, server_id = ids or new_ids()
    created = t.start
    outbound = created + t.before_serialize
    sent = outbound + t.client_serialize
    started = sent + (t.client_connect or 0) + t.request_network
    scheduled = started + t.pool_wait
    inbound = started + t.server_queue
    read = inbound + t.request_deserialize
    handoff = min(10 * US, t.processing)  # deserializer -> worker (processing's)
    entered = read + handoff
    handler_started = entered + t.interceptors_before
    made = handler_started + t.processing - handoff
    handler_returned = made + t.post_processing
    chain_returned = handler_returned + t.interceptors_after
    server_outbound = chain_returned + t.before_response
    server_sent = server_outbound + t.response_serialize
    received = server_sent + t.response_network + (t.client_dispatch or 0)
    client_read = received + t.client_deserialize
    client_end = client_read + t.after_response
    skew = t.server_offset

    common = {
        "rpc.system": "grpc",
        "rpc.service": service,
        "rpc.method": method,
        "rpc.grpc.status_code": "0",
    }
    ours = (
        {}
        if official
        else {"grpc_overhead.call_type": "unary_unary", "grpc_overhead.run_id": run_id}
    )
    residence = (
        {} if official else {"grpc_overhead.server_residence_ns": str(server_sent - started)}
    )
    if not official and t.client_connect is not None:
        residence["grpc_overhead.client_connect_ns"] = str(t.client_connect)
    if not official and t.client_dispatch is not None:
        residence["grpc_overhead.client_dispatch_ns"] = str(t.client_dispatch)
    client = Span(
        trace_id,
        client_id,
        "",
        client_kind,
        created,
        client_end,
        "load-generator",
        {"service.name": "load-generator", "host.name": client_host, "service.instance.id": "c-1"},
        {**common, **ours, **residence, "server.address": "10.0.0.2", "server.port": "50051"},
        name=f"{service}/{method}",
    )
    server = Span(
        trace_id,
        server_id,
        client_id,
        server_kind,
        started + skew,
        server_sent + skew,
        "prediction-service",
        {
            "service.name": "prediction-service",
            "host.name": server_host,
            "service.instance.id": "s-1",
        },
        {**common, **ours, **residence, "network.peer.address": "10.0.0.1"},
        name=f"{service}/{method}",
    )
    if not official:
        client.events = [
            ("requestCreated", created, {}),
            ("outboundMessage", outbound, {"rpc.message.type": "SENT", "rpc.message.id": "1"}),
            ("outboundMessageSent", sent, _message(1, request_bytes, True, True)),
            ("clientReceivedResponse", received, _message(1, response_bytes, False)),
            ("inboundMessageRead", client_read, _message(1, response_bytes, False)),
        ]
        server.events = [
            (name, time + skew, attributes)
            for name, time, attributes in [
                ("serverCallStarted", started, {}),
                *([("serviceIntercepted", started + t.intercept_service, {})] if t.chain else []),
                ("callScheduled", scheduled, {}),
                ("inboundMessage", inbound, _message(1, request_bytes, False)),
                ("inboundMessageRead", read, _message(1, request_bytes, False)),
                *_chain_events(t, entered, handler_started, made, handler_returned),
                *([("interceptorsReturned", chain_returned, {})] if t.chain else []),
                ("outboundMessage", server_outbound, {"rpc.message.id": "1"}),
                ("outboundMessageSent", server_sent, _message(1, response_bytes, True, True)),
            ]
        ]
    return client, server


def _chain_events(
    t: Truth, entered: int, handler_started: int, made: int, handler_returned: int
) -> list[tuple[str, int, dict[str, str]]]:
    """The server's events from the chain's behaviour to the method's return."""
    events = []
    if t.chain:
        events += [("interceptorsEntered", entered, {}), ("handlerStarted", handler_started, {})]
    events.append(("predictionsMade", made, {}))
    if t.post_processing:
        events.append(("handlerReturned", handler_returned, {}))
    return events


def compress_with(algorithm: str, *spans: Span) -> None:
    """Label a call's spans with ``algorithm`` as the instrumentation would: gzip as gRPC
    compression (``grpc.compression``), zstd as the service's payload codec; else none."""
    for span in spans:
        if algorithm == "gzip":
            span.attributes["grpc.compression"] = "gzip"
        elif algorithm == "zstd":
            span.attributes["grpc_overhead.payload.codec"] = "zstd"


def insert_spans(store: Store, spans: Iterable[Span], table: str = "otel_traces") -> int:
    """One INSERT of the given spans (one part: both halves of a call may share it)."""
    rows = [span.row() for span in spans]
    if not rows:
        return 0
    columns = [list(column) for column in zip(*rows, strict=True)]
    return store.insert(table, COLUMNS, columns)


def insert_rows(store: Store, rows: Rows, table: str = "otel_traces") -> int:
    return store.insert(table, COLUMNS, rows.columns)


def readable_span_rows(spans: Sequence[Any]) -> Rows:
    """SDK ``ReadableSpan``s -> ``otel_traces`` rows: the SDK's OTLP encoder, then the
    intake's own mapping (``request_rows``), so the rows are the intake's."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return request_rows(encode_spans(spans))


def calls_across_hosts(
    count: int,
    *,
    server_offset: int,
    request_network: int,
    response_network: int,
    jitter: int = 0,
    start: int = BASE_NS,
    spacing: int = 10 * MS,
) -> list[tuple[Span, Span]]:
    """``count`` calls from host-a to host-b whose server clock is ``server_offset`` ahead.

    ``jitter`` adds a deterministic, call-dependent queueing delay (0..jitter)
    to both directions, so round trips differ as on a real network and the
    estimator must pick the tightest call.
    """
    calls = []
    for index in range(count):
        extra = (index * 7919) % (jitter + 1) if jitter else 0
        truth = replace(
            Truth(),
            start=start + index * spacing,
            server_offset=server_offset,
            request_network=request_network + extra,
            response_network=response_network + extra // 2,
        )
        calls.append(synthetic_call(truth, client_host="host-a", server_host="host-b"))
    return calls


# -- stores ---------------------------------------------------------------------------------------


@contextlib.contextmanager
def analysis_store(directory: Any) -> Iterator[Store]:
    """A real chDB store with ``otel_traces``, ``grpc_calls``, its views; closed after."""
    from grpc_overhead.analyzer.phase_view import create_call_tables
    from grpc_overhead.analyzer.schema import create_schema
    from grpc_overhead.analyzer.store import open_store

    store = open_store(str(directory))
    try:
        create_schema(store)
        create_call_tables(store)
        yield store
    finally:
        store.close()


def clear(store: Store) -> Store:
    """Empty every table (a module's store is shared by its tests)."""
    for table in (
        "otel_traces",
        "grpc_calls",
        "grpc_phase_rollup",
        "grpc_offset_rollup",
        "grpc_settled_calls",
    ):
        store.command(f"TRUNCATE TABLE IF EXISTS {table}")
    return store


@pytest.fixture(scope="module", name="module_store")
def module_store_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    with analysis_store(tmp_path_factory.mktemp("store")) as store:
        yield store


@pytest.fixture(name="store")
def store_fixture(module_store: Store) -> Store:
    """The module's store, emptied for this test."""
    return clear(module_store)

"""Turns a finished ``CallRecord`` into an SDK ``ReadableSpan``; runs on the export worker.

This is where the cost the hot path avoided is paid: strings, dictionaries,
SpanContext objects, wall-clock conversion and the exact compressed size of
sampled messages (re-compressed here with the parameters gRPC core uses), and the
compressibility of the few messages kept for it (compressibility.py).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from grpc_overhead.instrumentation import clock
from grpc_overhead.instrumentation.compressibility import WINDOW_BITS, sample_attributes
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.version import __version__
from grpc_overhead.instrumentation.vocabulary import (
    CALL_TYPE,
    CLIENT_CONNECT_NS,
    CLIENT_DISPATCH_NS,
    CLIENT_RECEIVED_RESPONSE,
    COMPRESSION,
    DEADLINE_BUDGET_NS,
    EXCEPTION,
    INBOUND_MESSAGE,
    INBOUND_MESSAGE_READ,
    MESSAGE_COMPRESSED_SIZE,
    MESSAGE_ID,
    MESSAGE_TYPE,
    MESSAGE_UNCOMPRESSED_SIZE,
    OUTBOUND_MESSAGE_SENT,
    PEER_ADDRESS,
    PEER_PORT,
    RPC_GRPC_STATUS_CODE,
    RPC_METHOD,
    RPC_SERVICE,
    RPC_SYSTEM,
    RUN_ID,
    SAMPLING_REASON,
    SAMPLING_SERVER_INSTANCE,
    SAMPLING_WEIGHT,
    SERVER_ADDRESS,
    SERVER_PORT,
    SERVER_RESIDENCE_NS,
)

SCOPE = InstrumentationScope("grpc_overhead.instrumentation", __version__)
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

_STATUS_NAMES = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}
# The RPC semantic conventions count these as server errors; the client marks all non-OK.
_SERVER_ERROR_CODES = {2, 4, 12, 13, 14, 15}


def split_method(method: str) -> tuple[str, str]:
    """'/pkg.Service/Method' -> ('pkg.Service', 'Method'); tolerant of odd names."""
    service, _, name = method.lstrip("/").rpartition("/")
    return service, name


def parse_peer(peer: str) -> tuple[str | None, int | None]:
    """grpcio's peer string ('ipv4:1.2.3.4:5', 'ipv6:[::1]:5', 'unix:/p') -> (address, port)."""
    scheme, _, rest = peer.partition(":")
    if scheme == "unix" or not rest:
        return rest or peer, None
    host, _, port = rest.rpartition(":")
    host = host.strip("[]") or rest
    return host, int(port) if port.isdigit() else None


def parse_target(target: str) -> tuple[str | None, int | None]:
    """A channel target ('host:port', 'dns:///host:port', 'ipv4:...') -> (host, port)."""
    rest = target
    if "://" in rest:
        rest = rest.split("://", 1)[1].lstrip("/")
    elif rest.startswith(("ipv4:", "ipv6:", "dns:", "unix:")):
        rest = rest.split(":", 1)[1]
    if rest.startswith("["):
        host, _, port = rest[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = rest.rpartition(":")
        if not host:
            host, port = rest, ""
    return host or None, int(port) if port.isdigit() else None


def compressed_size(payload: bytes, compression: str) -> int:
    """Exact on-the-wire size of a message gRPC core compressed (it sends the smaller)."""
    bits = WINDOW_BITS.get(compression)
    if bits is None:
        return len(payload)
    compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, bits)
    size = len(compressor.compress(payload)) + len(compressor.flush())
    return min(size, len(payload))


class SpanDescription:
    """Everything a span says, computed once from a record; both the SDK ``ReadableSpan``
    builder and the OTLP wire encoder (otlp.py) render this, so they cannot disagree."""

    __slots__ = ("attributes", "end", "error", "events", "record", "status_message")

    def __init__(self, record: CallRecord) -> None:
        offset = clock.wall_offset_ns()
        self.record = record
        attributes = call_attributes(record)
        if record.residence_ns >= 0:
            attributes[SERVER_RESIDENCE_NS] = record.residence_ns
        sampling = sampling_attributes(record)
        if sampling:
            attributes.update(sampling)
        budget = deadline_budget(record)
        if budget is not None:
            attributes[DEADLINE_BUDGET_NS] = budget
        connect, dispatch = client_waits(record)
        if connect is not None:
            attributes[CLIENT_CONNECT_NS] = connect
        if dispatch is not None:
            attributes[CLIENT_DISPATCH_NS] = dispatch
        sample = sample_attributes(record)
        if sample:
            attributes.update(sample)
        if record.attributes:
            attributes.update(record.attributes)
        self.attributes = attributes

        recorded = record.events[:]  # one list: a handler's thread may still add one
        events: list[tuple[str, int, dict[str, Any] | None]] = [
            (event[0], event[1] + offset, message_attributes(event, record)) for event in recorded
        ]
        code = record.status_code
        self.error = bool(code and (record.client or code in _SERVER_ERROR_CODES))
        self.status_message: str | None = None
        if self.error:
            name = _STATUS_NAMES.get(code, str(code))
            message = record.status_message
            self.status_message = f"{name}: {message}" if message else name
        if record.exception is not None:
            exception = record.exception
            events.append(
                (
                    EXCEPTION,
                    record.end + offset,
                    {
                        "exception.type": type(exception).__qualname__,
                        "exception.message": str(exception),
                        "exception.escaped": True,
                    },
                )
            )
        self.events = events
        self.end = span_end(record, recorded)

    @property
    def name(self) -> str:
        return self.record.method.lstrip("/")

    @property
    def start_time(self) -> int:
        return self.record.start + clock.wall_offset_ns()

    @property
    def end_time(self) -> int:
        return self.end + clock.wall_offset_ns()


def span_end(record: CallRecord, events: Sequence[tuple]) -> int:
    """When the span ends (monotonic ns), never before its start nor its last event: a
    handler's thread may record an event just after another thread ended the call
    (grpc.aio with sync handlers: 55 us after, once). ``events``: one copy of
    ``record.events``, the one the span's events come from. Both encoders use it."""
    return max(record.end, record.start, max((event[1] for event in events), default=0))


def sampling_attributes(record: CallRecord) -> dict[str, Any] | None:
    """What a kept call stands for and why (``vocabulary.SAMPLING_WEIGHT``): set under
    tail-aware sampling (every kept call) and head sampling below a ratio of 1."""
    weight = record.sampling_weight
    if weight:
        kept = {SAMPLING_WEIGHT: weight, SAMPLING_REASON: record.sampling_reason or "head"}
        if record.peer_instance:
            kept[SAMPLING_SERVER_INSTANCE] = record.peer_instance
        return kept
    weight = record.recorder.sampler.head_weight
    return {SAMPLING_WEIGHT: weight, SAMPLING_REASON: "head"} if weight else None


def call_attributes(record: CallRecord) -> dict[str, Any]:
    """The attributes every call of one method, peer, status and run shares (the
    export path caches their encoding: see otlp_fast.py)."""
    service, method = split_method(record.method)
    attributes: dict[str, Any] = {
        RPC_SYSTEM: "grpc",
        RPC_SERVICE: service,
        RPC_METHOD: method,
        RPC_GRPC_STATUS_CODE: record.status_code,
        CALL_TYPE: record.call_type,
    }
    if record.compression:
        attributes[COMPRESSION] = record.compression
    if record.peer:
        address, port = (parse_target if record.client else parse_peer)(record.peer)
        if address is not None:
            attributes[SERVER_ADDRESS if record.client else PEER_ADDRESS] = address
        if port is not None:
            attributes[SERVER_PORT if record.client else PEER_PORT] = port
    if record.run_id:
        attributes[RUN_ID] = record.run_id
    return attributes


def deadline_budget(record: CallRecord) -> int | None:
    """Time left before the deadline when the request left the client (its first
    outboundMessageSent) or when the server saw the call (serverCallStarted).

    Both are durations on one clock each, so their difference needs no clock
    agreement: gRPC core carries the deadline as a duration (grpc-timeout) and
    the server's core starts counting it when it parses the headers, so
    client budget - server budget = the time the call waited on the server
    before gRPC Python saw it (plus core's millisecond rounding; see the
    analyzer's server_dispatch phase).
    """
    if not record.deadline:
        return None
    if not record.client:
        return record.deadline - record.start
    sent = _first(record, OUTBOUND_MESSAGE_SENT)
    if not sent:
        return None
    # gRPC core encodes grpc-timeout when it sends the headers: after any wait for a
    # connection, which is the client's (client_connect), never the server's dispatch.
    return record.deadline - sent - (client_connect(record) or 0)


def _first(record: CallRecord, name: str) -> int:
    for event in record.events:
        if event[0] == name:
            return event[1]
    return 0


def client_connect(record: CallRecord) -> int | None:
    """How long the call waited for a ready channel after its request was handed to
    gRPC (connect.ReadyWatch), or None where not measured."""
    watch = record.connect_watch
    if watch is None:
        return None
    sent = _first(record, OUTBOUND_MESSAGE_SENT) or record.start
    return watch.wait_ns(sent, record.end, _first(record, CLIENT_RECEIVED_RESPONSE))


def client_waits(record: CallRecord) -> tuple[int | None, int | None]:
    """(client_connect, client_dispatch) in ns, None where not measured (servers)."""
    if not record.client:
        return None, None
    dispatch = record.dispatch_ns if record.dispatch_ns >= 0 else None
    return client_connect(record), dispatch


def message_attributes(event: tuple, record: CallRecord) -> dict[str, Any] | None:
    name, _timestamp, message_id, size, payload = event
    if not message_id:
        return None
    inbound = name in (INBOUND_MESSAGE, INBOUND_MESSAGE_READ, CLIENT_RECEIVED_RESPONSE)
    attributes: dict[str, Any] = {
        MESSAGE_TYPE: "RECEIVED" if inbound else "SENT",
        MESSAGE_ID: message_id,
    }
    if size >= 0:
        attributes[MESSAGE_UNCOMPRESSED_SIZE] = size
        if name == OUTBOUND_MESSAGE_SENT:
            if not record.compression:
                attributes[MESSAGE_COMPRESSED_SIZE] = size
            elif payload is not None:
                attributes[MESSAGE_COMPRESSED_SIZE] = compressed_size(payload, record.compression)
    return attributes


class SpanBuilder:
    """Renders descriptions as SDK ``ReadableSpan``s, for any SDK ``SpanExporter``."""

    def __init__(self, resource: Resource) -> None:
        self.resource = resource

    def build(self, record: CallRecord) -> ReadableSpan:
        description = SpanDescription(record)
        context = SpanContext(record.trace_id, record.span_id, False, _SAMPLED)
        parent = (
            SpanContext(record.trace_id, record.parent_span_id, record.parent_is_remote, _SAMPLED)
            if record.parent_span_id
            else None
        )
        status = (
            Status(StatusCode.ERROR, description.status_message)
            if description.error
            else Status(StatusCode.UNSET)
        )
        return ReadableSpan(
            name=description.name,
            context=context,
            parent=parent,
            resource=self.resource,
            attributes=description.attributes,
            events=[Event(name, attributes, time) for name, time, attributes in description.events],
            kind=SpanKind.CLIENT if record.client else SpanKind.SERVER,
            status=status,
            start_time=description.start_time,
            end_time=description.end_time,
            instrumentation_scope=SCOPE,
        )

"""Calls as their messages: one row per request and response message (``grpc_message_phases``).

A stream is described per message (``stream_phases`` says why and defines each
phase); this is that description as rows, for every call shape (a unary call
has one request and one response row), so a user can ask "which message of
this stream was slow" or "does transfer grow along a stream" in plain SQL, and
the call explorer draws a stream as its messages.

Every moment is put on the *client's* clock (server times less the call's
clock offset, as the one-way phases are corrected), so a row's ``*_at_us``
columns draw one timeline from the call's start.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from grpc_overhead.analyzer.clock_offsets import ClockOptions, query_parameters
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.stream_phases import (
    CALL_SHAPE,
    MESSAGE_ARRAYS,
    RESPONSE_HANDLER,
    message_times,
)

MESSAGES_VIEW = "grpc_message_phases"

_TO_CLIENT = "if({t} != 0, toInt64({t} - if(clock_defined, clock_offset_ns, 0)), toInt64(0))"


def _client_clock(time: str) -> str:
    return _TO_CLIENT.format(t=time)


def _m(array: str) -> str:
    return f"m_{array}"


_HANDLER_START = (
    RESPONSE_HANDLER.replace("server_response_serialize_ns[k] - ", "")
    .replace("server_response_serialize_ns", _m("server_response_serialize_ns"))
    .replace("server_response_sent_ns", _m("server_response_sent_ns"))
    .replace("server_request_read_ns", _m("server_request_read_ns"))
)
_REQUESTS = (
    "arrayMap(k -> ('request', k,"
    f" {_m('client_request_serialize_ns')}[k], {_m('client_request_sent_ns')}[k],"
    f" {_client_clock(_m('server_request_received_ns') + '[k]')},"
    f" {_client_clock(_m('server_request_read_ns') + '[k]')}, toInt64(0)),"
    f" range(1, toUInt64(greatest(length({_m('client_request_sent_ns')}),"
    f" length({_m('server_request_read_ns')}), length({_m('server_request_received_ns')}))) + 1))"
)
_RESPONSES = (
    "arrayMap(k -> ('response', k,"
    f" {_client_clock(_m('server_response_serialize_ns') + '[k]')},"
    f" {_client_clock(_m('server_response_sent_ns') + '[k]')},"
    f" {_m('client_response_received_ns')}[k], {_m('client_response_read_ns')}[k],"
    f" {_client_clock('handler_start[k]')}),"
    f" range(1, toUInt64(greatest(length({_m('server_response_sent_ns')}),"
    f" length({_m('client_response_read_ns')}), length({_m('client_response_received_ns')})))"
    " + 1))"
)

#: (column, expression over the ARRAY JOINed row, what it is), after the call's identity.
_ELAPSED = "if({t} != 0, (toFloat64({t}) - call_start_ns) / 1000, NULL)"
_BETWEEN = "if({a} != 0 AND {b} != 0, toFloat64({b} - {a}) / 1000, NULL)"
MESSAGE_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("direction", "m.1", "request (client -> server) or response (server -> client)"),
    ("message", "toUInt32(m.2)", "the message's number in its direction (1 = first)"),
    (
        "serialize_us",
        _BETWEEN.format(a="m.3", b="m.4"),
        "the sender's serializer, entry -> exit",
    ),
    (
        "transfer_us",
        _BETWEEN.format(a="m.4", b="if(m.5 != 0, m.5, m.6)"),
        "sender's serializer exit -> receiver's deserializer entry, clock-corrected:"
        " the wire plus the receiver's wait to read it",
    ),
    (
        "deserialize_us",
        _BETWEEN.format(a="m.5", b="m.6"),
        "the receiver's deserializer, entry -> exit",
    ),
    (
        "handler_us",
        _BETWEEN.format(a="m.7", b="m.3"),
        "responses: the server's previous message event -> this response's serialization",
    ),
    ("serialize_at_us", _ELAPSED.format(t="m.3"), "serializer entry, µs after the call's start"),
    ("sent_at_us", _ELAPSED.format(t="m.4"), "serializer exit (handed to the transport)"),
    ("received_at_us", _ELAPSED.format(t="m.5"), "deserializer entry on the receiver"),
    ("read_at_us", _ELAPSED.format(t="m.6"), "deserializer exit on the receiver"),
    (
        "clock_offset_us",
        "if(clock_defined, clock_offset_ns / 1000, NULL)",
        "server clock minus client clock applied (0 on one host)",
    ),
)
_IDENTITY: tuple[tuple[str, str, str], ...] = (
    ("trace_id", "TraceId", "W3C trace id (hex)"),
    ("client_span_id", "ClientSpanId", "with trace_id, the call's key (grpc_call_phases)"),
    (
        "start_time",
        "fromUnixTimestamp64Nano(call_start_ns, 'UTC')",
        "DateTime64(9, 'UTC'): the call's start",
    ),
    ("rpc_service", "toString(service)", "gRPC service"),
    ("rpc_method", "toString(method)", "gRPC method"),
    (
        "call_shape",
        "toString(call_shape)",
        "unary, client_streaming, server_streaming, bidi_streaming",
    ),
    ("run_id", "toString(run_id)", "grpc_overhead.run_id ('' when none)"),
    ("client_instance", "toString(client_instance)", "service.instance.id of the client"),
    ("server_instance", "toString(server_instance)", "service.instance.id of the server"),
)


def messages_sql(options: CallsOptions | None = None, keys: str = "") -> str:
    """One row per message of every call ``per_call_sql`` reads (same parameters; ``keys``:
    only those calls)."""
    arrays = [f"{message_times(name)} AS {_m(name)}" for name in MESSAGE_ARRAYS]
    columns = [
        "TraceId",
        "ClientSpanId",
        "call_start_ns",
        f"{CALL_SHAPE} AS call_shape",
        "service",
        "method",
        "run_id",
        "client_instance",
        "server_instance",
        "clock_defined",
        "clock_offset_ns",
        *arrays,
        f"{_HANDLER_START} AS handler_start",
    ]
    outputs = [f"{expression} AS {name}" for name, expression, _ in _IDENTITY + MESSAGE_COLUMNS]
    return (
        "SELECT\n    "
        + ",\n    ".join(outputs)
        + f"\nFROM (\n{per_call_sql(options, columns=columns, keys=keys)}\n)"
        + f"\nARRAY JOIN arrayConcat({_REQUESTS}, {_RESPONSES}) AS m"
    )


def view_columns() -> list[tuple[str, str]]:
    """(column, what it is) for every column of ``grpc_message_phases``, in order."""
    return [(name, text) for name, _, text in _IDENTITY + MESSAGE_COLUMNS]


_ONE_CALL = "SELECT {trace_id:String}, {client_span_id:String}"


def call_messages(
    store: Store,
    trace_id: str,
    client_span_id: str,
    clock: ClockOptions | None = None,
    options: CallsOptions | None = None,
) -> pd.DataFrame:
    """One call's messages (``MESSAGE_COLUMNS``), requests then responses, in order."""
    parameters: dict[str, Any] = query_parameters(CallFilters(), clock)
    parameters |= {"trace_id": trace_id, "client_span_id": client_span_id}
    sql = f"SELECT * FROM ({messages_sql(options, keys=_ONE_CALL)}) ORDER BY direction, message"
    return store.query(sql, parameters, readonly=True)

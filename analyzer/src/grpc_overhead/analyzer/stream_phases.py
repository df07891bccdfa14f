"""Streams, per message: SQL over a merged ``grpc_calls`` row (``phases`` and ``messages``).

A unary call's phases assume one message each way: serverCallStarted -> the
request read is the request's wait, the request read -> predictionsMade the
handler. A stream breaks that assumption: grpcio's serverCallStarted fires
when the *headers* arrive, before the client serialized its first message, so
"first outboundMessageSent -> serverCallStarted" is no network time (it goes
negative), and a server-streaming handler returns long after its first
response left. Streams are therefore described per message instead: each
message is paired with itself on the other side by its message id (the k-th
request the client sent is the k-th the server read), and gets

* ``serialize``: the sender's serializer entry -> exit;
* ``transfer``: the sender's serializer exit -> the receiver's deserializer entry,
  clock-corrected like the one-way network phases (exact on a shared clock). It
  holds the wire *and the receiver's wait to read it*: grpcio deserializes a
  message when the reader asks for it (a handler's ``next(request_iterator)``,
  a client's ``next(responses)``), so a message that waited in the transport's
  buffer while the reader was busy counts that wait here;
* ``deserialize``: the receiver's deserializer entry -> exit;
* responses also ``handler``: the server's previous message event (the last
  request read, or the previous response handed to the transport, or the call's
  start) -> this response's serializer entry: the handler's time producing it.

Per call (``STREAM_PHASES``): the median of each over the call's messages, time
to first response (client span start -> first response deserialized) and stream
duration (the client's first to last message event). Every one is a difference
of two moments that follow each other on one timeline, so none is negative on
a shared clock. The unary phases that assume one message each way are NULL for
streams (``phases.UNARY_ONLY``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from grpc_overhead.analyzer import span_sources as src
from grpc_overhead.analyzer.result_columns import CONSECUTIVE_PHASES

#: The phases whose definition assumes one message each way: NULL for streams, where
#: "first request sent -> serverCallStarted" is no network time (the server sees the call
#: when its headers arrive, before the first message) and a handler's return is not its
#: first response. (Derived ones follow: network_overhead, unattributed, the aliases.)
UNARY_ONLY: tuple[str, ...] = (
    *CONSECUTIVE_PHASES,
    "request_network_raw",
    "response_network_raw",
    "client_pre_send",
    "server_receive",
    "server_handler",
    "request_receive",
    "response_receive",
    "network_round_trip",
)
STREAM_CALL_TYPES: tuple[str, ...] = ("unary_stream", "stream_unary", "stream_stream")
_STREAM_TYPES = repr(STREAM_CALL_TYPES)


def is_stream_row(row: Mapping[str, Any]) -> bool:
    """``IS_STREAM`` for one ``grpc_calls`` row read into Python (the explorer's waterfall
    draws a stream's messages, never a first-message "network" bar that starts before the
    request was sent)."""
    return (
        str(row["call_type"]) in STREAM_CALL_TYPES
        or int(row["request_messages"]) > 1
        or int(row["response_messages"]) > 1
    )


#: Whether a merged call is a stream: its spans say so, or a direction had several messages.
IS_STREAM = (
    f"(call_type IN {_STREAM_TYPES} OR request_messages > 1 OR response_messages > 1"
    " OR notEmpty(client_request_sent_ns) OR notEmpty(server_response_sent_ns))"
)
#: gRPC's four call shapes, in the words of its docs ('' when nothing says).
CALL_SHAPE = (
    "multiIf(call_type = 'unary_unary', 'unary', call_type = 'stream_unary', 'client_streaming',"
    " call_type = 'unary_stream', 'server_streaming', call_type = 'stream_stream',"
    " 'bidi_streaming', request_messages > 1 AND response_messages > 1, 'bidi_streaming',"
    " request_messages > 1, 'client_streaming', response_messages > 1, 'server_streaming',"
    " request_messages = 1 AND response_messages = 1, 'unary', '')"
)
STREAM_SHAPES: tuple[str, ...] = ("client_streaming", "server_streaming", "bidi_streaming")
SHAPES: tuple[str, ...] = ("unary", *STREAM_SHAPES)

_OFFSET = "if(clock_defined, clock_offset_ns, 0)"

#: The per-message arrays and the first-message column that holds a unary call's one value.
MESSAGE_ARRAYS: dict[str, str] = {
    "client_request_serialize_ns": "client_outbound_message_ns",
    "client_request_sent_ns": "client_outbound_message_sent_ns",
    "client_response_received_ns": "client_received_response_ns",
    "client_response_read_ns": "client_inbound_message_read_ns",
    "server_request_received_ns": "server_inbound_message_ns",
    "server_request_read_ns": "server_inbound_message_read_ns",
    "server_response_serialize_ns": "server_outbound_message_ns",
    "server_response_sent_ns": "server_outbound_message_sent_ns",
}


def message_times(array: str) -> str:
    """Per message, one event's times: the stream's array, else a unary call's first
    message (``[]`` where the half that records it is missing)."""
    first = MESSAGE_ARRAYS[array]
    return f"if(notEmpty({array}), {array}, if({first} != 0, [{first}], CAST([], 'Array(Int64)')))"


#: A moment some sources do not record falls back to the nearest one they do: grpc-go's
#: and semconv's inbound events come after deserialization, grpc-java's before it.
SERVER_REQUEST_ARRIVED = (
    "if(notEmpty(server_request_received_ns), server_request_received_ns, server_request_read_ns)"
)
CLIENT_RESPONSE_ARRIVED = (
    "if(notEmpty(client_response_received_ns), client_response_received_ns,"
    " client_response_read_ns)"
)


def _pairs(later: str, earlier: str, shift: str = "") -> str:
    """Per message k present in both arrays: ``later[k] - earlier[k]`` (+ ``shift``)."""
    return (
        f"arrayMap(k -> {later}[k] - {earlier}[k]{shift},"
        f" range(1, toUInt64(least(length({later}), length({earlier}))) + 1))"
    )


#: Per response: the handler's time producing it (see the module docstring).
RESPONSE_HANDLER = (
    "arrayMap(k -> server_response_serialize_ns[k] - greatest("
    "if(k > 1, server_response_sent_ns[k - 1], toInt64(0)),"
    " arrayMax(arrayPushFront(arrayFilter(r -> r <= server_response_serialize_ns[k],"
    " server_request_read_ns), toInt64(0))), server_call_started_ns),"
    " range(1, length(server_response_serialize_ns) + 1))"
)

#: Per-message differences, per stream phase: (phase, array of ns per message).
_PER_MESSAGE: tuple[tuple[str, str], ...] = (
    ("request_message_serialize", _pairs("client_request_sent_ns", "client_request_serialize_ns")),
    (
        "request_message_transfer",
        _pairs(SERVER_REQUEST_ARRIVED, "client_request_sent_ns", f" - {_OFFSET}"),
    ),
    (
        "request_message_deserialize",
        _pairs("server_request_read_ns", "server_request_received_ns"),
    ),
    ("response_message_handler", RESPONSE_HANDLER),
    (
        "response_message_serialize",
        _pairs("server_response_sent_ns", "server_response_serialize_ns"),
    ),
    (
        "response_message_transfer",
        _pairs(CLIENT_RESPONSE_ARRIVED, "server_response_sent_ns", f" + {_OFFSET}"),
    ),
    (
        "response_message_deserialize",
        _pairs("client_response_read_ns", "client_response_received_ns"),
    ),
)

_CLIENT_MESSAGE_TIMES = (
    "arrayConcat(client_request_serialize_ns, client_request_sent_ns,"
    " client_response_received_ns, client_response_read_ns)"
)


def stream_phases() -> tuple[tuple[str, str, str], ...]:
    """(phase, value in ns, defined) for ``STREAM_PHASES``, in order."""
    phases = [
        (
            name,
            f"arrayReduce('quantileExact(0.5)', {per_message})",
            f"{IS_STREAM} AND notEmpty({per_message})",
        )
        for name, per_message in _PER_MESSAGE
    ]
    phases.append(
        (
            "time_to_first_response",
            f"{src.CLIENT_READ} - client_start_ns",
            f"{IS_STREAM} AND {src.CLIENT_READ} != 0 AND client_start_ns != 0",
        )
    )
    phases.append(
        (
            "stream_duration",
            f"arrayMax({_CLIENT_MESSAGE_TIMES}) - arrayMin({_CLIENT_MESSAGE_TIMES})",
            f"{IS_STREAM} AND notEmpty({_CLIENT_MESSAGE_TIMES})",
        )
    )
    return tuple(phases)

"""Which instrumentation wrote a gRPC span, and where its events say a message moved.

Four sources describe gRPC calls, each with its own vocabulary:

* **grpc-overhead** (ours): the StreamTracer-like events of the design's vocabulary
  (``requestCreated``, ``outboundMessageSent``, ``serverCallStarted``, ...).
* **gRFC A72** (gRPC's own OpenTelemetry tracing: grpc-go >= 1.71, grpc-java >= 1.67,
  C++): a client *call* span ``Sent.<service>.<method>``, one *attempt* span
  ``Attempt.<service>.<method>`` per try (child of the call span), and a server span
  ``Recv.<service>.<method>`` whose parent is the *attempt* span. Events
  "Outbound message" / "Inbound message" (``sequence-number``, ``message-size``,
  ``message-size-compressed``); before grpc-java 1.72 / grpc-go 1.73 "Outbound message
  sent" / "Inbound message received". No ``rpc.*`` attributes, and grpc-java sets no
  span kind: the name's prefix says the role. grpc-go emits the events from
  ``stats.OutPayload`` (after marshal and compression, once the message is queued for
  the transport) and ``stats.InPayload`` (after read, decompression and unmarshal), on
  the attempt span and the server span; grpc-java puts the client's "Inbound message"
  on the call span and records it from ``inboundUncompressedSize``: once the message is
  read and decompressed, *before* it is deserialized (checked in grpc-opentelemetry
  1.85.1's bytecode and by a real run). So grpc-java's inbound events fill the
  "received, not yet deserialized" columns (``client_received_response_ns``,
  ``server_inbound_message_ns``) and grpc-go's the "deserialized" ones; a source of its
  own, ``A72_JAVA``, says which. Other A72 languages (C++) are read as grpc-go.
* **semantic-convention message events** (otelgrpc up to v0.66.0, the OpenTelemetry
  Java agent): one span per side with events named ``message`` and
  ``rpc.message.type`` SENT/RECEIVED, ``rpc.message.id``,
  ``rpc.message.(un)compressed_size``, or the older spellings of the same attributes
  without the ``rpc.`` prefix (``message.type``, ``message.id``,
  ``message.(un)compressed_size``), which the Java agent 2.x still sends (2.10.0 to
  2.33.1: ``message.type`` and ``message.id``, no sizes); every spelling is read.
  otelgrpc fires them from the same stats callbacks as grpc-go's A72 events; the Java
  agent from its interceptors, at the same moments: SENT once ``sendMessage`` has
  serialized the message, RECEIVED when the listener gets it deserialized. (otelgrpc
  from v0.67.0 emits no message events.)
* **spans only**: any gRPC span without such events (e.g.
  opentelemetry-instrumentation-grpc): durations only.

Every expression here is evaluated on one ``otel_traces`` row inside the materialized
view (``calls.extract_select_sql``): ``event_ns`` is the row's event timestamps in Unix
ns (see ``calls._SPAN_ALIASES``).
"""

from __future__ import annotations

OURS = "grpc-overhead"
A72 = "grpc A72"
A72_JAVA = "grpc A72 (Java)"
SEMCONV = "semconv message events"
SPANS_ONLY = "spans only"
#: Every source, in the order the README's table lists them.
SOURCES: tuple[str, ...] = (OURS, A72, A72_JAVA, SEMCONV, SPANS_ONLY)

#: A72's event names, current and older (grpc-java < 1.72, grpc-go < 1.73) generation.
A72_OUTBOUND = ("Outbound message", "Outbound message sent")
A72_INBOUND = ("Inbound message", "Inbound message received")
#: The role an A72 span plays, from its name: '' when it is not an A72 span.
A72_ROLE = (
    "multiIf(NOT match(SpanName, '^(Sent|Attempt|Recv)\\\\.[^.]'), '',"
    " startsWith(SpanName, 'Sent.'), 'call', startsWith(SpanName, 'Attempt.'), 'attempt',"
    " 'server')"
)
#: Whether a span is a gRPC span of any source (the view's WHERE clause).
IS_GRPC_SPAN = (
    "(((SpanAttributes['rpc.system'] = 'grpc' OR SpanAttributes['rpc.system.name'] = 'grpc'"
    " OR SpanAttributes['grpc_overhead.transport'] = 'rest')"  # the REST baseline (issue 14)
    " AND SpanKind IN {kinds}) OR a72_role != '')"
)

_OUR_EVENTS = "['requestCreated', 'serverCallStarted', 'outboundMessageSent', 'inboundMessageRead']"


def semconv(attribute: str) -> str:
    """A ``message`` event's attribute (``type``, ``id``, ``compressed_size``,
    ``uncompressed_size``) under every spelling the semantic conventions have used:
    ``rpc.message.<attribute>``, else the older ``message.<attribute>`` ('' when neither)."""
    current, older = f"a['rpc.message.{attribute}']", f"a['message.{attribute}']"
    return f"if({current} != '', {current}, {older})"


#: Per event: is it a message leaving / arriving? (semconv: ``message`` with a type).
_OUTBOUND = f"(n IN {A72_OUTBOUND!r} OR (n = 'message' AND {semconv('type')} = 'SENT'))"
_INBOUND = f"(n IN {A72_INBOUND!r} OR (n = 'message' AND {semconv('type')} = 'RECEIVED'))"


def first(event: str) -> str:
    """Unix ns of the first event named ``event`` in the span (0 when absent)."""
    return f"event_ns[indexOf(Events.Name, '{event}')]"


def last(event: str) -> str:
    """Unix ns of the last event named ``event`` (indexOf in reverse; 0 when absent)."""
    return f"event_ns[length(Events.Name) + 1 - indexOf(arrayReverse(Events.Name), '{event}')]"


def count(event: str) -> str:
    return f"toUInt32(countEqual(Events.Name, '{event}'))"


def message_bytes(event: str, attribute: str) -> str:
    """Sum of a message-size attribute over the span's ``event`` events."""
    return (
        f"toUInt64(arraySum(arrayMap((n, a) -> if(n = '{event}', "
        f"toUInt64OrZero(a['{attribute}']), 0), Events.Name, Events.Attributes)))"
    )


def _flags(direction: str) -> str:
    return f"arrayMap((n, a) -> toUInt8({direction}), Events.Name, Events.Attributes)"


def _first_flagged(direction: str) -> str:
    return f"event_ns[indexOf({_flags(direction)}, 1)]"


def _last_flagged(direction: str) -> str:
    flags = _flags(direction)
    return f"event_ns[length(Events.Name) + 1 - indexOf(arrayReverse({flags}), 1)]"


def _count_flagged(direction: str) -> str:
    return f"toUInt32(arraySum({_flags(direction)}))"


def _bytes_flagged(direction: str, compressed: bool) -> str:
    """Sum of message sizes over the A72/semconv events of one direction. A72 adds
    ``message-size-compressed`` only when the message was compressed."""
    if compressed:
        a72 = (
            "if(a['message-size-compressed'] != '', a['message-size-compressed'],"
            " a['message-size'])"
        )
        theirs = semconv("compressed_size")
    else:
        a72, theirs = "a['message-size']", semconv("uncompressed_size")
    size = f"toUInt64OrZero(if(n = 'message', {theirs}, {a72}))"
    return (
        f"toUInt64(arraySum(arrayMap((n, a) -> if({direction}, {size}, 0),"
        " Events.Name, Events.Attributes)))"
    )


#: Aliases the view computes once per span (after ``calls._SPAN_ALIASES``).
SOURCE_ALIASES: tuple[str, ...] = (
    f"{A72_ROLE} AS a72_role",
    f"toUInt8(hasAny(Events.Name, {_OUR_EVENTS})) AS has_our_events",
    f"toUInt8(arrayExists((n, a) -> {_OUTBOUND} OR {_INBOUND}, Events.Name, Events.Attributes))"
    " AS has_message_events",
    "a72_role != '' AND ScopeName = 'grpc-java' AS inbound_before_deserialize",
    f"multiIf(has_our_events, '{OURS}', inbound_before_deserialize, '{A72_JAVA}',"
    f" a72_role != '', '{A72}', has_message_events, '{SEMCONV}', '{SPANS_ONLY}')"
    " AS span_source",
    # A72/semconv: the events say where messages moved; our spans use their own names.
    "NOT has_our_events AND has_message_events AS foreign_events",
)


def outbound_first(ours: str) -> str:
    """First message sent: our ``ours`` event, else the first A72/semconv outbound one."""
    return f"if(foreign_events, {_first_flagged(_OUTBOUND)}, {first(ours)})"


def outbound_last(ours: str) -> str:
    return f"if(foreign_events, {_last_flagged(_OUTBOUND)}, {last(ours)})"


def inbound_first(ours: str, *, deserialized: bool) -> str:
    """First message read: our ``ours`` event, else the first A72/semconv inbound one when
    the source takes it at the same moment (``deserialized``: after deserialization)."""
    java = "inbound_before_deserialize" if deserialized else "NOT inbound_before_deserialize"
    return f"if(foreign_events, if({java}, 0, {_first_flagged(_INBOUND)}), {first(ours)})"


def inbound_last(ours: str, *, deserialized: bool) -> str:
    java = "inbound_before_deserialize" if deserialized else "NOT inbound_before_deserialize"
    return f"if(foreign_events, if({java}, 0, {_last_flagged(_INBOUND)}), {last(ours)})"


def messages(ours: str, inbound: bool) -> str:
    direction = _INBOUND if inbound else _OUTBOUND
    return f"if(foreign_events, {_count_flagged(direction)}, {count(ours)})"


def sizes(ours: str, attribute: str, inbound: bool, compressed: bool = False) -> str:
    direction = _INBOUND if inbound else _OUTBOUND
    return (
        f"if(foreign_events, {_bytes_flagged(direction, compressed)},"
        f" {message_bytes(ours, attribute)})"
    )


#: The server call's start: our serverCallStarted, else (A72, semconv) the server span's
#: own start, which both open when gRPC hands them the call (stats ``TagRPC``).
SERVER_CALL_STARTED = f"if(foreign_events, span_start_ns, {first('serverCallStarted')})"
#: An A72 attempt span's start, or a semconv client span's (one span per attempt).
ATTEMPT_START = "if(a72_role = 'attempt' OR (a72_role = '' AND foreign_events), span_start_ns, 0)"
#: The attempt's number (1 = first try): A72's ``previous-rpc-attempts`` + 1.
ATTEMPT_NUMBER = (
    "if(a72_role = 'attempt',"
    " toUInt16(toUInt16OrZero(SpanAttributes['previous-rpc-attempts']) + 1), toUInt16(0))"
)
#: A72 call rows carry their own id, attempt rows their call's: the read folds them.
CALL_SPAN_ID = "multiIf(a72_role = 'call', SpanId, a72_role = 'attempt', ParentSpanId, '')"
#: A72 names a method ``Sent.pkg.Service.Method``: the service is all but the last part.
A72_SERVICE = (
    "arrayStringConcat(arrayPopBack(splitByChar('.',"
    " substring(SpanName, position(SpanName, '.') + 1))), '.')"
)
A72_METHOD = "arrayElement(splitByChar('.', SpanName), -1)"


# -- moments over merged grpc_calls columns (used by phases) ------------------------------

#: Where a client attempt starts: A72/semconv's attempt span, else our requestCreated.
PHASE_ATTEMPT_START = (
    "if(client_attempt_start_ns != 0, client_attempt_start_ns, request_created_ns)"
)
#: The request/response as read by the server/client: deserialized (ours, grpc-go,
#: semconv), else only received (grpc-java's "Inbound message", before deserialization).
SERVER_READ = (
    "if(server_inbound_message_read_ns != 0, server_inbound_message_read_ns,"
    " server_inbound_message_ns)"
)
CLIENT_READ = (
    "if(client_inbound_message_read_ns != 0, client_inbound_message_read_ns,"
    " client_received_response_ns)"
)
#: The client's first sight of the response: ours before deserializing, else (A72,
#: semconv) the inbound event after it.
CLIENT_RECEIVE = (
    "if(client_received_response_ns != 0, client_received_response_ns,"
    " client_inbound_message_read_ns)"
)


# -- per message (streams) ---------------------------------------------------------------

_STREAM_TYPES = "('unary_stream', 'stream_unary', 'stream_stream')"
#: Whether one span describes a stream: ours say so (``grpc_overhead.call_type``), any
#: source that recorded more than one message in a direction is one. Only stream spans
#: fill the per-message arrays: a unary call's one message per direction is already in
#: the first-message columns (``phases.message_times`` reads it from there).
STREAM_SPAN = (
    f"(SpanAttributes['grpc_overhead.call_type'] IN {_STREAM_TYPES}"
    f" OR {messages('outboundMessageSent', inbound=False)} > 1"
    f" OR {messages('inboundMessageRead', inbound=True)} > 1)"
)
#: Each event's message id: ours and semconv ``rpc.message.id`` / ``message.id``
#: (1-based), A72 ``sequence-number`` (0-based): either orders a direction's messages.
MESSAGE_IDS = (
    f"arrayMap(a -> toUInt64OrZero({semconv('id')}) + toUInt64OrZero(a['sequence-number']),"
    " Events.Attributes)"
)
_NO_TIMES = "CAST([], 'Array(Int64)')"


def _sorted_times(condition: str) -> str:
    """Unix ns of the span's events matching ``condition`` (over ``n`` name, ``a``
    attributes), ordered by message id, then time: index k is the k-th message."""
    matching = f"arrayMap((n, a) -> toUInt8({condition}), Events.Name, Events.Attributes)"
    return (
        f"arraySort((t, i) -> (i, t), arrayFilter((t, m) -> m = 1, event_ns, {matching}),"
        f" arrayFilter((i, m) -> m = 1, message_ids, {matching}))"
    )


def message_times(ours: str, foreign: str = "") -> str:
    """Per message, the time of our ``ours`` event (A72/semconv: the ``foreign`` direction,
    ``outbound``/``inbound_read``/``inbound_received``), for stream spans only."""
    flags = {
        "outbound": _OUTBOUND,
        "inbound_read": f"{_INBOUND} AND NOT inbound_before_deserialize",
        "inbound_received": f"{_INBOUND} AND inbound_before_deserialize",
    }
    theirs = _sorted_times(flags[foreign]) if foreign else _NO_TIMES
    own = _sorted_times(f"n = '{ours}'")
    return f"if(stream_span, if(foreign_events, {theirs}, {own}), {_NO_TIMES})"


#: A call's pair of sources, as the per-call rows carry it: what traced each half (one of
#: ``SOURCES``), in which language and under which instrumentation scope.
SOURCE_KEYS = (
    "client_source",
    "server_source",
    "client_language",
    "server_language",
    "client_scope",
    "server_scope",
)

"""The columns of ``grpc_calls``: each one an expression over one ``otel_traces`` span.

``calls`` builds the table, its view and its reads from ``COLUMNS`` (and re-exports
every name here). Which event of which instrumentation fills a column is decided by
``span_sources``.
"""

from __future__ import annotations

from dataclasses import dataclass

from grpc_overhead.analyzer import sample_columns
from grpc_overhead.analyzer import span_sources as src

CLIENT_KINDS = ("Client", "SPAN_KIND_CLIENT")
SERVER_KINDS = ("Server", "SPAN_KIND_SERVER")
ERROR_STATUSES = ("Error", "STATUS_CODE_ERROR")


@dataclass(frozen=True)
class Column:
    """One ``grpc_calls`` column: its type, its absent value, and how each half fills it.

    ``client``/``server`` are SQL expressions over one ``otel_traces`` row
    (and the aliases of ``SPAN_ALIASES``); an empty one means "this half
    never fills the column" and yields ``absent``.
    """

    name: str
    type: str
    client: str = ""
    server: str = ""
    absent: str = "0"

    def expression(self) -> str:
        client = self.client or self.absent
        server = self.server or self.absent
        if client == server:
            return client
        if not self.server:
            return f"if(is_client, {client}, {self.absent})"
        if not self.client:
            return f"if(is_client, {self.absent}, {server})"
        return f"if(is_client, {client}, {server})"


def _attribute(*names: str) -> str:
    """The first of these span attributes that is set (current name, then older ones)."""
    expression = f"SpanAttributes['{names[-1]}']"
    for name in reversed(names[:-1]):
        expression = f"if(SpanAttributes['{name}'] != '', SpanAttributes['{name}'], {expression})"
    return expression


def _address(host: str, port: str) -> str:
    return f"if({port} = '', {host}, concat({host}, ':', {port}))"


_ARRIVED = "toUnixTimestamp64Nano(now64(9))"
_UNCOMPRESSED = "rpc.message.uncompressed_size"
_COMPRESSED = "rpc.message.compressed_size"
_CODE_NAMES = (
    "['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',"
    " 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION',"
    " 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS',"
    " 'UNAUTHENTICATED']"
)
# A72 records no code attribute, only the span status and its message: grpc-java writes
# "CODE: description" (or "CODE"), grpc-go only the description, which names the code
# for the context's own errors (status.FromContextError) and its transport's connection
# errors ("connection error: desc = ...", UNAVAILABLE). Attempts keep -1: a refused try
# of a call that then succeeded is not the call's outcome (the call span is).
_A72_FAILED = f"a72_role IN ('call', 'server') AND StatusCode IN {ERROR_STATUSES!r}"
_A72_CODE = f"indexOf({_CODE_NAMES}, extract(StatusMessage, '^([A-Z_]+)(?::|$)'))"
# The numeric code (older semconv, ours); the code's name (semconv 1.3x+:
# rpc.response.status_code, otelgrpc); A72's from its status (above); else -1.
_STATUS = (
    "multiIf(SpanAttributes['rpc.grpc.status_code'] != '',"
    " toInt16OrDefault(SpanAttributes['rpc.grpc.status_code'], toInt16(-1)),"
    f" SpanAttributes['rpc.response.status_code'] != '',"
    f" toInt16(indexOf({_CODE_NAMES}, SpanAttributes['rpc.response.status_code']) - 1),"
    " a72_role != '' AND StatusCode IN ('Ok', 'STATUS_CODE_OK'), toInt16(0),"
    f" {_A72_FAILED} AND {_A72_CODE} > 0, toInt16({_A72_CODE} - 1),"
    f" {_A72_FAILED} AND startsWith(StatusMessage, 'context deadline exceeded'), toInt16(4),"
    f" {_A72_FAILED} AND startsWith(StatusMessage, 'context canceled'), toInt16(1),"
    # grpc-go's transport failures (connection refused, reset): always UNAVAILABLE.
    f" {_A72_FAILED} AND startsWith(StatusMessage, 'connection error: '), toInt16(14),"
    " toInt16(-1))"
)
# An A72 attempt that failed before a retry succeeded is not the call's error: the
# call span says how the call ended.
_ERROR = f"toUInt8(StatusCode IN {ERROR_STATUSES!r} AND a72_role != 'attempt')"
_LANGUAGE = "ResourceAttributes['telemetry.sdk.language']"
#: What A72 and semconv message events say of a compressed call: only that a message was
#: (A72 adds message-size-compressed only then; semconv sizes differ), not the algorithm.
COMPRESSED_UNNAMED = "compressed"
_COMPRESSION = (
    "if(SpanAttributes['grpc.compression'] != '', SpanAttributes['grpc.compression'],"
    " if(foreign_events AND arrayExists((n, a) -> a['message-size-compressed'] != ''"
    f" OR (n = 'message' AND {src.semconv('compressed_size')} != ''"
    f" AND {src.semconv('compressed_size')} != {src.semconv('uncompressed_size')}),"
    f" Events.Name, Events.Attributes), '{COMPRESSED_UNNAMED}', ''))"
)
#: A call that failed without either side naming the code (an A72 span's status is only
#: OK or an error, and grpc-go's message does not name the code): counted as an error.
FAILED_NO_CODE = -2
#: A merged call's status code: the client's; where the client failed without a code,
#: the server's if it names a failure, else FAILED_NO_CODE (never the server's OK: the
#: client saw the call fail, e.g. its deadline passed while the server answered); where
#: the client half is missing or recorded nothing, the server's, likewise; -1 if neither.
CALL_STATUS = (
    "multiIf(client_status_code >= 0, client_status_code,"
    " client_error = 1 AND server_status_code > 0, server_status_code,"
    f" client_error = 1, toInt16({FAILED_NO_CODE}),"
    " server_status_code >= 0, server_status_code,"
    f" server_error = 1, toInt16({FAILED_NO_CODE}), toInt16(-1))"
)


# Expressions shared by several columns, evaluated once per span.
SPAN_ALIASES = (
    src.A72_ROLE + " AS a72_role",
    f"if(a72_role != '', a72_role != 'server', SpanKind IN {CLIENT_KINDS!r}) AS is_client",
    "arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp) AS event_ns",
    "toUnixTimestamp64Nano(Timestamp) AS span_start_ns",
    # Duration is UInt64 and wraps when a skewed span ends before it starts;
    # reinterpreting it as Int64 gives back the negative duration.
    "span_start_ns + reinterpretAsInt64(Duration) AS span_end_ns",
    "SpanAttributes['rpc.service'] AS rpc_service",
    "SpanAttributes['rpc.method'] AS rpc_method",
    *src.SOURCE_ALIASES[1:],
    f"{src.STREAM_SPAN} AS stream_span",
    f"{src.MESSAGE_IDS} AS message_ids",
)

_SERVICE = (
    f"if(a72_role != '', {src.A72_SERVICE}, "
    "if(rpc_service != '', rpc_service, "
    "if(position(rpc_method, '/') > 0, splitByChar('/', rpc_method)[1], "
    "if(position(SpanName, '/') > 0, splitByChar('/', SpanName)[1], ''))))"
)
_METHOD = (
    f"if(a72_role != '', {src.A72_METHOD}, "
    "if(rpc_method != '', splitByChar('/', rpc_method)[-1], "
    "if(position(SpanName, '/') > 0, splitByChar('/', SpanName)[2], SpanName)))"
)
_HOST = "ResourceAttributes['host.name']"
_BUDGET = "toInt64OrDefault(SpanAttributes['grpc_overhead.deadline_budget_ns'], toInt64(-1))"
_INSTANCE = "ResourceAttributes['service.instance.id']"


def _int_attribute(name: str) -> str:
    """An integer span attribute, -1 where the span does not carry it."""
    return f"toInt64OrDefault(SpanAttributes['{name}'], toInt64(-1))"


#: The type of a string column with few distinct values (methods, hosts, instances).
LOW_CARDINALITY = "LowCardinality(String)"
_WEIGHT_VALUE = "toFloat64OrZero(SpanAttributes['grpc_overhead.sampling.weight'])"
#: The largest weight taken (a base rate of one call in a billion): a span claiming more,
#: or less than 1, NaN or infinity, is hostile or broken and stands for itself, so that
#: one bad span cannot make every count and quantile meaningless.
MAX_WEIGHT = 1e9
_WEIGHT = f"if({_WEIGHT_VALUE} >= 1 AND {_WEIGHT_VALUE} <= {MAX_WEIGHT:.0f}, {_WEIGHT_VALUE}, 1.0)"
_REASON = "SpanAttributes['grpc_overhead.sampling.reason']"
_SERVER_INSTANCE_SAID = "SpanAttributes['grpc_overhead.sampling.server_instance']"

_TIMES = "Array(Int64)"
_EMPTY = "CAST([], 'Array(Int64)')"


#: A stream's message times, one array per event and side (a ``max`` of arrays keeps the
#: filled half's: any array is greater than the empty one the other half writes).
def _message_column(name: str, side: str, *events: str) -> Column:
    """``name``: one half's ``src.message_times(*events)`` array, empty for the other."""
    return Column(name, _TIMES, absent=_EMPTY, **{side: src.message_times(*events)})


MESSAGE_COLUMNS: tuple[Column, ...] = (
    _message_column("client_request_serialize_ns", "client", "outboundMessage"),
    _message_column("client_request_sent_ns", "client", "outboundMessageSent", "outbound"),
    _message_column(
        "client_response_received_ns", "client", "clientReceivedResponse", "inbound_received"
    ),
    _message_column("client_response_read_ns", "client", "inboundMessageRead", "inbound_read"),
    _message_column("server_request_received_ns", "server", "inboundMessage", "inbound_received"),
    _message_column("server_request_read_ns", "server", "inboundMessageRead", "inbound_read"),
    _message_column("server_response_serialize_ns", "server", "outboundMessage"),
    _message_column("server_response_sent_ns", "server", "outboundMessageSent", "outbound"),
)

#: Every column after the key, in table order. Both halves fill the columns
#: that describe the call (same value, so ``max`` keeps it).
COLUMNS: tuple[Column, ...] = (
    Column("ServerSpanId", "String", server="SpanId", absent="''"),
    Column("service", LOW_CARDINALITY, _SERVICE, _SERVICE, "''"),
    Column("method", LOW_CARDINALITY, _METHOD, _METHOD, "''"),
    Column(
        "call_type",
        LOW_CARDINALITY,
        "SpanAttributes['grpc_overhead.call_type']",
        "SpanAttributes['grpc_overhead.call_type']",
        "''",
    ),
    Column(
        "run_id",
        LOW_CARDINALITY,
        "SpanAttributes['grpc_overhead.run_id']",
        "SpanAttributes['grpc_overhead.run_id']",
        "''",
    ),
    Column("client_service", LOW_CARDINALITY, client="ServiceName", absent="''"),
    Column("client_host", LOW_CARDINALITY, client=_HOST, absent="''"),
    Column("client_instance", LOW_CARDINALITY, client=_INSTANCE, absent="''"),
    Column("server_service", LOW_CARDINALITY, server="ServiceName", absent="''"),
    Column("server_host", LOW_CARDINALITY, server=_HOST, absent="''"),
    # A client half kept alone under tail-aware sampling names the server instance that
    # dropped its half (its trailer): counted on that instance, not on a dialled address.
    Column(
        "server_instance",
        LOW_CARDINALITY,
        client=_SERVER_INSTANCE_SAID,
        server=_INSTANCE,
        absent="''",
    ),
    # What the client dialled, and where the server saw the call come from.
    Column(
        "server_address",
        "String",
        client=_address(
            _attribute("server.address", "net.peer.name"),
            _attribute("server.port", "net.peer.port"),
        ),
        absent="''",
    ),
    Column(
        "client_address",
        "String",
        server=_address(
            _attribute("network.peer.address", "net.peer.ip"),
            _attribute("network.peer.port", "net.peer.port"),
        ),
        absent="''",
    ),
    Column("compression", LOW_CARDINALITY, _COMPRESSION, _COMPRESSION, "''"),
    Column(
        "payload_codec",
        LOW_CARDINALITY,
        "SpanAttributes['grpc_overhead.payload.codec']",
        "SpanAttributes['grpc_overhead.payload.codec']",
        "''",
    ),
    # gRPC status codes: -1 = this half did not report one (0 is OK).
    Column("client_status_code", "Int16", client=_STATUS, absent="toInt16(-1)"),
    Column("server_status_code", "Int16", server=_STATUS, absent="toInt16(-1)"),
    Column("client_error", "UInt8", client=_ERROR),
    Column("server_error", "UInt8", server=_ERROR),
    # An A72 attempt is not the call: its span times are client_attempt_start_ns.
    Column("client_start_ns", "Int64", client="if(a72_role = 'attempt', 0, span_start_ns)"),
    Column("client_end_ns", "Int64", client="if(a72_role = 'attempt', 0, span_end_ns)"),
    Column("server_start_ns", "Int64", server="span_start_ns"),
    Column("server_end_ns", "Int64", server="span_end_ns"),
    # When each half landed in the store (the engine's clock at the insert, Unix ns; 0 =
    # not from this half, or stored before these columns): ``options.SHOWN_FILTER``
    # holds a call back until its peer half arrives or a grace period says it will not.
    Column("client_arrived_ns", "Int64", client=_ARRIVED),
    Column("server_arrived_ns", "Int64", server=_ARRIVED),
    Column("client_events", "UInt8", client="has_our_events"),
    Column("server_events", "UInt8", server="has_our_events"),
    # Client events (first message unless named *_last_ns).
    # (A72 and semconv events fill the columns of the same moment: span_sources.)
    Column("request_created_ns", "Int64", client=src.first("requestCreated")),
    Column("client_outbound_message_ns", "Int64", client=src.first("outboundMessage")),
    Column(
        "client_outbound_message_sent_ns",
        "Int64",
        client=src.outbound_first("outboundMessageSent"),
    ),
    Column(
        "client_outbound_message_sent_last_ns",
        "Int64",
        client=src.outbound_last("outboundMessageSent"),
    ),
    Column(
        "client_received_response_ns",
        "Int64",
        client=src.inbound_first("clientReceivedResponse", deserialized=False),
    ),
    Column(
        "client_received_response_last_ns",
        "Int64",
        client=src.inbound_last("clientReceivedResponse", deserialized=False),
    ),
    Column(
        "client_inbound_message_read_ns",
        "Int64",
        client=src.inbound_first("inboundMessageRead", deserialized=True),
    ),
    Column(
        "client_inbound_message_read_last_ns",
        "Int64",
        client=src.inbound_last("inboundMessageRead", deserialized=True),
    ),
    # Server events.
    Column("server_call_started_ns", "Int64", server=src.SERVER_CALL_STARTED),
    Column("call_scheduled_ns", "Int64", server=src.first("callScheduled")),
    Column(
        "server_inbound_message_ns",
        "Int64",
        server=src.inbound_first("inboundMessage", deserialized=False),
    ),
    Column(
        "server_inbound_message_read_ns",
        "Int64",
        server=src.inbound_first("inboundMessageRead", deserialized=True),
    ),
    Column(
        "server_inbound_message_read_last_ns",
        "Int64",
        server=src.inbound_last("inboundMessageRead", deserialized=True),
    ),
    Column("predictions_made_ns", "Int64", server=src.first("predictionsMade")),
    # The interceptor chain around the servicer's own method (server_interceptors) and the
    # method's return after mark_predictions_made() (post_processing).
    Column("service_intercepted_ns", "Int64", server=src.first("serviceIntercepted")),
    Column("interceptors_entered_ns", "Int64", server=src.first("interceptorsEntered")),
    Column("handler_started_ns", "Int64", server=src.first("handlerStarted")),
    Column("handler_returned_ns", "Int64", server=src.first("handlerReturned")),
    Column("interceptors_returned_ns", "Int64", server=src.first("interceptorsReturned")),
    Column("server_outbound_message_ns", "Int64", server=src.first("outboundMessage")),
    Column(
        "server_outbound_message_sent_ns",
        "Int64",
        server=src.outbound_first("outboundMessageSent"),
    ),
    Column(
        "server_outbound_message_sent_last_ns",
        "Int64",
        server=src.outbound_last("outboundMessageSent"),
    ),
    # Messages and bytes per direction. Both halves see each direction (sent on
    # one side, read on the other) and agree; compressed sizes are recorded by
    # the sender only, and with gzip/deflate only for every Nth message.
    Column(
        "request_messages",
        "UInt32",
        src.messages("outboundMessageSent", inbound=False),
        src.messages("inboundMessageRead", inbound=True),
    ),
    Column(
        "request_uncompressed_bytes",
        "UInt64",
        src.sizes("outboundMessageSent", _UNCOMPRESSED, inbound=False),
        src.sizes("inboundMessageRead", _UNCOMPRESSED, inbound=True),
    ),
    Column(
        "request_compressed_bytes",
        "UInt64",
        client=src.sizes("outboundMessageSent", _COMPRESSED, inbound=False, compressed=True),
    ),
    Column(
        "response_messages",
        "UInt32",
        src.messages("clientReceivedResponse", inbound=True),
        src.messages("outboundMessageSent", inbound=False),
    ),
    Column(
        "response_uncompressed_bytes",
        "UInt64",
        src.sizes("clientReceivedResponse", _UNCOMPRESSED, inbound=True),
        src.sizes("outboundMessageSent", _UNCOMPRESSED, inbound=False),
    ),
    Column(
        "response_compressed_bytes",
        "UInt64",
        server=src.sizes("outboundMessageSent", _COMPRESSED, inbound=False, compressed=True),
    ),
    # The server's own residence (outboundMessageSent - serverCallStarted), as
    # the server span says and as the client read it from the trailer; -1 = none.
    # Time left before the deadline when the request left the client / when the
    # server saw the call (ns; -1 = no deadline): the server_dispatch phase.
    Column("client_deadline_budget_ns", "Int64", client=_BUDGET, absent="toInt64(-1)"),
    Column("server_deadline_budget_ns", "Int64", server=_BUDGET, absent="toInt64(-1)"),
    # The client's own waits (ns; -1 = not measured: other instrumentations, older
    # data): for a ready channel after the request was handed to gRPC (client_connect),
    # and its process's wake-up lag when the response arrived (client_dispatch).
    Column(
        "client_connect_ns",
        "Int64",
        client=_int_attribute("grpc_overhead.client_connect_ns"),
        absent="toInt64(-1)",
    ),
    Column(
        "client_dispatch_ns",
        "Int64",
        client=_int_attribute("grpc_overhead.client_dispatch_ns"),
        absent="toInt64(-1)",
    ),
    Column(
        "server_residence_ns",
        "Int64",
        "toInt64OrDefault(SpanAttributes['grpc_overhead.server_residence_ns'], toInt64(-1))",
        "toInt64OrDefault(SpanAttributes['grpc_overhead.server_residence_ns'], toInt64(-1))",
        "toInt64(-1)",
    ),
    # Sampling (the instrumentation's tail_sampling.py): how many calls the half stands
    # for (1 without the attribute: every other source, or a value that is no weight)
    # and why it was kept ('' = not said). The call's weight is the smaller of its
    # halves' (``result_columns.CALL_WEIGHT``).
    Column("client_sampling_weight", "Float64", client=_WEIGHT),
    Column("server_sampling_weight", "Float64", server=_WEIGHT),
    Column("client_sampling_reason", LOW_CARDINALITY, client=_REASON, absent="''"),
    Column("server_sampling_reason", LOW_CARDINALITY, server=_REASON, absent="''"),
    # Who wrote each half (span_sources): source, SDK language, instrumentation scope.
    Column("client_source", LOW_CARDINALITY, client="span_source", absent="''"),
    Column("server_source", LOW_CARDINALITY, server="span_source", absent="''"),
    Column("client_language", LOW_CARDINALITY, client=_LANGUAGE, absent="''"),
    Column("server_language", LOW_CARDINALITY, server=_LANGUAGE, absent="''"),
    Column("client_scope", LOW_CARDINALITY, client="ScopeName", absent="''"),
    Column("server_scope", LOW_CARDINALITY, server="ScopeName", absent="''"),
    # A72: the call span a row belongs to (attempts.py folds them into one call), the
    # attempt's start and number (1 = first try), and whether it ended OK.
    Column("CallSpanId", "String", client=src.CALL_SPAN_ID, absent="''"),
    Column("AttemptSpanId", "String", client="if(a72_role = 'attempt', SpanId, '')", absent="''"),
    Column("client_attempt_start_ns", "Int64", client=src.ATTEMPT_START),
    Column("client_attempts", "UInt16", client=src.ATTEMPT_NUMBER),
    Column(
        "client_attempt_ok",
        "UInt8",
        client=f"toUInt8(a72_role = 'attempt' AND StatusCode NOT IN {ERROR_STATUSES!r})",
    ),
    # Streams, per message (index k = message k, by message id; empty for unary calls,
    # whose one message per direction is in the first-message columns above).
    *MESSAGE_COLUMNS,
    # A sampled message's measured compressibility (-1 = no sample: sample_columns).
    *(
        Column(name, kind, absent=absent, **{side: expression})
        for name, kind, side, expression, absent in sample_columns.specs()
    ),
)

KEY = ("TraceId", "ClientSpanId")
COLUMN_NAMES: tuple[str, ...] = (*KEY, *(column.name for column in COLUMNS))

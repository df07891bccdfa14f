"""One row per RPC, assembled inside ClickHouse: ``grpc_calls`` and the view that fills it.

The client span and the server span of a call arrive separately (different
processes, different export batches, any order). A materialized view on
``otel_traces`` turns each gRPC span into a *half row* of ``grpc_calls``:
the client span fills the client columns and leaves the server columns at
their "absent" value, the server span the other way round. Both halves carry
the same key, ``(TraceId, ClientSpanId)``: a client span is keyed by its own
``SpanId``, a server span by its ``ParentSpanId`` (the client span that
called it, propagated through ``traceparent``).

``grpc_calls`` is an ``AggregatingMergeTree`` whose columns are all
``SimpleAggregateFunction(max, T)`` with an absent value that loses every
``max`` (0, '' or -1): when ClickHouse merges parts, the two halves collapse
into one complete row, with no JOIN, in real time, on chDB and on a cluster
alike. ``max`` is also idempotent, so inserting the same span twice (a
collector retry, a backfill run while the view is live) changes nothing.

Until a background merge has run, the halves may sit in different parts, so
every read merges again (``calls_source``: ``FINAL``, ``READ_STRATEGIES``).

There is deliberately no ``PARTITION BY``: a partition key is computed per
row, and the server half's timestamps differ from the client half's, so a
time partition could put the halves of a call around midnight into different
partitions, which never merge. On a sharded cluster the same rule holds for
shards: ``otel_traces`` must be distributed by ``TraceId`` so both spans of a
call reach one shard.

Times are ``Int64`` Unix nanoseconds (0 = not from this half): phases are
differences computed in ``Int64``, never ``UInt64``, so a skewed clock gives a
negative phase, not a wrapped 18-quintillion one. Event columns hold the
*first* occurrence of an event; streams also keep the *last* one where the
clock-offset estimate needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grpc_overhead.analyzer.folding import CLIENT_KEY, FOLDED_INTO, SKIP_FOLDED
from grpc_overhead.analyzer.options import CALL_FILTER as CALL_FILTER
from grpc_overhead.analyzer.options import CALL_START as CALL_START
from grpc_overhead.analyzer.options import CALLS_TABLE as CALLS_TABLE
from grpc_overhead.analyzer.options import CALLS_VIEW as CALLS_VIEW
from grpc_overhead.analyzer.options import HALF_MARGIN_NS as HALF_MARGIN_NS
from grpc_overhead.analyzer.options import INT64_MAX as INT64_MAX
from grpc_overhead.analyzer.options import READ_STRATEGIES as READ_STRATEGIES
from grpc_overhead.analyzer.options import ROLLUP_FILTER as ROLLUP_FILTER
from grpc_overhead.analyzer.options import ROW_FILTER as ROW_FILTER
from grpc_overhead.analyzer.options import ROW_START_INDEX as ROW_START_INDEX
from grpc_overhead.analyzer.options import TIME_FILTER as TIME_FILTER
from grpc_overhead.analyzer.options import CallFilters as CallFilters
from grpc_overhead.analyzer.options import CallsOptions as CallsOptions
from grpc_overhead.analyzer.options import time_parameters as time_parameters
from grpc_overhead.analyzer.options import unix_ns as unix_ns
from grpc_overhead.analyzer.store.base import Store, quote_identifier, table_exists

CLIENT_KINDS = ("Client", "SPAN_KIND_CLIENT")
SERVER_KINDS = ("Server", "SPAN_KIND_SERVER")
ERROR_STATUSES = ("Error", "STATUS_CODE_ERROR")


@dataclass(frozen=True)
class Column:
    """One ``grpc_calls`` column: its type, its absent value, and how each half fills it.

    ``client``/``server`` are SQL expressions over one ``otel_traces`` row
    (and the aliases of ``_SPAN_ALIASES``); an empty one means "this half
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


def _first(event: str) -> str:
    """Unix ns of the first event named ``event`` in the span (0 when absent)."""
    return f"event_ns[indexOf(Events.Name, '{event}')]"


def _last(event: str) -> str:
    """Unix ns of the last event named ``event`` (indexOf in reverse; 0 when absent)."""
    return f"event_ns[length(Events.Name) + 1 - indexOf(arrayReverse(Events.Name), '{event}')]"


def _count(event: str) -> str:
    return f"toUInt32(countEqual(Events.Name, '{event}'))"


def _bytes(event: str, attribute: str) -> str:
    """Sum of a message-size attribute over the span's ``event`` events."""
    return (
        f"toUInt64(arraySum(arrayMap((n, a) -> if(n = '{event}', "
        f"toUInt64OrZero(a['{attribute}']), 0), Events.Name, Events.Attributes)))"
    )


def _attribute(*names: str) -> str:
    """The first of these span attributes that is set (current name, then older ones)."""
    expression = f"SpanAttributes['{names[-1]}']"
    for name in reversed(names[:-1]):
        expression = f"if(SpanAttributes['{name}'] != '', SpanAttributes['{name}'], {expression})"
    return expression


def _address(host: str, port: str) -> str:
    return f"if({port} = '', {host}, concat({host}, ':', {port}))"


_UNCOMPRESSED = "rpc.message.uncompressed_size"
_COMPRESSED = "rpc.message.compressed_size"
_STATUS = "toInt16OrDefault(SpanAttributes['rpc.grpc.status_code'], toInt16(-1))"
_ERROR = f"toUInt8(StatusCode IN {ERROR_STATUSES!r})"
_HAS_EVENTS = (
    "toUInt8(hasAny(Events.Name, ['requestCreated', 'serverCallStarted', "
    "'outboundMessageSent', 'inboundMessageRead']))"
)

# Expressions shared by several columns, evaluated once per span.
_SPAN_ALIASES = (
    f"SpanKind IN {CLIENT_KINDS!r} AS is_client",
    "arrayMap(t -> toUnixTimestamp64Nano(t), Events.Timestamp) AS event_ns",
    "toUnixTimestamp64Nano(Timestamp) AS span_start_ns",
    # Duration is UInt64 and wraps when a skewed span ends before it starts;
    # reinterpreting it as Int64 gives back the negative duration.
    "span_start_ns + reinterpretAsInt64(Duration) AS span_end_ns",
    "SpanAttributes['rpc.service'] AS rpc_service",
    "SpanAttributes['rpc.method'] AS rpc_method",
)

_SERVICE = (
    "if(rpc_service != '', rpc_service, "
    "if(position(SpanName, '/') > 0, splitByChar('/', SpanName)[1], ''))"
)
_METHOD = (
    "if(rpc_method != '', rpc_method, "
    "if(position(SpanName, '/') > 0, splitByChar('/', SpanName)[2], SpanName))"
)
_HOST = "ResourceAttributes['host.name']"
_BUDGET = "toInt64OrDefault(SpanAttributes['grpc_overhead.deadline_budget_ns'], toInt64(-1))"
_INSTANCE = "ResourceAttributes['service.instance.id']"

LC = "LowCardinality(String)"

#: Every column after the key, in table order. Both halves fill the columns
#: that describe the call (same value, so ``max`` keeps it).
COLUMNS: tuple[Column, ...] = (
    Column("ServerSpanId", "String", server="SpanId", absent="''"),
    Column("service", LC, _SERVICE, _SERVICE, "''"),
    Column("method", LC, _METHOD, _METHOD, "''"),
    Column(
        "call_type",
        LC,
        "SpanAttributes['grpc_overhead.call_type']",
        "SpanAttributes['grpc_overhead.call_type']",
        "''",
    ),
    Column(
        "run_id",
        LC,
        "SpanAttributes['grpc_overhead.run_id']",
        "SpanAttributes['grpc_overhead.run_id']",
        "''",
    ),
    Column("client_service", LC, client="ServiceName", absent="''"),
    Column("client_host", LC, client=_HOST, absent="''"),
    Column("client_instance", LC, client=_INSTANCE, absent="''"),
    Column("server_service", LC, server="ServiceName", absent="''"),
    Column("server_host", LC, server=_HOST, absent="''"),
    Column("server_instance", LC, server=_INSTANCE, absent="''"),
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
    Column(
        "compression",
        LC,
        "SpanAttributes['grpc.compression']",
        "SpanAttributes['grpc.compression']",
        "''",
    ),
    Column(
        "payload_codec",
        LC,
        "SpanAttributes['grpc_overhead.payload.codec']",
        "SpanAttributes['grpc_overhead.payload.codec']",
        "''",
    ),
    # gRPC status codes: -1 = this half did not report one (0 is OK).
    Column("client_status_code", "Int16", client=_STATUS, absent="toInt16(-1)"),
    Column("server_status_code", "Int16", server=_STATUS, absent="toInt16(-1)"),
    Column("client_error", "UInt8", client=_ERROR),
    Column("server_error", "UInt8", server=_ERROR),
    Column("client_start_ns", "Int64", client="span_start_ns"),
    Column("client_end_ns", "Int64", client="span_end_ns"),
    Column("server_start_ns", "Int64", server="span_start_ns"),
    Column("server_end_ns", "Int64", server="span_end_ns"),
    Column("client_events", "UInt8", client=_HAS_EVENTS),
    Column("server_events", "UInt8", server=_HAS_EVENTS),
    # Client events (first message unless named *_last_ns).
    Column("request_created_ns", "Int64", client=_first("requestCreated")),
    Column("client_outbound_message_ns", "Int64", client=_first("outboundMessage")),
    Column("client_outbound_message_sent_ns", "Int64", client=_first("outboundMessageSent")),
    Column("client_outbound_message_sent_last_ns", "Int64", client=_last("outboundMessageSent")),
    Column("client_received_response_ns", "Int64", client=_first("clientReceivedResponse")),
    Column("client_received_response_last_ns", "Int64", client=_last("clientReceivedResponse")),
    Column("client_inbound_message_read_ns", "Int64", client=_first("inboundMessageRead")),
    Column("client_inbound_message_read_last_ns", "Int64", client=_last("inboundMessageRead")),
    # Server events.
    Column("server_call_started_ns", "Int64", server=_first("serverCallStarted")),
    Column("call_scheduled_ns", "Int64", server=_first("callScheduled")),
    Column("server_inbound_message_ns", "Int64", server=_first("inboundMessage")),
    Column("server_inbound_message_read_ns", "Int64", server=_first("inboundMessageRead")),
    Column("server_inbound_message_read_last_ns", "Int64", server=_last("inboundMessageRead")),
    Column("predictions_made_ns", "Int64", server=_first("predictionsMade")),
    Column("server_outbound_message_ns", "Int64", server=_first("outboundMessage")),
    Column("server_outbound_message_sent_ns", "Int64", server=_first("outboundMessageSent")),
    Column("server_outbound_message_sent_last_ns", "Int64", server=_last("outboundMessageSent")),
    # Messages and bytes per direction. Both halves see each direction (sent on
    # one side, read on the other) and agree; compressed sizes are recorded by
    # the sender only, and with gzip/deflate only for every Nth message.
    Column(
        "request_messages", "UInt32", _count("outboundMessageSent"), _count("inboundMessageRead")
    ),
    Column(
        "request_uncompressed_bytes",
        "UInt64",
        _bytes("outboundMessageSent", _UNCOMPRESSED),
        _bytes("inboundMessageRead", _UNCOMPRESSED),
    ),
    Column("request_compressed_bytes", "UInt64", client=_bytes("outboundMessageSent", _COMPRESSED)),
    Column(
        "response_messages",
        "UInt32",
        _count("clientReceivedResponse"),
        _count("outboundMessageSent"),
    ),
    Column(
        "response_uncompressed_bytes",
        "UInt64",
        _bytes("clientReceivedResponse", _UNCOMPRESSED),
        _bytes("outboundMessageSent", _UNCOMPRESSED),
    ),
    Column(
        "response_compressed_bytes", "UInt64", server=_bytes("outboundMessageSent", _COMPRESSED)
    ),
    # The server's own residence (outboundMessageSent - serverCallStarted), as
    # the server span says and as the client read it from the trailer; -1 = none.
    # Time left before the deadline when the request left the client / when the
    # server saw the call (ns; -1 = no deadline): the server_dispatch phase.
    Column("client_deadline_budget_ns", "Int64", client=_BUDGET, absent="toInt64(-1)"),
    Column("server_deadline_budget_ns", "Int64", server=_BUDGET, absent="toInt64(-1)"),
    Column(
        "server_residence_ns",
        "Int64",
        "toInt64OrDefault(SpanAttributes['grpc_overhead.server_residence_ns'], toInt64(-1))",
        "toInt64OrDefault(SpanAttributes['grpc_overhead.server_residence_ns'], toInt64(-1))",
        "toInt64(-1)",
    ),
)

KEY = ("TraceId", "ClientSpanId")
COLUMN_NAMES: tuple[str, ...] = (*KEY, *(column.name for column in COLUMNS))


#: Timestamps and counts: rows are ordered by trace id, so a column's values
#: are in random order and LZ4 alone barely compresses them (about 17 %);
#: T64 first drops the bits a block's values share, which makes the column
#: smaller and about twice as fast to read (bench/results/analysis.md).
T64_CODEC = "T64, LZ4"
_T64_TYPES = ("Int64", "UInt64", "UInt32", "Int16")


def create_calls_table_sql(options: CallsOptions) -> str:
    lines = [
        "    TraceId String CODEC(ZSTD(1))",
        "    ClientSpanId String CODEC(ZSTD(1))",
    ]
    lines += [
        f"    {column.name} SimpleAggregateFunction(max, {column.type})"
        + (f" DEFAULT {column.absent}" if column.absent != "0" else "")
        + (f" CODEC({T64_CODEC})" if column.type in _T64_TYPES else "")
        for column in COLUMNS
    ]
    lines.append(f"    {ROW_START_INDEX}")
    return (
        f"CREATE TABLE IF NOT EXISTS {options.calls}{options.on_cluster()} (\n"
        + ",\n".join(lines)
        + f"\n) ENGINE = {options.engine_clause()}\nORDER BY (TraceId, ClientSpanId)"
    )


def extract_select_sql(options: CallsOptions) -> str:
    """One gRPC span of ``otel_traces`` -> one half row of ``grpc_calls``.

    The single SELECT both the materialized view and ``backfill`` use. Spans
    are read without ARRAY JOIN: event timestamps are looked up by position
    in ``Events.Name``.
    """
    outputs = [
        "    TraceId",
        f"    if(is_client, {CLIENT_KEY}, ParentSpanId) AS ClientSpanId",
    ]
    outputs += [f"    {column.expression()} AS {column.name}" for column in COLUMNS]
    return (
        "WITH\n    "
        + ",\n    ".join(_SPAN_ALIASES)
        + "\nSELECT\n"
        + ",\n".join(outputs)
        + f"\nFROM {options.traces}\n"
        + "WHERE SpanAttributes['rpc.system'] = 'grpc'\n"
        + f"  AND SpanKind IN {CLIENT_KINDS + SERVER_KINDS!r}\n"
        + "  AND TraceId != ''\n"
        + f"  AND {SKIP_FOLDED}"
    )


def create_view_sql(options: CallsOptions) -> str:
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {options.qualified(options.view)}"
        f"{options.on_cluster()}\nTO {options.calls}\nAS {extract_select_sql(options)}"
    )


def backfill_sql(options: CallsOptions) -> str:
    columns = ", ".join(quote_identifier(name) for name in COLUMN_NAMES)
    return f"INSERT INTO {options.calls} ({columns})\n{extract_select_sql(options)}"


def view_exists(store: Store, options: CallsOptions) -> bool:
    return table_exists(store, options.view, options.database)


def _view_is_current(store: Store, options: CallsOptions) -> bool:
    """Whether the existing view fills every column this version knows."""
    found = store.query(
        "SELECT create_table_query AS query FROM system.tables WHERE name = {name:String}"
        " AND database = if({database:String} = '', currentDatabase(), {database:String})",
        {"database": options.database, "name": options.view},
    )
    if found.empty:
        return False
    query = str(found["query"].iloc[0])
    return FOLDED_INTO in query and all(f"AS {column.name}" in query for column in COLUMNS)


def create_calls(
    store: Store, options: CallsOptions | None = None, *, backfill: bool = True
) -> bool:
    """Create ``grpc_calls`` and its view if missing; idempotent, safe on every start.

    ``otel_traces`` must exist (``schema.create_schema``). When the view is
    new and ``backfill`` is true, spans already in ``otel_traces`` (a store
    written by the collector's own exporter before the analyzer first ran)
    are assembled too. The view is created before the backfill, so no span
    falls between the two; a span seen by both is harmless (``max``).
    Returns True when the view was created now.
    """
    options = options or CallsOptions()
    store.command(create_calls_table_sql(options))
    # Tables made by an older version get the newer columns and index (for their
    # new parts); a view that does not fill every column is made anew.
    index = ROW_START_INDEX.replace("INDEX", "INDEX IF NOT EXISTS", 1)
    store.command(f"ALTER TABLE {options.calls}{options.on_cluster()} ADD {index}")
    store.command(
        f"ALTER TABLE {options.calls}{options.on_cluster()} "
        + ", ".join(
            f"ADD COLUMN IF NOT EXISTS {column.name} SimpleAggregateFunction(max, {column.type})"
            + (f" DEFAULT {column.absent}" if column.absent != "0" else "")
            for column in COLUMNS
        )
    )
    existed = view_exists(store, options)
    if existed and not _view_is_current(store, options):
        store.command(f"DROP VIEW {options.qualified(options.view)}{options.on_cluster()}")
    store.command(create_view_sql(options))
    if not existed and backfill:
        backfill_calls(store, options)
    return not existed


def backfill_calls(store: Store, options: CallsOptions | None = None) -> None:
    """Assemble every gRPC span already in ``otel_traces`` into ``grpc_calls``.

    Idempotent: running it twice, or over spans the view already saw, leaves
    the merged rows unchanged (every column is a ``max``).
    """
    store.command(backfill_sql(options or CallsOptions()))


# -- reading -----------------------------------------------------------------------------------


def calls_source(options: CallsOptions | None = None, keys: str = "") -> str:
    """One row per call, pre-filtered by ``ROW_FILTER`` (and to the key pairs ``keys``
    selects: a key holds for both halves, so before the merge), merged as ``options.read``."""
    options, read = options or CallsOptions(), (options or CallsOptions()).read
    row_filter = f"{ROW_FILTER} AND (TraceId, ClientSpanId) IN ({keys})" if keys else ROW_FILTER
    if read == "final":
        return f"SELECT * FROM {options.calls} FINAL PREWHERE {row_filter}"
    if read == "group_by":
        merged = ", ".join(f"max({column.name}) AS {column.name}" for column in COLUMNS)
        return (
            f"SELECT TraceId, ClientSpanId, {merged}"
            f" FROM (SELECT * FROM {options.calls} WHERE {row_filter})"
            " GROUP BY TraceId, ClientSpanId"
        )
    raise ValueError(f"read must be one of {READ_STRATEGIES}, not {read!r}")


def rows_to_scan(store: Store, options: CallsOptions, parameters: dict[str, Any]) -> bool:
    """Whether any half row passes ``ROW_FILTER``: a cheap check (two columns, no
    merging) that lets a query read settled minutes from the rollups alone."""
    found = store.query(
        f"SELECT count() AS n FROM (SELECT 1 FROM {options.calls} PREWHERE {ROW_FILTER} LIMIT 1)",
        parameters,
        readonly=True,
    )
    return bool(int(found["n"].iloc[0]))

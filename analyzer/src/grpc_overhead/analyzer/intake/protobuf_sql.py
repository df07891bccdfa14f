"""OTLP -> ``otel_traces`` inside the engine: ClickHouse parses the protobuf, SQL maps it.

Python field access on decoded protobuf costs microseconds per attribute, too
slow for the intake's target; ClickHouse's ``Protobuf`` input format parses
the same bytes in C++. ``INTAKE_PROTO`` is a wire-compatible subset of
``ExportTraceServiceRequest`` (field numbers as in opentelemetry-proto) in
which the recursive ``AnyValue`` members ``array_value`` and ``kvlist_value``
are declared ``bytes``: they arrive as their encoded bytes and a Python
function (``values.complex_value_json``, registered as a chDB UDF and only
evaluated for those rare values thanks to ``multiIf`` short-circuiting)
renders them as the exporter does. ``input_format_protobuf_oneof_presence``
tells which ``AnyValue`` member was set, so ``0`` and ``""`` stay distinct.

Every request gets one extra varint field, ``intake_seq`` (the largest legal
field number, appended to the request bytes: protobuf concatenation merges
it), so per-request span and rejection counts can be read back after a
batch of requests was inserted as length-delimited messages.

A span is rejected (OTLP partial success) when a trace or span id has a
length other than 0, 16/8 bytes: pdata refuses the whole request there, we
keep the rest. Everything else follows ``exporter_traces.go``: maps sorted by
key as clickhouse-go's ordered map sorts them, kinds and status codes as
pdata names them ('' for values outside the enum), ``Duration`` as the
unsigned (wrapping) difference of the timestamps.
"""

from __future__ import annotations

import functools

from grpc_overhead.analyzer.intake.rows import SPAN_KINDS, STATUS_CODES
from grpc_overhead.analyzer.intake.values import INVALID_VALUE_MARK, checked_complex_value_json

UDF_NAME = "grpc_overhead_otlp_complex_value"
SEQ_FIELD_NUMBER = (1 << 29) - 1
STAGING_TABLE = "grpc_overhead_intake_staging"

INTAKE_PROTO = """\
// Wire-compatible subset of opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest
// read by ClickHouse's Protobuf input format (see analyzer/intake/protobuf_sql.py).
syntax = "proto3";

package grpc_overhead.intake;

message AnyValue {
  oneof value {
    string string_value = 1;
    bool bool_value = 2;
    int64 int_value = 3;
    double double_value = 4;
    bytes array_value = 5;
    bytes kvlist_value = 6;
    bytes bytes_value = 7;
  }
}
message KeyValue { string key = 1; AnyValue value = 2; }
message Resource { repeated KeyValue attributes = 1; }
message InstrumentationScope { string name = 1; string version = 2; }
message Event { fixed64 time_unix_nano = 1; string name = 2; repeated KeyValue attributes = 3; }
message Link {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  repeated KeyValue attributes = 4;
}
message Status { string message = 2; int32 code = 3; }
message Span {
  bytes trace_id = 1;
  bytes span_id = 2;
  string trace_state = 3;
  bytes parent_span_id = 4;
  string name = 5;
  int32 kind = 6;
  fixed64 start_time_unix_nano = 7;
  fixed64 end_time_unix_nano = 8;
  repeated KeyValue attributes = 9;
  repeated Event events = 11;
  repeated Link links = 13;
  Status status = 15;
}
message ScopeSpans { InstrumentationScope scope = 1; repeated Span spans = 2; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message ExportTraceServiceRequest {
  repeated ResourceSpans resource_spans = 1;
  uint64 intake_seq = 536870911;
}
"""

_PRESENCE = (
    "Enum8('none' = 0, 'string_value' = 1, 'bool_value' = 2, 'int_value' = 3, "
    "'double_value' = 4, 'array_value' = 5, 'kvlist_value' = 6, 'bytes_value' = 7)"
)
_ANY_VALUE = (
    "Tuple(string_value String, bool_value Bool, int_value Int64, double_value Float64, "
    f"array_value String, kvlist_value String, bytes_value String, value {_PRESENCE})"
)
_ATTRIBUTES = f"Array(Tuple(key String, value {_ANY_VALUE}))"
_SPAN = (
    "Tuple(trace_id String, span_id String, trace_state String, parent_span_id String, "
    "name String, kind Int32, start_time_unix_nano UInt64, end_time_unix_nano UInt64, "
    f"attributes {_ATTRIBUTES}, "
    f"events Array(Tuple(time_unix_nano UInt64, name String, attributes {_ATTRIBUTES})), "
    "links Array(Tuple(trace_id String, span_id String, trace_state String, "
    f"attributes {_ATTRIBUTES})), "
    "status Tuple(message String, code Int32))"
)
STAGING_COLUMNS = (
    "intake_seq UInt64, "
    "resource_spans Array(Tuple(resource Tuple(attributes "
    f"{_ATTRIBUTES}), scope_spans Array(Tuple(scope Tuple(name String, version String), "
    f"spans Array({_SPAN})))))"
)

CREATE_STAGING = f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING_TABLE} ({STAGING_COLUMNS})"
TRUNCATE_STAGING = f"TRUNCATE TABLE {STAGING_TABLE}"


def staging_insert(schema_path: str) -> tuple[str, str]:
    """(statement, settings) for ``Store.insert_encoded`` with format ``Protobuf``."""
    settings = (
        f"format_schema = '{schema_path}:ExportTraceServiceRequest', "
        "input_format_protobuf_oneof_presence = 1"
    )
    return f"INSERT INTO {STAGING_TABLE}", settings


def _value(v: str) -> str:
    """AsString of one staged AnyValue tuple."""
    double = f"{v}.double_value"
    return (
        f"multiIf({v}.value = 'string_value', {v}.string_value, "
        f"{v}.value = 'int_value', toString({v}.int_value), "
        f"{v}.value = 'double_value', if(isFinite({double}), "
        # ClickHouse already writes Go's shortest digits and notation switch
        # points; only the '+' of positive exponents differs (plain replaces:
        # a constant regex costs more to plan than the rest of the value).
        f"replaceOne(replaceOne(toString({double}), 'e', 'e+'), 'e+-', 'e-'), "
        f"multiIf(isNaN({double}), 'NaN', {double} > 0, 'Infinity', '-Infinity')), "
        f"{v}.value = 'bool_value', if({v}.bool_value, 'true', 'false'), "
        f"{v}.value = 'bytes_value', base64Encode({v}.bytes_value), "
        f"{v}.value IN ('array_value', 'kvlist_value'), {_complex(v)}, "
        "'')"
    )


def _complex(v: str) -> str:
    """The UDF's AsString of an array or kvlist member (oneof: exactly one is set, so
    their concatenation is it)."""
    return (
        f"{UDF_NAME}(if({v}.value = 'array_value', 'array', 'kvlist'), "
        f"hex(concat({v}.array_value, {v}.kvlist_value)))"
    )


def _storable(a: str) -> str:
    """True when no value of the KeyValue array ``a`` is an array or map the UDF refused
    (malformed, or nested too deep). Short-circuit evaluation calls the UDF for those
    two kinds only."""
    return (
        f"arrayAll(kv -> kv.value.value NOT IN ('array_value', 'kvlist_value') "
        f"OR NOT startsWith({_complex('kv.value')}, '\\0'), {a})"
    )


def _attributes(a: str) -> str:
    """A staged KeyValue array as the exporter's Map (sorted by key, sorted once)."""
    return (
        f"CAST(arrayMap(kv -> (kv.key, {_value('kv.value')}), arraySort(kv -> kv.key, {a})), "
        "'Map(LowCardinality(String), String)')"
    )


def _hex_id(expression: str, size: int) -> str:
    """traceutil.*IDToHexOrEmptyString: '' for an absent or all-zero id."""
    return (
        f"if({expression} = '' OR {expression} = repeat('\\0', {size}), '', "
        f"lower(hex({expression})))"
    )


def _valid(span: str) -> str:
    """Storable span: ids of legal lengths, every array/map attribute value decodable."""
    return (
        f"(length({span}.trace_id) IN (0, 16) AND length({span}.span_id) IN (0, 8) "
        f"AND length({span}.parent_span_id) IN (0, 8) "
        f"AND arrayAll(l -> length(l.trace_id) IN (0, 16) AND length(l.span_id) IN (0, 8), "
        f"{span}.links) "
        f"AND {_storable(f'{span}.attributes')} "
        f"AND arrayAll(e -> {_storable('e.attributes')}, {span}.events) "
        f"AND arrayAll(l -> {_storable('l.attributes')}, {span}.links))"
    )


_ALL_SPANS = (
    "arrayFlatten(arrayMap(rs -> arrayMap(ss -> ss.spans, rs.scope_spans), resource_spans))"
)

_RESOURCE_SPANS = "arraySum(ss -> length(ss.spans), rs.scope_spans)"
_RESOURCE_REJECTED = (
    f"arraySum(ss -> arrayCount(sp -> NOT {_valid('sp')}, ss.spans), rs.scope_spans)"
)

#: Spans and rejected spans per staged request (a resource whose own attributes
#: cannot be stored takes all its spans with it).
REQUEST_COUNTS = (
    f"SELECT intake_seq, length({_ALL_SPANS}) AS spans, "
    f"arraySum(rs -> if({_storable('rs.resource.attributes')}, {_RESOURCE_REJECTED}, "
    f"{_RESOURCE_SPANS}), resource_spans) AS rejected "
    f"FROM {STAGING_TABLE}"
)

_TIMESTAMP = "fromUnixTimestamp64Nano(toInt64({}))"


def _enum_name(expression: str, names: tuple[str, ...]) -> str:
    """pdata's String() of an enum: its name, '' outside the enum (negative values too:
    a ClickHouse array index below 0 counts from the end, so it is never used bare)."""
    listed = ", ".join(f"'{name}'" for name in names)
    inside = f"{expression} >= 0 AND {expression} < {len(names)}"
    return f"if({inside}, [{listed}][{expression} + 1], '')"


#: The staged requests' storable spans, one row each: ``item`` is (resource index, scope
#: name, scope version, span), ``intake_seq`` the request. The caller adds the spans' own
#: validity to its WHERE (``_valid``), after ``resource_ok[item.1]``.
_STAGED_SPANS = f"""\
FROM (
    SELECT
        intake_seq,
        arrayMap(rs -> {_attributes("rs.resource.attributes")}, resource_spans) AS resource_maps,
        arrayMap(rs -> {_storable("rs.resource.attributes")}, resource_spans) AS resource_ok,
        arrayFlatten(arrayMap((rs, r) -> arrayMap(ss -> arrayMap(
            sp -> (r, ss.scope.name, ss.scope.version, sp), ss.spans), rs.scope_spans),
            resource_spans, arrayEnumerate(resource_spans))) AS spans
    FROM {STAGING_TABLE}
    WHERE has({{kept:Array(UInt64)}}, intake_seq)
)
ARRAY JOIN spans AS item
WHERE resource_ok[item.1] AND {_valid("item.4")}"""

_TRACE_ID = _hex_id("item.4.trace_id", 16)
_SPAN_ID = _hex_id("item.4.span_id", 8)
#: A span's identity: trace id, span id and start time (a retry repeats all three).
_SPAN_KEY = f"concat({_TRACE_ID}, {_SPAN_ID}, toString(toInt64(item.4.start_time_unix_nano)))"


#: The kept staged spans' identities, written once per batch and read by ``duplicates_query``
#: (a CTE would parse the staged requests again for every reference).
SPAN_KEYS_TABLE = "grpc_overhead_intake_span_keys"
CREATE_SPAN_KEYS = (
    f"CREATE TEMPORARY TABLE IF NOT EXISTS {SPAN_KEYS_TABLE} "
    "(trace String, span String, start_ns Int64, seq UInt64)"
)
TRUNCATE_SPAN_KEYS = f"TRUNCATE TABLE {SPAN_KEYS_TABLE}"
#: Spans without a trace or span id are never duplicates of one another.
STAGE_SPAN_KEYS = f"""\
INSERT INTO {SPAN_KEYS_TABLE}
SELECT {_TRACE_ID} AS trace, {_SPAN_ID} AS span,
    toInt64(item.4.start_time_unix_nano) AS start_ns, intake_seq AS seq
{_STAGED_SPANS}
AND trace != '' AND span != ''"""


def duplicates_query(qualified_table: str) -> str:
    """The staged spans (``STAGE_SPAN_KEYS``) already in the table, or staged more than
    once: (key, copies, seqs, stored), ``key`` as the transform's ``_SPAN_KEY``.

    ``Timestamp`` bounds the look-up to the staged spans' own time range (a retry
    carries the same start) and ``TraceId`` uses the table's bloom filter index.
    """
    start = "fromUnixTimestamp64Nano(start_ns)"
    return f"""\
SELECT concat(trace, span, toString(start_ns)) AS key, count() AS copies,
    groupArray(seq) AS seqs,
    (trace, span, {start}) IN (
        SELECT TraceId, SpanId, Timestamp FROM {qualified_table}
        WHERE Timestamp >= (SELECT fromUnixTimestamp64Nano(min(start_ns)) FROM {SPAN_KEYS_TABLE})
          AND Timestamp <= (SELECT fromUnixTimestamp64Nano(max(start_ns)) FROM {SPAN_KEYS_TABLE})
          AND TraceId IN (SELECT trace FROM {SPAN_KEYS_TABLE})
    ) AS stored
FROM {SPAN_KEYS_TABLE}
GROUP BY trace, span, start_ns
HAVING copies > 1 OR stored
"""


#: ``optimize_on_insert = 0``: ``grpc_calls`` (an AggregatingMergeTree fed by the calls
#: view) would otherwise sort and aggregate every inserted block by its key, column by
#: column, to collapse the rare call whose two halves arrive in the same batch: about a
#: quarter of the view's CPU per span (bench.intake_stages). The halves are merged by
#: every read and by the background merges anyway; ``otel_traces`` (plain MergeTree)
#: does nothing on insert either way.
INSERT_SETTINGS = "optimize_on_insert = 0"


def transform_insert(qualified_table: str, *, once: bool = False) -> str:
    """``INSERT INTO <otel_traces> SELECT ...`` from the staging table, valid spans only.

    Spans whose ``_SPAN_KEY`` is in ``{stored:Array(String)}`` are left out (a
    retry of what is stored already: see ``DUPLICATES``); with ``once``, a span staged
    several times whose key is in ``{repeated:Array(String)}`` is stored once.

    ``INSERT_SETTINGS`` hold for the materialized views the insert feeds too.
    """
    s = "item.4"
    key = _SPAN_KEY
    limit = (
        f"\nLIMIT 1 BY {key}, if(has({{repeated:Array(String)}}, {key}), 0, rowNumberInAllBlocks())"
        if once
        else ""
    )
    return f"""\
INSERT INTO {qualified_table} (
    Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
    ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode,
    StatusMessage, `Events.Timestamp`, `Events.Name`, `Events.Attributes`, `Links.TraceId`,
    `Links.SpanId`, `Links.TraceState`, `Links.Attributes`)
SELECT
    {_TIMESTAMP.format(f"{s}.start_time_unix_nano")},
    {_TRACE_ID},
    {_SPAN_ID},
    {_hex_id(f"{s}.parent_span_id", 8)},
    {s}.trace_state,
    {s}.name,
    {_enum_name(f"{s}.kind", SPAN_KINDS)},
    resource_maps[item.1]['service.name'],
    resource_maps[item.1],
    item.2,
    item.3,
    {_attributes(f"{s}.attributes")},
    toUInt64(toInt64({s}.end_time_unix_nano) - toInt64({s}.start_time_unix_nano)),
    {_enum_name(f"{s}.status.code", STATUS_CODES)},
    {s}.status.message,
    arrayMap(e -> {_TIMESTAMP.format("e.time_unix_nano")}, {s}.events),
    arrayMap(e -> e.name, {s}.events),
    arrayMap(e -> {_attributes("e.attributes")}, {s}.events),
    arrayMap(l -> {_hex_id("l.trace_id", 16)}, {s}.links),
    arrayMap(l -> {_hex_id("l.span_id", 8)}, {s}.links),
    arrayMap(l -> l.trace_state, {s}.links),
    arrayMap(l -> {_attributes("l.attributes")}, {s}.links)
{_STAGED_SPANS}
AND NOT has({{stored:Array(String)}}, {key}){limit}
SETTINGS {INSERT_SETTINGS}
"""


@functools.lru_cache(maxsize=4096)
def complex_value(kind: str, encoded_hex: str) -> str:
    """The UDF ``UDF_NAME`` (``Store.register_function``): ``checked_complex_value_json`` of
    a value ClickHouse hands over hex-encoded. Cached: validity checks and the mapping
    ask for the same value."""
    try:
        data = bytes.fromhex(encoded_hex)
    except ValueError:
        return INVALID_VALUE_MARK + "malformed attribute value"
    return checked_complex_value_json(kind, data)


#: ``complex_value``'s SQL signature.
UDF_ARGUMENTS = ("String", "String")
UDF_RETURNS = "String"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_SEQ_TAG = _varint(SEQ_FIELD_NUMBER << 3)


def framed(request: bytes, seq: int) -> tuple[bytes, bytes, bytes]:
    """One request as a length-delimited message carrying ``intake_seq``, in three chunks.

    (length prefix, the request itself, the ``intake_seq`` varint field):
    streamed one after the other they are the message, and the request's
    bytes, often megabytes, are never copied in Python.
    """
    suffix = _SEQ_TAG + _varint(seq)
    return _varint(len(request) + len(suffix)), request, suffix

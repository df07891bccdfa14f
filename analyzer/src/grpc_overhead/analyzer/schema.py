"""The ``otel_traces`` schema, byte-for-byte the collector-contrib clickhouse exporter's.

The three templates below are copied verbatim from the exporter module
``github.com/open-telemetry/opentelemetry-collector-contrib/exporter/clickhouseexporter``
at ``EXPORTER_VERSION`` (``internal/sqltemplates/traces_table.sql``,
``traces_id_ts_lookup_table.sql``, ``traces_id_ts_lookup_mv.sql``) and rendered
the way the exporter renders them: Go ``fmt.Sprintf`` (``%q`` is Go-quoted),
database and table names, the ``ON CLUSTER`` clause, the table engine and the
TTL expression (``exporter_traces.go``, ``config.go``, ``internal/clickhouse.go``).
``tests/analyzer/test_schema.py`` compares them with the module's files.

A table written by the collector's own exporter and one created here are the
same table: the analyzer reads either, and ``create_schema`` is a no-op on an
existing one (every statement is ``IF NOT EXISTS``). The DDL runs unchanged on
chDB 4.4 (engine 26.9): no setting is needed for the bloom-filter indexes on
``mapKeys``/``mapValues`` (the Map type needs no experimental flag since 21.8).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.store.base import Store

EXPORTER_MODULE = (
    "github.com/open-telemetry/opentelemetry-collector-contrib/exporter/clickhouseexporter"
)
EXPORTER_VERSION = "v0.161.0"

# Each template's text, exactly as in the module (note: only some end in a newline).
TRACES_TABLE_TEMPLATE = """\
CREATE TABLE IF NOT EXISTS %q.%q %s (
    Timestamp DateTime64(9) CODEC(Delta, ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1
) ENGINE = %s
PARTITION BY toDate(Timestamp)
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp))
%s
SETTINGS index_granularity=8192, ttl_only_drop_parts = 1
"""

TRACES_ID_TS_TABLE_TEMPLATE = """\
CREATE TABLE IF NOT EXISTS "%s"."%s_trace_id_ts" %s (
    TraceId String CODEC(ZSTD(1)),
    Start DateTime CODEC(Delta, ZSTD(1)),
    End DateTime CODEC(Delta, ZSTD(1)),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.01) GRANULARITY 1
) ENGINE = %s
    PARTITION BY toDate(Start)
    ORDER BY (TraceId, Start)
    %s
    SETTINGS index_granularity=8192, ttl_only_drop_parts = 1"""

TRACES_ID_TS_VIEW_TEMPLATE = """\
CREATE MATERIALIZED VIEW IF NOT EXISTS "%s"."%s_trace_id_ts_mv" %s
TO "%s"."%s_trace_id_ts"
AS SELECT
              TraceId,
              min(Timestamp) as Start,
              max(Timestamp) as End
   FROM "%s"."%s"
   WHERE TraceId != ''
   GROUP BY TraceId
"""

DEFAULT_DATABASE = "default"
DEFAULT_TRACES_TABLE = "otel_traces"


@dataclass(frozen=True)
class SchemaOptions:
    """The exporter's rendering parameters (its config keys in brackets).

    ``database`` [database], ``traces_table`` [traces_table_name], ``cluster``
    [cluster_name: adds ``ON CLUSTER``], ``engine``/``engine_params``
    [table_engine: e.g. ``ReplicatedMergeTree`` for a cluster], ``ttl`` [ttl].
    """

    database: str = DEFAULT_DATABASE
    traces_table: str = DEFAULT_TRACES_TABLE
    cluster: str = ""
    engine: str = ""
    engine_params: str = ""
    ttl: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        for field in ("database", "traces_table"):
            if not getattr(self, field):
                raise BadInput(f"schema: {field} must not be empty")

    @classmethod
    def for_store(cls, store: Store, **overrides: Any) -> SchemaOptions:
        """The options every command uses: ``otel_traces`` in the store's current database.

        The one place the database is decided, so what ``serve`` (and its
        intake) writes is what ``report``, ``sql`` and the app read: with
        ``--clickhouse clickhouse://host:9000/otel`` that is ``otel``, not
        ``default``. ``overrides`` set any other field (``database`` too).
        """
        return cls(**{"database": store.database, **overrides})

    @property
    def database_name(self) -> str:
        return self.database or DEFAULT_DATABASE

    def cluster_string(self) -> str:
        """config.go clusterString()."""
        if not self.cluster:
            return ""
        return "ON CLUSTER `" + self.cluster.replace("`", "``") + "`"

    def table_engine_string(self) -> str:
        """config.go tableEngineString(): ``MergeTree()`` unless a name is given."""
        if not self.engine:
            return "MergeTree()"
        return f"{self.engine}({self.engine_params})"

    def qualified_traces_table(self) -> str:
        """``"db"."table"`` as the exporter's INSERT names it (Go %q quoting)."""
        return f"{go_quote(self.database_name)}.{go_quote(self.traces_table)}"


def ttl_expression(ttl: timedelta, time_field: str) -> str:
    """internal/clickhouse.go GenerateTTLExpr."""
    nanoseconds = (ttl.days * 86_400 + ttl.seconds) * 1_000_000_000 + ttl.microseconds * 1000
    if nanoseconds <= 0:
        return ""
    second = 1_000_000_000
    minute, hour, day = 60 * second, 3600 * second, 86_400 * second
    if nanoseconds % day == 0:
        return f"TTL {time_field} + toIntervalDay({nanoseconds // day})"
    if nanoseconds % hour == 0:
        return f"TTL {time_field} + toIntervalHour({nanoseconds // hour})"
    if nanoseconds % minute == 0:
        return f"TTL {time_field} + toIntervalMinute({nanoseconds // minute})"
    return f"TTL {time_field} + toIntervalSecond({nanoseconds // second})"


def render_traces_table(options: SchemaOptions) -> str:
    """exporter_traces.go renderCreateTracesTableSQL."""
    return go_sprintf(
        TRACES_TABLE_TEMPLATE,
        options.database_name,
        options.traces_table,
        options.cluster_string(),
        options.table_engine_string(),
        ttl_expression(options.ttl, "toDateTime(Timestamp)"),
    )


def render_trace_id_ts_table(options: SchemaOptions) -> str:
    """exporter_traces.go renderCreateTraceIDTsTableSQL."""
    return go_sprintf(
        TRACES_ID_TS_TABLE_TEMPLATE,
        options.database_name,
        options.traces_table,
        options.cluster_string(),
        options.table_engine_string(),
        ttl_expression(options.ttl, "toDateTime(Start)"),
    )


def render_trace_id_ts_view(options: SchemaOptions) -> str:
    """exporter_traces.go renderTraceIDTsMaterializedViewSQL."""
    database, table = options.database_name, options.traces_table
    return go_sprintf(
        TRACES_ID_TS_VIEW_TEMPLATE,
        database,
        table,
        options.cluster_string(),
        database,
        table,
        database,
        table,
    )


def render_create_database(options: SchemaOptions) -> str | None:
    """internal/clickhouse.go CreateDatabase: nothing for the default database."""
    if options.database_name == DEFAULT_DATABASE:
        return None
    return go_sprintf(
        "CREATE DATABASE IF NOT EXISTS %q %s", options.database_name, options.cluster_string()
    )


def schema_statements(options: SchemaOptions | None = None) -> list[str]:
    """Every statement, in the exporter's order (database, table, lookup table, view)."""
    options = options or SchemaOptions()
    statements = [render_create_database(options)]
    statements += [
        render_traces_table(options),
        render_trace_id_ts_table(options),
        render_trace_id_ts_view(options),
    ]
    return [statement for statement in statements if statement]


def create_schema(store: Store, options: SchemaOptions | None = None) -> None:
    """Create what is missing; safe to run on every start and on a collector-made schema."""
    for statement in schema_statements(options):
        store.command(statement)


# -- Go fmt, as far as the templates need it ---------------------------------


def go_sprintf(template: str, *args: str) -> str:
    """Go ``fmt.Sprintf`` for ``%s``, ``%q`` and ``%%`` with string arguments."""
    out: list[str] = []
    remaining = list(args)
    index = 0
    while index < len(template):
        char = template[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        verb = template[index + 1 : index + 2]
        index += 2
        if verb == "%":
            out.append("%")
            continue
        if verb not in ("s", "q"):
            raise ValueError(f"unsupported verb %{verb}")
        if not remaining:
            out.append(f"%!{verb}(MISSING)")
            continue
        value = remaining.pop(0)
        out.append(go_quote(value) if verb == "q" else value)
    if remaining:
        out.append("%!(EXTRA " + ", ".join(f"string={value}" for value in remaining) + ")")
    return "".join(out)


_GO_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
    "\\": "\\\\",
    '"': '\\"',
}


def go_quote(value: str) -> str:
    """Go ``strconv.Quote``: double quotes, Go escapes, printable runes kept."""
    out = ['"']
    for char in value:
        if char in _GO_ESCAPES:
            out.append(_GO_ESCAPES[char])
        elif _go_printable(char):
            out.append(char)
        elif ord(char) < 0x80:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    out.append('"')
    return "".join(out)


def _go_printable(char: str) -> bool:
    """unicode.IsPrint: letters, marks, numbers, punctuation, symbols and ASCII space."""
    if char == " ":
        return True
    return unicodedata.category(char)[0] in "LMNPS"

"""``grpc_call_phases``: one row per call with every phase as a column, for people writing SQL.

``grpc_calls`` is what the engine assembles (two half rows per call until a
merge, 50 raw timestamps, no phases): reading it right takes ``FINAL`` and the
phase definitions. This view is ``per_call_sql`` (the very query ``report``
and the app read), so its numbers are the report's, on chDB and on a
ClickHouse server alike:

* one row per call, halves merged while reading (``FINAL`` inside the view:
  a span delivered twice, the at-least-once case, is still one call);
* identity columns named as a user would look for them (``IDENTITY``);
* every phase of ``ALL_PHASES`` as ``<phase>_us``, ``Nullable(Float64)``,
  NULL where the call did not record what the phase needs.

A view takes no query parameters, so the analysis' own bound values are
fixed in its text (``VIEW_DEFAULTS``: all time, every call, clock offsets per
host and 60 s window, as ``report`` defaults to). They are constants of ours,
never user input; users filter with their own ``WHERE``.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import Any

from grpc_overhead.analyzer.call_rollup import ALGORITHM
from grpc_overhead.analyzer.calls import create_calls, create_calls_table_sql
from grpc_overhead.analyzer.calls import create_view_sql as create_calls_view_sql
from grpc_overhead.analyzer.clock_offsets import ClockOptions, query_parameters
from grpc_overhead.analyzer.declared_columns import (
    MESSAGES_VIEW_COLUMNS,
    PHASES_VIEW_COLUMNS,
    column_list,
)
from grpc_overhead.analyzer.messages import MESSAGES_VIEW, messages_sql
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import per_call_sql
from grpc_overhead.analyzer.result_columns import ALL_PHASES, CALL_WEIGHT
from grpc_overhead.analyzer.runs import ADDED_COLUMNS as RUNS_ADDED_COLUMNS
from grpc_overhead.analyzer.runs import RUNS_TABLE, create_runs, create_runs_sql
from grpc_overhead.analyzer.sample_columns import sample_view_columns
from grpc_overhead.analyzer.store.base import NAMED_OR_CURRENT_DATABASE, Store, table_exists

PHASES_VIEW = "grpc_call_phases"

#: (column, expression over ``per_call_sql``'s row, what it is): the identity columns.
IDENTITY: tuple[tuple[str, str, str], ...] = (
    ("trace_id", "TraceId", "W3C trace id (hex)"),
    ("client_span_id", "ClientSpanId", "the client span's id: with trace_id, the call's key"),
    (
        "start_time",
        "fromUnixTimestamp64Nano(call_start_ns, 'UTC')",
        "DateTime64(9, 'UTC'): the client span's start (the server's if no client half)",
    ),
    (
        "service_name",
        "toString(if(client_service != '', client_service, server_service))",
        "OTel service.name of the caller (of the server for a call without client half)",
    ),
    ("client_service_name", "toString(client_service)", "OTel service.name of the client"),
    ("server_service_name", "toString(server_service)", "OTel service.name of the server"),
    ("rpc_service", "toString(service)", "gRPC service (rpc.service), e.g. predict.Predictor"),
    ("rpc_method", "toString(method)", "gRPC method (rpc.method), e.g. Predict"),
    ("call_type", "toString(call_type)", "unary_unary, unary_stream, ... ('' when not recorded)"),
    (
        "call_shape",
        "toString(call_shape)",
        "unary, client_streaming, server_streaming, bidi_streaming ('' when unknown)",
    ),
    ("run_id", "toString(run_id)", "grpc_overhead.run_id of the load run ('' when none)"),
    ("client_instance", "toString(client_instance)", "service.instance.id of the client"),
    ("server_instance", "toString(server_instance)", "service.instance.id of the server"),
    ("client_host", "toString(client_host)", "host.name of the client"),
    ("server_host", "toString(server_host)", "host.name of the server"),
    ("server_span_id", "toString(ServerSpanId)", "the server span's id ('' without server half)"),
    (
        "status_code",
        "if(status_code >= 0, toNullable(toInt16(status_code)), NULL)",
        "gRPC status code (0 = OK), NULL when neither half recorded one",
    ),
    ("error", "error", "1 when either span has status Error"),
    ("compression", "toString(compression)", "grpc.compression ('' = none)"),
    (
        "payload_codec",
        "toString(payload_codec)",
        "the service's own codec of its payload (grpc_overhead.payload.codec: zstd, lz4, "
        "snappy; '' = none), applied before gRPC's compression",
    ),
    (
        "compression_algorithm",
        f"toString({ALGORITHM})",
        "both in one label: none, gzip, deflate, zstd, lz4, snappy, or e.g. gzip+zstd",
    ),
    ("request_bytes", "toUInt64(request_uncompressed_bytes)", "request bytes, uncompressed"),
    ("response_bytes", "toUInt64(response_uncompressed_bytes)", "response bytes, uncompressed"),
    (
        "request_compressed_bytes",
        "toUInt64(request_compressed_bytes)",
        "request bytes after compression where sampled (0 otherwise)",
    ),
    (
        "response_compressed_bytes",
        "toUInt64(response_compressed_bytes)",
        "response bytes after compression where sampled (0 otherwise)",
    ),
    (
        "request_messages",
        "toUInt32(request_messages)",
        "request messages (a stream's count; 1 for unary)",
    ),
    (
        "response_messages",
        "toUInt32(response_messages)",
        "response messages (a stream's count; 1 for unary)",
    ),
    *sample_view_columns(),
    (
        "weight",
        CALL_WEIGHT,
        "how many calls this one stands for: the inverse of the probability it was kept with "
        "under sampling (grpc_overhead.sampling.weight; 1 for calls kept for sure and for "
        "every span without it); sum(weight) estimates the calls made",
    ),
    (
        "sampling_reason",
        "toString(if(client_sampling_reason != '', client_sampling_reason,"
        " server_sampling_reason))",
        "why the call was kept (base, slow, failed, server, parent, warmup, head; the "
        "client's, else the server's; '' = not sampled)",
    ),
    (
        "clock_offset_us",
        "if(clock_defined, clock_offset_ns / 1000, NULL)",
        "server clock minus client clock applied to one-way phases (0 on one host)",
    ),
    (
        "clock_uncertainty_us",
        "if(clock_defined, clock_uncertainty_ns / 1000, NULL)",
        "the bound on that offset (half the best round trip)",
    ),
)

#: The analysis' bound values the view fixes: all time, every call, report's clock defaults.
VIEW_DEFAULTS: dict[str, Any] = query_parameters(CallFilters(), ClockOptions())

_PLACEHOLDER = re.compile(r"\{(\w+):([\w()]+)\}")


def _literal(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise TypeError(f"no literal for {value!r}")  # only our own ints and '' get here
    if isinstance(value, int):
        return str(value)
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def view_select_sql(options: CallsOptions | None = None) -> str:
    """The view's SELECT: ``per_call_sql`` with ``VIEW_DEFAULTS`` in place of its parameters."""
    identity = [f"{expression} AS {name}" for name, expression, _ in IDENTITY]
    phases = [
        f"if({name}_defined, toFloat64({name}_value) / 1000, NULL) AS {name}_us"
        for name in ALL_PHASES
    ]
    sql = (
        "SELECT\n    " + ",\n    ".join(identity + phases) + f"\nFROM (\n{per_call_sql(options)}\n)"
    )
    return _fixed(sql)


def _fixed(sql: str) -> str:
    """``sql`` with ``VIEW_DEFAULTS`` in place of its parameters (a view takes none)."""

    # The hold-back grace (``options.SHOWN_FILTER``) as this process is configured.
    defaults = {**VIEW_DEFAULTS, "grace_ns": CallFilters().grace_ns}

    def substitute(match: re.Match[str]) -> str:
        return _literal(defaults[match.group(1)])

    return _PLACEHOLDER.sub(substitute, sql)


def create_view_sql(options: CallsOptions | None = None) -> str:
    """Its columns declared (``declared_columns``): the engine skips analyzing the SELECT."""
    options = options or CallsOptions()
    return (
        f"CREATE OR REPLACE VIEW {options.qualified(PHASES_VIEW)}{options.on_cluster()}"
        + column_list(PHASES_VIEW_COLUMNS)
        + " AS\n"
        + view_select_sql(options)
    )


def messages_view_select_sql(options: CallsOptions | None = None) -> str:
    """``grpc_message_phases``' SELECT: ``messages_sql`` with ``VIEW_DEFAULTS`` fixed."""
    return _fixed(messages_sql(options))


def create_messages_view_sql(options: CallsOptions | None = None) -> str:
    """``grpc_message_phases``: one row per message (``messages``), same fixed defaults."""
    options = options or CallsOptions()
    return (
        f"CREATE OR REPLACE VIEW {options.qualified(MESSAGES_VIEW)}{options.on_cluster()}"
        + column_list(MESSAGES_VIEW_COLUMNS)
        + " AS\n"
        + messages_view_select_sql(options)
    )


def create_phase_view(
    store: Store, options: CallsOptions | None = None, *, database: str | None = None
) -> None:
    """Create ``grpc_call_phases`` and ``grpc_message_phases``, or replace ones an older
    version made (a view holds no data, and ``CREATE OR REPLACE`` swaps it atomically for
    readers). Each carries the schema's fingerprint as its comment (``schema_is_current``):
    ``database`` is the one ``options.database`` stands for, asked of the store if None."""
    options = options or CallsOptions()
    if database is None:
        database = str(
            store.query(
                f"SELECT {NAMED_OR_CURRENT_DATABASE} AS name", {"database": options.database}
            )["name"].iloc[0]
        )
    comment = f"\nCOMMENT '{_SCHEMA_COMMENT}{schema_fingerprint(options, database)}'"
    store.command(create_view_sql(options) + comment)
    store.command(create_messages_view_sql(options) + comment)


def ensure_phase_view(store: Store, options: CallsOptions | None = None) -> bool:
    """Create the view on a store that has ``grpc_calls`` but not the view; True if it is there.

    A store made by an older version, or written by a process that never ran
    ``create_call_tables`` (a benchmark's seed), has the calls but not this view,
    and a user's first query of it would fail. The view holds no data, so making
    it is as cheap as ``report``'s own start. Raises ``QueryError`` where the
    user may not create it (a read-only ClickHouse user).
    """
    options = options or CallsOptions()
    if table_exists(store, PHASES_VIEW, options.database) and table_exists(
        store, MESSAGES_VIEW, options.database
    ):
        return True
    if not table_exists(store, options.calls_table, options.database):
        return False
    create_phase_view(store, options)
    return True


def create_call_tables(
    store: Store, options: CallsOptions | None = None, *, backfill: bool = True
) -> bool:
    """``create_calls``, ``grpc_runs`` (empty until an experiment runs) and the phase views:
    everything readers of calls need, idempotent. ``grpc_runs`` is created here because the
    experiments dashboard reads it, and a Grafana panel on a missing table shows an error
    where an empty one shows "no data". A store this version already made ready is left
    as it is (``schema_is_current``); the views come last, so their fingerprint is only
    written once everything before them exists.

    Returns True when the calls' materialized view was created now (``create_calls``).
    """
    options = options or CallsOptions()
    current, database = _schema_state(store, options)
    if current:
        return False
    created = create_calls(store, options, backfill=backfill)
    create_runs(store, options)
    create_phase_view(store, options, database=database)
    return created


#: The phase views' comment: this, then the fingerprint of the statements that made them.
_SCHEMA_COMMENT = "grpc-overhead schema "


def schema_fingerprint(options: CallsOptions, database: str) -> str:
    """A digest of every statement ``create_call_tables`` runs for ``options`` in
    ``database`` (the one an empty ``options.database`` stands for: the same objects
    whether a command names it or not): equal fingerprints, the same tables and views."""
    options = replace(options, database=database)
    statements = (
        create_calls_table_sql(options),
        create_calls_view_sql(options),
        create_runs_sql(options),
        repr(RUNS_ADDED_COLUMNS),
        create_view_sql(options),
        create_messages_view_sql(options),
    )
    return hashlib.sha256("\n;\n".join(statements).encode()).hexdigest()[:32]


def schema_is_current(store: Store, options: CallsOptions) -> bool:
    """Whether the calls' tables and views exist and both phase views carry this version's
    fingerprint. One query where the statements would take seconds: a view's statement
    is analyzed in full even when it changes nothing, and every command that opens a
    store runs them (``readiness.prepare_for_reading``)."""
    return _schema_state(store, options)[0]


def _schema_state(store: Store, options: CallsOptions) -> tuple[bool, str | None]:
    """(``schema_is_current``, the database ``options.database`` stands for: None when it
    holds no tables yet, so the one query that answers the first cannot name it)."""
    found = store.query(
        "SELECT name, comment, database FROM system.tables "
        f"WHERE database = {NAMED_OR_CURRENT_DATABASE}",
        {"database": options.database},
    )
    if found.empty:
        return False, None
    database = str(found["database"].iloc[0])
    comments = dict(zip(found["name"], found["comment"], strict=True))
    wanted = _SCHEMA_COMMENT + schema_fingerprint(options, database)
    current = (
        {options.calls_table, options.view, RUNS_TABLE} <= comments.keys()
        and comments.get(PHASES_VIEW) == wanted
        and comments.get(MESSAGES_VIEW) == wanted
    )
    return current, database


def view_columns() -> list[tuple[str, str]]:
    """(column, what it is) for every column of the view, in order (docs, ``sql --help``)."""
    described = [(name, text) for name, _, text in IDENTITY]
    phases = [(f"{name}_us", f"phase {name}, µs (NULL: undefined)") for name in ALL_PHASES]
    return described + phases

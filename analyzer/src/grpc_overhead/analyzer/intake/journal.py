"""Digests of the requests the intake stored, kept in the store: retries survive a restart.

A sender that did not hear its answer (``serve`` was killed between the
statement that stored its request and the answer, or it gave up waiting)
resends the same bytes, possibly to the next ``serve`` process. The
processor remembers every request's digest in memory, which a restart
forgets, so each worker also writes the digests of what it stored into
``grpc_overhead_intake_stored``, right after the statement that stored them
and before anyone is answered, and a new processor loads the last
``WINDOW_S`` of them on start. A retry whose digest is known gets the
stored outcome and stores nothing.

Why a table of our own and not ClickHouse's insert deduplication: on a
non-replicated MergeTree, deduplication tokens need the
``non_replicated_deduplication_window`` table setting, and ``otel_traces``
stays byte for byte the exporter's DDL. The two writes are not one
transaction (ClickHouse has none across tables): a kill between them (a
few milliseconds) can still let one retry store its spans twice.
"""

from __future__ import annotations

from collections.abc import Sequence

from grpc_overhead.analyzer.schema import SchemaOptions, go_quote
from grpc_overhead.analyzer.store.base import Store

TABLE = "grpc_overhead_intake_stored"
#: How long a stored request's digest is honoured (and loaded on start).
WINDOW_S = 600
COLUMNS = ("Digest", "Spans", "Rejected")


def table(schema: SchemaOptions) -> str:
    return f"{go_quote(schema.database_name)}.{go_quote(TABLE)}"


def create(store: Store, schema: SchemaOptions) -> None:
    """The journal table; its TTL drops what no retry can concern any more."""
    store.command(
        f"CREATE TABLE IF NOT EXISTS {table(schema)} (Digest String, Spans UInt32, "
        "Rejected UInt32, StoredAt DateTime DEFAULT now()) ENGINE = MergeTree "
        "ORDER BY StoredAt TTL StoredAt + toIntervalDay(1)"
    )


def record(store: Store, schema: SchemaOptions, stored: Sequence[tuple[bytes, int, int]]) -> None:
    """Journal (digest, spans, rejected) of requests that were just stored."""
    if stored:
        digests, spans, rejected = zip(*stored, strict=True)
        store.insert(table(schema), COLUMNS, [[d.hex() for d in digests], spans, rejected])


def load(store: Store, schema: SchemaOptions) -> list[tuple[bytes, int, int]]:
    """(digest, spans, rejected) of the requests stored in the last ``WINDOW_S``."""
    rows = store.query(
        f"SELECT Digest, Spans, Rejected FROM {table(schema)} "
        "WHERE StoredAt >= now() - {window:UInt32}",
        {"window": WINDOW_S},
    )
    return [
        (bytes.fromhex(digest), int(spans), int(rejected))
        for digest, spans, rejected in zip(
            rows["Digest"], rows["Spans"], rows["Rejected"], strict=True
        )
    ]

"""Where spans live: one small interface, two backends (chDB embedded, ClickHouse server).

from grpc_overhead.analyzer.store import open_store

with open_store("./grpc-overhead-data", None) as store:
    frame = store.query("SELECT count() AS n FROM otel_traces WHERE SpanKind = {k:String}",
                        {"k": "Server"})
"""

from __future__ import annotations

import os

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.store.base import Backend, Store, quote_identifier, table_exists
from grpc_overhead.analyzer.store.embedded import ChdbStore
from grpc_overhead.analyzer.store.lock import check_free
from grpc_overhead.analyzer.store.server import ClickHouseServerStore

DEFAULT_STORE_DIR = "./grpc-overhead-data"

__all__ = [
    "DEFAULT_STORE_DIR",
    "Backend",
    "ChdbStore",
    "ClickHouseServerStore",
    "Store",
    "check_free",
    "open_store",
    "quote_identifier",
    "table_exists",
]


def open_store(
    store_dir: str | os.PathLike[str] | None = None, clickhouse_url: str | None = None
) -> Store:
    """A ClickHouse server store if ``clickhouse_url`` is given, else chDB on ``store_dir``.

    With neither, the embedded default ``./grpc-overhead-data`` is used. A chDB
    directory another process owns raises ``StoreLocked`` naming that process,
    before any engine starts.
    """
    if store_dir is not None and clickhouse_url:
        raise BadInput("pass either a store directory or a ClickHouse URL, not both")
    if clickhouse_url:
        return ClickHouseServerStore(clickhouse_url)
    return ChdbStore(store_dir if store_dir is not None else DEFAULT_STORE_DIR)

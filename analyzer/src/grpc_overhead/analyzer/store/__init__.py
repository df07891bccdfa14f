"""Where spans live: one small interface, three backends (chDB, ClickHouse server, HTTP).

from grpc_overhead.analyzer.store import open_store

with open_store("./grpc-overhead-data", None) as store:
    frame = store.query("SELECT count() AS n FROM otel_traces WHERE SpanKind = {k:String}",
                        {"k": "Server"})
"""

from __future__ import annotations

import os

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.store.base import Backend, Store, quote_identifier, table_exists
from grpc_overhead.analyzer.store.clickhouse_server import ClickHouseServerStore
from grpc_overhead.analyzer.store.embedded import ChdbStore
from grpc_overhead.analyzer.store.http import ClickHouseHttpStore
from grpc_overhead.analyzer.store.lock import check_free
from grpc_overhead.analyzer.store.owner import serving_owner

DEFAULT_STORE_DIR = "./grpc-overhead-data"

__all__ = [
    "DEFAULT_STORE_DIR",
    "Backend",
    "ChdbStore",
    "ClickHouseHttpStore",
    "ClickHouseServerStore",
    "Store",
    "check_free",
    "open_store",
    "quote_identifier",
    "table_exists",
]


def open_store(
    store_dir: str | os.PathLike[str] | None = None,
    clickhouse_url: str | None = None,
    *,
    http_user: str | None = None,
    http_password: str | None = None,
    through_owner: bool = True,
) -> Store:
    """A ClickHouse store if ``clickhouse_url`` is given, else chDB on ``store_dir``.

    ``clickhouse_url``: ``clickhouse://`` (native protocol) or ``http(s)://``
    (the HTTP interface). With neither argument, the embedded default
    ``./grpc-overhead-data`` is used. A chDB directory that a running ``serve``
    owns is read through that serve's HTTP interface (read-only; ``http_user``
    and ``http_password`` if it asks for them); one that another process holds
    otherwise raises ``StoreLocked`` naming that process, before any engine starts.
    ``through_owner=False``: the caller means to own the directory (``serve``),
    so a held one always raises ``StoreLocked``.
    """
    if store_dir is not None and clickhouse_url:
        raise BadInput("pass either a store directory or a ClickHouse URL, not both")
    if clickhouse_url:
        if clickhouse_url.startswith(("http://", "https://")):
            return ClickHouseHttpStore(clickhouse_url, user=http_user, password=http_password)
        return ClickHouseServerStore(clickhouse_url)
    directory = os.path.abspath(
        os.fspath(store_dir if store_dir is not None else DEFAULT_STORE_DIR)
    )
    owner = serving_owner(directory) if through_owner else None
    if owner is not None:
        return ClickHouseHttpStore(
            owner.http_url,
            user=http_user,
            password=http_password,
            read_only=True,
            description=f"chDB {directory} through serve (process {owner.pid}) at {owner.http_url}",
            pinned_certificate=owner.certificate or None,
        )
    return ChdbStore(directory)

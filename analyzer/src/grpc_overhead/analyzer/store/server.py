"""``ClickHouseServerStore``: a ClickHouse server or cluster over the native protocol.

clickhouse-driver with ``server_side_params`` so ``{name:Type}`` placeholders
are bound by the server exactly as chDB binds them; inserts go column-wise
(``INSERT INTO t (cols) VALUES`` + ``columnar=True``). Read-only queries carry
the ``readonly=1`` setting, which the server enforces.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from grpc_overhead.analyzer.errors import BadInput, QueryError, StoreUnavailable
from grpc_overhead.analyzer.store.base import (
    Backend,
    Columns,
    Parameters,
    Store,
    quote_identifier,
    split_clickhouse_error,
)

_SCHEMES = ("clickhouse", "clickhouses", "tcp")
CLICKHOUSE = Backend("clickhouse", owns_data=False, encoded_inserts=False)

# The driver logs every failed connect attempt with a traceback; we raise
# StoreUnavailable with the same facts instead. Records still reach handlers
# the application configures on the root logger.
logging.getLogger("clickhouse_driver.connection").addHandler(logging.NullHandler())


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return parts._replace(netloc=netloc).geturl()


class ClickHouseServerStore(Store):
    """ClickHouse at ``clickhouse://user:pass@host:9000/db`` (``clickhouses://`` for TLS)."""

    backend = CLICKHOUSE

    def __init__(self, url: str, *, connect_timeout: float = 5.0) -> None:
        from clickhouse_driver import Client

        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES or not parts.hostname:
            raise BadInput(
                f"not a ClickHouse native-protocol URL: {_redacted(url)!r} "
                "(expected clickhouse://user:password@host:9000/database)"
            )
        if parts.scheme == "tcp":
            url = "clickhouse" + url[3:]
        self.url = url
        self.description = f"ClickHouse {_redacted(url)}"
        self._lock = threading.RLock()
        try:
            self._client = Client.from_url(url)
        except (ValueError, TypeError) as exc:
            raise BadInput(f"bad ClickHouse URL {_redacted(url)!r}: {exc}") from exc
        self._client.connection.connect_timeout = connect_timeout
        # Bind {name:Type} placeholders on the server, exactly as chDB does.
        self._client.client_settings["server_side_params"] = True
        # Fail now, with a clear message, rather than at the first query.
        self._execute("SELECT 1", None, settings=None)

    def query(
        self, sql: str, parameters: Parameters | None = None, *, readonly: bool = False
    ) -> pd.DataFrame:
        settings = {"readonly": 1} if readonly else None
        rows, column_types = self._execute(
            sql, parameters, settings=settings, with_column_types=True, columnar=True
        )
        names = [name for name, _ in column_types]
        values = rows if rows else [[] for _ in names]
        frame = pd.DataFrame(
            {name: list(column) for name, column in zip(names, values, strict=True)}
        )
        for name, type_name in column_types:
            if type_name.startswith(("DateTime", "Nullable(DateTime")) and len(frame):
                frame[name] = pd.to_datetime(frame[name], utc=True)
        return frame

    def command(self, sql: str, parameters: Parameters | None = None) -> None:
        self._execute(sql, parameters, settings=None)

    def insert(self, table: str, columns: Sequence[str], data: Columns) -> int:
        if len(columns) != len(data):
            raise BadInput(f"insert into {table}: {len(columns)} names for {len(data)} columns")
        if not data or not len(data[0]):
            return 0
        sql = f"INSERT INTO {table} ({', '.join(map(quote_identifier, columns))}) VALUES"
        with self._lock:
            try:
                return int(self._client.execute(sql, data, columnar=True) or 0)
            except Exception as exc:
                raise self._translate(exc, sql, None) from exc

    def close(self) -> None:
        with self._lock:
            self._client.disconnect()

    def _execute(
        self, sql: str, parameters: Parameters | None, *, settings: dict | None, **options: Any
    ) -> Any:
        with self._lock:
            try:
                return self._client.execute(
                    sql, dict(parameters or {}), settings=settings, **options
                )
            except Exception as exc:
                raise self._translate(exc, sql, parameters) from exc

    def _translate(self, exc: Exception, sql: str, parameters: Parameters | None) -> Exception:
        from clickhouse_driver import errors

        unreachable = errors.NetworkError | errors.SocketTimeoutError | OSError | EOFError
        if isinstance(exc, unreachable):
            return StoreUnavailable(
                f"cannot reach {self.description}: {exc}", location=_redacted(self.url)
            )
        if isinstance(exc, errors.ServerException):
            code, message = split_clickhouse_error(str(exc))
            return QueryError(message, sql=sql, parameters=parameters, code=code or exc.code)
        if isinstance(exc, errors.Error | TypeError | ValueError):
            return QueryError(str(exc), sql=sql, parameters=parameters)
        return exc

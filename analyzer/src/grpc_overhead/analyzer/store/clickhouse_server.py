"""``ClickHouseServerStore``: a ClickHouse server or cluster over the native protocol.

clickhouse-driver with ``server_side_params`` so ``{name:Type}`` placeholders
are bound by the server exactly as chDB binds them; inserts go column-wise
(``INSERT INTO t (cols) VALUES`` + ``columnar=True``). Read-only queries carry
the ``readonly=1`` setting, which the server enforces. Strings are decoded
leniently (``text.LENIENT_UTF8``): the collector's exporter stores bytes as
sent, and one span that is not UTF-8 must not break every reader.

A user's query (``user_query``) runs on a client of its own (no lock: the
store's other work goes on), with its ``QueryLimits`` as settings and a
``query_id`` by which a second client kills it when its caller goes away.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import pandas as pd

from grpc_overhead.analyzer.errors import BadInput, QueryError, StoreUnavailable
from grpc_overhead.analyzer.store.base import (
    ENGINE_SETTINGS,
    Backend,
    Columns,
    Parameters,
    Store,
    quote_identifier,
)
from grpc_overhead.analyzer.store.clickhouse_errors import split_clickhouse_error
from grpc_overhead.analyzer.store.text import LENIENT_UTF8
from grpc_overhead.analyzer.store.user_statements import Abandoned, QueryLimits
from grpc_overhead.analyzer.store.watch import watch

_SCHEMES = ("clickhouse", "clickhouses", "tcp")
#: clickhouse-driver's UNEXPECTED_PACKET_FROM_SERVER: what an HTTP port answers a native hello.
_UNEXPECTED_PACKET = 102
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
        parts = urlsplit(url)
        if parts.scheme not in _SCHEMES or not parts.hostname:
            raise BadInput(
                f"not a ClickHouse native-protocol URL: {_redacted(url)!r} "
                "(expected clickhouse://user:password@host:9000/database, or "
                "http://host:8123 for an HTTP interface)"
            )
        if parts.scheme == "tcp":
            url = "clickhouse" + url[3:]
        self.url = url
        self.description = f"ClickHouse {_redacted(url)}"
        self._lock = threading.RLock()
        self._connect_timeout = connect_timeout
        self._client = self._new_client()
        # Fail now, with a clear message, rather than at the first query.
        try:
            self._execute("SELECT 1", None, settings=None)
        except QueryError as error:
            if error.code != _UNEXPECTED_PACKET:
                raise
            port = urlsplit(url).port or 9000
            raise StoreUnavailable(
                f"{_redacted(url)} does not speak ClickHouse's native protocol "
                f"({error.message}): is {port} its HTTP port? Use http://{parts.hostname}:{port} "
                "for the HTTP interface, or the native port (9000 by default)",
                location=_redacted(url),
            ) from error

    def _new_client(self) -> Any:
        from clickhouse_driver import Client

        try:
            client = Client.from_url(self.url)
        except (ValueError, TypeError) as exc:
            raise BadInput(f"bad ClickHouse URL {_redacted(self.url)!r}: {exc}") from exc
        client.connection.connect_timeout = self._connect_timeout
        # Bind {name:Type} placeholders on the server, exactly as chDB does.
        client.client_settings["server_side_params"] = True
        client.client_settings["strings_encoding"] = LENIENT_UTF8
        return client

    def query(
        self, sql: str, parameters: Parameters | None = None, *, readonly: bool = False
    ) -> pd.DataFrame:
        settings = {"readonly": 1} if readonly else None
        rows, column_types = self._execute(
            sql, parameters, settings=settings, with_column_types=True, columnar=True
        )
        return _frame(rows, column_types)

    def user_query(
        self,
        sql: str,
        limits: QueryLimits,
        *,
        parameters: Parameters | None = None,
        abandoned: Abandoned | None = None,
        output: str | None = None,
        database: str | None = None,
    ) -> pd.DataFrame | bytes:
        if output is not None:
            raise BadInput(
                f"FORMAT {output}: over the native protocol the server sends blocks, not "
                "formatted text; drop the FORMAT clause and use --format"
            )
        query_id = f"grpc-overhead-user-query-{uuid.uuid4().hex}"
        client = self._new_client()
        if database:
            client.connection.database = database
        try:
            with watch(abandoned, lambda: self._kill(query_id)):
                rows, column_types = client.execute(
                    sql,
                    dict(parameters or {}),
                    settings=limits.settings(),
                    query_id=query_id,
                    with_column_types=True,
                    columnar=True,
                )
        except Exception as exc:
            raise self._translate(exc, sql, parameters) from exc
        finally:
            client.disconnect()
        return _frame(rows, column_types)

    def _kill(self, query_id: str) -> None:
        killer = self._new_client()
        try:
            killer.execute("KILL QUERY WHERE query_id = {id:String} ASYNC", {"id": query_id})
        finally:
            killer.disconnect()

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
                    sql,
                    dict(parameters or {}),
                    settings={**ENGINE_SETTINGS, **(settings or {})},  # readonly stays last
                    **options,
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
        if isinstance(exc, errors.Error):
            code, message = split_clickhouse_error(str(exc))
            return QueryError(message, sql=sql, parameters=parameters, code=code)
        if isinstance(exc, TypeError | ValueError):
            return QueryError(str(exc), sql=sql, parameters=parameters)
        return exc


def _frame(rows: Any, column_types: Sequence[tuple[str, str]]) -> pd.DataFrame:
    names = [name for name, _ in column_types]
    values = rows if rows else [[] for _ in names]
    frame = pd.DataFrame({name: list(column) for name, column in zip(names, values, strict=True)})
    for name, type_name in column_types:
        if type_name.startswith(("DateTime", "Nullable(DateTime")) and len(frame):
            frame[name] = pd.to_datetime(frame[name], utc=True)
    return frame

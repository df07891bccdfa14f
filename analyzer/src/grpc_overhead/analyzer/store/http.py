"""``ClickHouseHttpStore``: a store read over ClickHouse's HTTP interface (the third backend).

The way ``report``, ``sql`` and ``app`` read a chDB store that a running
``serve`` owns (serve's interface, ``http_interface``, advertised in the
store directory: ``owner``), and a way to read any ClickHouse server's
HTTP port (``http://user:password@host:8123/database``).

Results travel as ArrowStream and become DataFrames exactly as chDB's do
(``text.arrow_frame``); ``{name:Type}`` placeholders travel as
``param_name`` in ClickHouse's text form (``chdb_values.bind_parameters``),
bound by the server. A user's query runs with its ``QueryLimits`` as URL
settings and is cancelled, when its caller goes away, by closing the
connection (ClickHouse and serve's interface both kill a query whose client
hung up). A read-only store (``read_only=True``, or a server that answers
read-only, as serve's interface does) refuses ``command`` and ``insert`` here
with the READONLY code, before anything is sent.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit

import pandas as pd
import pyarrow as pa

from grpc_overhead.analyzer.errors import (
    READONLY_ERROR_CODE,
    BadInput,
    QueryError,
    StoreUnavailable,
)
from grpc_overhead.analyzer.store.base import (
    ENGINE_SETTINGS,
    SNAPSHOT_PATH,
    Backend,
    Columns,
    Parameters,
    Snapshot,
    Store,
)
from grpc_overhead.analyzer.store.chdb_values import bind_parameters
from grpc_overhead.analyzer.store.clickhouse_errors import split_clickhouse_error
from grpc_overhead.analyzer.store.text import arrow_frame
from grpc_overhead.analyzer.store.user_statements import Abandoned, QueryLimits
from grpc_overhead.analyzer.store.watch import watch
from grpc_overhead.analyzer.tls import pinned_context

HTTP_READER = Backend("clickhouse-http", owns_data=False, encoded_inserts=False, writable=False)
HTTP = Backend("clickhouse-http", owns_data=False, encoded_inserts=False)
#: Seconds to wait for an answer beyond a query's own time limit.
GRACE_S = 30.0


class ClickHouseHttpStore(Store):
    """ClickHouse's HTTP interface at ``url`` (``http://[user:password@]host:port[/database]``)."""

    def __init__(
        self,
        url: str,
        *,
        user: str | None = None,
        password: str | None = None,
        read_only: bool = False,
        description: str = "",
        timeout_s: float = QueryLimits().max_execution_time_s + GRACE_S,
        pinned_certificate: str | None = None,
    ) -> None:
        """``pinned_certificate``: over https, trust exactly this PEM file's certificates
        (a serve's own, named in its serve file), whatever name the URL holds; else the
        system's roots (``SSL_CERT_FILE``) and the URL's host name."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadInput(f"not a ClickHouse HTTP URL: {url!r} (expected http://host:8123)")
        self._https = parts.scheme == "https"
        self._tls = _tls_context(pinned_certificate) if self._https else None
        self._host = parts.hostname
        try:
            self._port = parts.port or (8443 if self._https else 8123)
        except ValueError as exc:  # a port that is no number, or above 65535
            raise BadInput(f"bad ClickHouse HTTP URL {_without_password(url)!r}: {exc}") from None
        self._database = unquote(parts.path.strip("/"))
        user = user if user is not None else unquote(parts.username or "") or None
        password = password if password is not None else unquote(parts.password or "") or None
        self._headers = {"Content-Type": "text/plain; charset=UTF-8"}
        if user or password:
            token = base64.b64encode(f"{user or 'default'}:{password or ''}".encode()).decode()
            self._headers["Authorization"] = f"Basic {token}"
        self.url = f"{parts.scheme}://{self._host}:{self._port}"
        self.backend = HTTP_READER
        self.description = description or f"ClickHouse HTTP {self.url}"
        self._timeout_s = timeout_s
        self._closed = threading.Event()
        #: Whether whatever answers is serve's interface with its snapshots (None: not asked).
        self._serves_snapshots: bool | None = None
        # Fail now, with a clear message, rather than at the first query; and ask whether
        # this user may write at all (serve's interface, a read-only ClickHouse user: no).
        try:
            found = self.query("SELECT toUInt8(getSetting('readonly')) AS readonly")
        except QueryError as error:
            if error.code is not None:
                raise
            # No ClickHouse error code: whatever answers there (a web app, Prometheus, the
            # native port's neighbour) is not ClickHouse's HTTP interface.
            raise StoreUnavailable(
                f"{self.url} does not answer as a ClickHouse HTTP interface ({error.message}): "
                "check the host and port (ClickHouse's HTTP port is 8123 by default; `serve` "
                "prints its own as 'clickhouse http:')",
                location=self.url,
            ) from error
        if not read_only and int(found["readonly"].iloc[0]) == 0:
            self.backend = HTTP

    # -- the Store contract ---------------------------------------------------------------

    def query(
        self, sql: str, parameters: Parameters | None = None, *, readonly: bool = False
    ) -> pd.DataFrame:
        settings = {"readonly": "1"} if readonly and self.backend.writable else {}
        body = self._post(sql, parameters, {"default_format": "ArrowStream", **settings})
        return _frame(body)

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
        settings = {name: str(value) for name, value in limits.settings().items()}
        if not self.backend.writable:  # serve's interface is read-only and refuses settings
            settings = {
                name: settings[name]
                for name in ("max_execution_time", "max_memory_usage", "max_result_rows")
            }
        settings["default_format"] = output or "ArrowStream"
        if database:
            settings["database"] = database
        body = self._post(sql, parameters, settings, abandoned=abandoned)
        return body if output is not None else _frame(body)

    def command(self, sql: str, parameters: Parameters | None = None) -> None:
        self._refuse_writes(sql)
        self._post(sql, parameters, {})

    def insert(self, table: str, columns: Sequence[str], data: Columns) -> int:
        self._refuse_writes(f"INSERT INTO {table}")
        raise BadInput(f"{self.description}: inserts go through the intake, not the HTTP store")

    def known_snapshot(self) -> Snapshot | None:
        """serve's snapshot of the store it owns (``SNAPSHOT_PATH``: serve runs every insert,
        so it knows); None from another ClickHouse (no such handle: ask the engine)."""
        if self._serves_snapshots is False:
            return None
        try:
            body = self._post("", None, {}, path=SNAPSHOT_PATH)
        except QueryError:  # a ClickHouse server: "There is no handle"
            self._serves_snapshots = False
            return None
        try:
            found = json.loads(body)
            taken = Snapshot(int(found["moment_ns"]), int(found["now_ns"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreUnavailable(
                f"{self.description} answered {SNAPSHOT_PATH} with {_excerpt(repr(body))}: "
                f"not a grpc-overhead serve's snapshot ({exc})",
                location=self.url,
            ) from exc
        self._serves_snapshots = True
        return taken

    def close(self) -> None:
        self._closed.set()

    # -- helpers ----------------------------------------------------------------------------

    def _refuse_writes(self, sql: str) -> None:
        if not self.backend.writable:
            raise QueryError(
                f"{self.description} is read-only: the process that owns the store writes it",
                sql=sql,
                code=READONLY_ERROR_CODE,
            )

    def _post(
        self,
        sql: str,
        parameters: Parameters | None,
        settings: dict[str, str],
        *,
        abandoned: Abandoned | None = None,
        path: str = "/",
    ) -> bytes:
        if self._closed.is_set():
            raise StoreUnavailable(f"{self.description} is closed", location=self.url)
        # A ClickHouse server takes the engine settings (before readonly); serve's read-only
        # interface refuses settings and runs its own store's.
        engine = {k: str(v) for k, v in ENGINE_SETTINGS.items()} if self.backend.writable else {}
        query = {**engine, **settings}
        if self._database and "database" not in query:
            query["database"] = self._database
        for name, value in bind_parameters(parameters).items():
            query[f"param_{name}"] = _text(value)
        connection: http.client.HTTPConnection
        if self._tls is not None:
            connection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout_s, context=self._tls
            )
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        try:
            with watch(abandoned, lambda: _hang_up(connection)):
                target = f"{path}?{urlencode(query)}"
                connection.request("POST", target, sql.encode(), self._headers)
                response = connection.getresponse()
                body = response.read()
        except (OSError, http.client.HTTPException) as exc:
            if abandoned is not None and abandoned():
                raise QueryError("the query was cancelled", sql=sql, parameters=parameters) from exc
            raise StoreUnavailable(
                f"cannot reach {self.description}: {exc}", location=self.url
            ) from exc
        finally:
            connection.close()
        if response.status != 200:
            text = body.decode("utf-8", "replace")
            code, message = split_clickhouse_error(text)
            header = response.getheader("X-ClickHouse-Exception-Code")
            if code is None and header and header.isdigit():
                code = int(header)
            if response.status in (401, 403):
                raise StoreUnavailable(
                    f"{self.description} refused the credentials: {message} (serve's "
                    "--http-user/--http-password; readers send GRPC_OVERHEAD_HTTP_USER and "
                    "GRPC_OVERHEAD_HTTP_PASSWORD)",
                    location=self.url,
                )
            if code is None:
                message = f"HTTP {response.status} {response.reason}: {_excerpt(message)}"
            raise QueryError(message, sql=sql, parameters=parameters, code=code)
        return body


def _excerpt(text: str, limit: int = 100) -> str:
    """The start of an answer that is not ClickHouse's (an HTML page), on one line."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


def _text(value: Any) -> str:
    """A bound value as the HTTP interface's ``param_`` text."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _hang_up(connection: http.client.HTTPConnection) -> None:
    """Close the socket under a waiting request: the server sees the client go and kills
    the query; the waiting thread gets an error."""
    sock = connection.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _frame(body: bytes) -> pd.DataFrame:
    if not body:
        return pd.DataFrame()
    try:
        table = pa.ipc.open_stream(body).read_all()
    except pa.ArrowInvalid as exc:
        raise QueryError(
            f"unreadable ArrowStream answer: {exc}; it starts {_excerpt(repr(body[:80]))}", sql=""
        ) from exc
    return arrow_frame(table)


def _tls_context(pinned_certificate: str | None) -> ssl.SSLContext:
    if pinned_certificate is None:
        return ssl.create_default_context()
    try:
        return pinned_context(pinned_certificate)
    except (OSError, ssl.SSLError) as error:
        raise StoreUnavailable(
            f"cannot read serve's certificate {pinned_certificate}: "
            f"{getattr(error, 'strerror', None) or error}",
            location=pinned_certificate,
        ) from None

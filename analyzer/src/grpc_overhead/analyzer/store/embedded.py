"""``ChdbStore``: the embedded backend, chDB (in-process ClickHouse 26.9) on a data directory.

chDB API used (4.4): ``chdb.connect(path)`` returns a thread-safe connection;
``query(sql, "DataFrame", params=...)`` binds ClickHouse query parameters
server-side (``{name:Type}``); ``send_insert(statement, format)`` streams bytes
in any ClickHouse input format (we use ArrowStream for ``insert`` and, in the
intake, length-delimited Protobuf). The engine releases the GIL while it works.

Two facts of chDB shape this class:

* One embedded engine per process, bound to one path: opening a second path
  in the same process fails until the first is closed.
* A data directory is owned by one process: the engine holds an exclusive
  ``flock`` on ``DIR/status`` (which records the owner's PID) and a second
  process fails with "Cannot lock file DIR/status". The engine prints that
  text to stderr and raises a bare "Error initializing EmbeddedServer"; we
  capture stderr while connecting and test the lock ourselves so the error
  can say who holds the directory.

Results travel as Arrow and become DataFrames in pyarrow (Map -> dict,
DateTime64 -> tz-aware datetime64[ns]; plain DateTime arrives as epoch
seconds, an Arrow limitation of the engine).

Read-only queries go through a second connection to the same engine opened
with ``readonly=1`` (a per-connection setting in chDB), so user SQL cannot
write even with its own SETTINGS clause: ClickHouse refuses to change
``readonly`` once it is 1.

A user's query (``user_query``) gets a connection of its own (opening one
costs about a millisecond), with its ``QueryLimits`` and ``readonly=1`` as
connection settings and a ``log_comment`` tag; it takes no lock, so it runs
beside the intake and the pages, and a watcher kills it by that tag
(``KILL QUERY``, from yet another connection) once its caller has gone.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlencode

import pandas as pd
import pyarrow as pa

from grpc_overhead.analyzer.errors import (
    BadInput,
    QueryError,
    StoreLocked,
    StoreUnavailable,
)
from grpc_overhead.analyzer.store.base import (
    ENGINE_SETTINGS,
    Backend,
    Columns,
    Parameters,
    Snapshot,
    Store,
    quote_identifier,
)
from grpc_overhead.analyzer.store.chdb_values import arrow_type, bind_parameters
from grpc_overhead.analyzer.store.clickhouse_errors import split_clickhouse_error
from grpc_overhead.analyzer.store.in_flight import InsertsInFlight
from grpc_overhead.analyzer.store.lock import check_free, lock_holder, locked_message
from grpc_overhead.analyzer.store.text import arrow_frame
from grpc_overhead.analyzer.store.user_statements import Abandoned, QueryLimits
from grpc_overhead.analyzer.store.watch import watch

CHDB = Backend("chdb", owns_data=True, encoded_inserts=True)
#: Output "formats" chDB's Python layer makes objects of (any case), not ClickHouse formats:
#: asked for by a user (``FORMAT DataFrame``, ``default_format=ArrowTable``) they are unknown.
_PYTHON_FORMATS = frozenset({"dataframe", "arrowtable", "datastore"})
#: ClickHouse's UNKNOWN_FORMAT.
_UNKNOWN_FORMAT = 73


class ChdbStore(Store):
    """chDB on ``directory`` (created if missing). One per process at a time."""

    backend = CHDB

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = os.path.abspath(os.fspath(directory))
        self.description = f"chDB {self.directory}"
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(
                f"cannot create store directory {self.directory}: {exc.strerror}",
                location=self.directory,
            ) from exc
        # Ask the lock first: a clear message without starting an engine that cannot own it.
        check_free(self.directory)
        self._lock = threading.RLock()
        self._conn = self._connect(self.directory)
        self._readonly_conn: Any = None
        self._column_types: dict[str, dict[str, str]] = {}
        self._sessions: list[ChdbStore] = []
        #: Shared with its sessions: every span insert into this engine runs in this process.
        self._in_flight = InsertsInFlight()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._lock:  # an RLock: the statements inside take it again freely
            yield

    def storing_spans(self) -> contextlib.AbstractContextManager[None]:
        return self._in_flight.inserting()

    def known_snapshot(self) -> Snapshot:
        return self._in_flight.snapshot()

    def session(self) -> ChdbStore:
        """Another connection to this engine (see ``Store.session``)."""
        with self._lock:
            self._open_connection()
            # The store's current database (a later ``USE`` on it is not followed).
            database = self.database
            target = self.directory
            if database != "default":
                target += "?" + urlencode({"database": database})
            session = ChdbSession(self, self._connect(target))
            self._sessions.append(session)
            return session

    def close_session(self, session: Store) -> None:
        with self._lock:
            if session in self._sessions:
                self._sessions.remove(session)
        if session is not self:
            session.close()

    # -- connecting ---------------------------------------------------------

    def _connect(self, connection_string: str) -> Any:
        import chdb

        # The engine settings first: a ``readonly=1`` after them would refuse any change.
        path, _, settings = connection_string.partition("?")
        connection_string = f"{path}?{urlencode(ENGINE_SETTINGS)}" + (
            f"&{settings}" if settings else ""
        )
        with _captured_stderr() as captured:
            try:
                return chdb.connect(connection_string)
            except Exception as exc:  # chDB raises a bare RuntimeError here
                failure = exc
                engine_output = captured.read()
        raise self._open_error(str(failure), engine_output) from failure

    def _open_error(self, error_text: str, engine_output: str) -> StoreUnavailable:
        holder = lock_holder(self.directory)
        if holder is not None or "Cannot lock file" in engine_output:
            pid, started = holder or (None, "")
            return StoreLocked(
                locked_message(self.directory, pid, started, engine_output),
                location=self.directory,
                holder_pid=pid,
            )
        if "already initialized with path" in error_text:
            return StoreUnavailable(
                f"cannot open chDB store {self.directory}: this process already has "
                f"another chDB store open, and chDB runs one per process "
                f"({split_clickhouse_error(error_text)[1]})",
                location=self.directory,
            )
        detail = engine_output.strip() or split_clickhouse_error(error_text)[1]
        return StoreUnavailable(
            f"cannot open chDB store {self.directory}: {detail}", location=self.directory
        )

    def _readonly(self) -> Any:
        if self._readonly_conn is None:
            self._readonly_conn = self._connect(f"{self.directory}?readonly=1")
        return self._readonly_conn

    # -- the Store contract --------------------------------------------------

    def query(
        self, sql: str, parameters: Parameters | None = None, *, readonly: bool = False
    ) -> pd.DataFrame:
        with self._lock:
            conn = self._open_connection()
            if readonly:
                conn = self._readonly()
            try:
                table = conn.query(sql, "ArrowTable", params=bind_parameters(parameters))
            except Exception as exc:
                raise self._query_error(exc, sql, parameters) from exc
        return _frame(table)

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
        if output is not None and output.lower() in _PYTHON_FORMATS:
            raise QueryError(
                f"Unknown format {output}. (UNKNOWN_FORMAT)", sql=sql, code=_UNKNOWN_FORMAT
            )
        tag = f"grpc-overhead-user-query-{uuid.uuid4().hex}"
        with self._lock:
            self._open_connection()
            database = database or self.database
        settings: dict[str, Any] = {"log_comment": tag, **limits.settings()}
        if database != "default":
            settings = {"database": database, **settings}
        conn = self._connect(f"{self.directory}?{urlencode(settings)}")
        try:
            with watch(abandoned, lambda: self._kill(tag)):
                if output is not None:
                    return bytes(
                        conn.query(sql, output, params=bind_parameters(parameters)).bytes()
                    )
                table = conn.query(sql, "ArrowTable", params=bind_parameters(parameters))
        except Exception as exc:
            raise self._query_error(exc, sql, parameters) from exc
        finally:
            with contextlib.suppress(Exception):
                conn.close()
        return _frame(table)

    def command(self, sql: str, parameters: Parameters | None = None) -> None:
        with self._lock:
            conn = self._open_connection()
            try:
                conn.query(sql, "TSV", params=bind_parameters(parameters))
            except Exception as exc:
                raise self._query_error(exc, sql, parameters) from exc

    def insert(self, table: str, columns: Sequence[str], data: Columns) -> int:
        if len(columns) != len(data):
            raise BadInput(f"insert into {table}: {len(columns)} names for {len(data)} columns")
        types = self._table_types(table)
        arrays = []
        for name, values in zip(columns, data, strict=True):
            if name not in types:
                raise BadInput(f"insert into {table}: no column {name!r}")
            try:
                arrays.append(pa.array(values, type=arrow_type(types[name])))
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                raise BadInput(f"insert into {table}: column {name}: {exc}") from exc
        batch = pa.RecordBatch.from_arrays(arrays, names=list(columns))
        if batch.num_rows == 0:
            return 0
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write_batch(batch)
        statement = f"INSERT INTO {table} ({', '.join(map(quote_identifier, columns))})"
        return self.insert_encoded(statement, "ArrowStream", sink.getvalue().to_pybytes())

    def insert_encoded(
        self,
        statement: str,
        input_format: str,
        payload: bytes | Sequence[bytes],
        settings: str = "",
    ) -> int:
        sql = f"{statement} SETTINGS {settings}" if settings else statement
        chunks = [payload] if isinstance(payload, bytes) else payload
        with self._lock:
            conn = self._open_connection()
            try:
                inserter = conn.send_insert(sql, input_format)
            except Exception as exc:
                raise self._query_error(exc, sql, None) from exc
            try:
                for chunk in chunks:
                    inserter.append(chunk)
                result = inserter.finish()
            except Exception as exc:
                with contextlib.suppress(Exception):
                    inserter.cancel()
                raise self._query_error(exc, sql, None) from exc
            return int(result.rows_written)

    def register_function(
        self,
        name: str,
        function: Callable[..., str],
        argument_types: Sequence[str],
        return_type: str,
    ) -> None:
        """chDB's in-process UDF: one registry for the whole process, so replacing a
        function of the same name (a second store, a restarted intake) is idempotent."""
        import chdb

        with contextlib.suppress(Exception):  # not registered yet
            chdb.drop_function(name)
        chdb.create_function(name, function, list(argument_types), return_type)

    def _kill(self, tag: str) -> None:
        """KILL the user query tagged ``tag``, from a connection of its own (no lock)."""
        killer = self._connect(self.directory)
        try:
            killer.query(
                "KILL QUERY WHERE Settings['log_comment'] = {tag:String} ASYNC",
                "CSV",
                params={"tag": tag},
            )
        finally:
            killer.close()

    def close(self) -> None:
        with self._lock:
            # Sessions and the read-only connection share the engine: close them first.
            sessions, self._sessions = self._sessions, []
            for session in sessions:
                session.close()
            for attribute in ("_readonly_conn", "_conn"):
                conn = getattr(self, attribute, None)
                if conn is not None:
                    setattr(self, attribute, None)
                    with contextlib.suppress(Exception):
                        conn.close()

    # -- helpers -------------------------------------------------------------

    def _open_connection(self) -> Any:
        if self._conn is None:
            raise StoreUnavailable(f"store {self.directory} is closed", location=self.directory)
        return self._conn

    def _table_types(self, table: str) -> dict[str, str]:
        if table not in self._column_types:
            described = self.query(f"DESCRIBE TABLE {table}")
            self._column_types[table] = dict(zip(described["name"], described["type"], strict=True))
        return self._column_types[table]

    @staticmethod
    def _query_error(exc: Exception, sql: str, parameters: Parameters | None) -> QueryError:
        text = str(exc)
        for prefix in ("Streaming insert append failed: ", "Streaming insert finish failed: "):
            text = text.removeprefix(prefix)
        code, message = split_clickhouse_error(text)
        return QueryError(message, sql=sql, parameters=parameters, code=code)


def _frame(table: pa.Table) -> pd.DataFrame:
    # Not chDB's own "DataFrame" output: in 4.4 it crashes the process on
    # Array(Map(...)) columns spanning several rows (Events.Attributes).
    return arrow_frame(table)


class ChdbSession(ChdbStore):
    """One more connection to the engine a ``ChdbStore`` opened (``ChdbStore.session``).

    The directory is already ours, so nothing is created or lock-checked; the
    session has its own lock, temporary tables and statement stream.
    """

    def __init__(self, store: ChdbStore, connection: Any) -> None:
        self.directory = store.directory
        self.description = f"{store.description} (session)"
        self._lock = threading.RLock()
        self._conn = connection
        self._readonly_conn = None
        self._column_types = {}
        self._sessions = []
        self._in_flight = store._in_flight


@contextlib.contextmanager
def _captured_stderr() -> Iterator[Any]:
    """Redirect fd 2 into a temp file while the engine starts (it prints there)."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            saved = os.dup(2)
        except OSError:
            yield _Captured(None)
            return
        try:
            os.dup2(sink.fileno(), 2)
            yield _Captured(sink)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


class _Captured:
    def __init__(self, sink: Any) -> None:
        self._sink = sink

    def read(self) -> str:
        if self._sink is None:
            return ""
        self._sink.seek(0)
        return self._sink.read().decode("utf-8", "replace")

"""The store contract: what the rest of the analyzer may ask of a store.

A store runs ClickHouse SQL, the way an httpx transport sends requests: a few
methods, and whatever differs between backends stays behind them. Three
backends implement it, chDB (embedded, ``ChdbStore``), a ClickHouse server
(``ClickHouseServerStore``) and ClickHouse's HTTP interface
(``ClickHouseHttpStore``: how other processes read a store ``serve`` owns);
the SQL is the same on all three, values are always bound as ClickHouse
query parameters (``{name:Type}`` placeholders), never formatted into the text.

    Store
    ├── query(sql, parameters, *, readonly)   rows, as a DataFrame
    ├── user_query(sql, limits, ...)          a user's statement under QueryLimits,
    │                                         engine-enforced, killed when abandoned
    ├── command(sql, parameters)              effect only (DDL, INSERT ... SELECT)
    ├── insert(table, columns, data)          column-oriented rows
    ├── insert_encoded(statement, format, payload)   bytes in an input format
    ├── session() / close_session(s)          a handle for one worker thread
    ├── exclusive()                           statements that must look like one
    ├── storing_spans()                       held around an INSERT of spans
    ├── known_snapshot()                      up to when every stored span is visible,
    │                                         where the process knows it (else None)
    ├── close()
    └── backend                               what the backend is, as data:
        ├── owns_data                         this process alone writes and settles it
        ├── encoded_inserts                   insert_encoded works (else use insert)
        └── writable                          statements may change it (not a reader's)

Callers read ``backend`` instead of checking classes, and ``open_store`` is
the only code that names a backend. Per-query limits are part of the contract
(``QueryLimits``, taken by ``user_query``; what a user's statement may be and take lives
in ``user_statements``, the engine's error text in ``clickhouse_errors``); per-call
options are keyword-only, so the next one joins without moving anything.
``table_exists`` is the one way to ask whether a table is there.

Value conventions for ``insert`` (column-oriented): ``DateTime64`` values are
integer nanoseconds since the Unix epoch (UTC), ``Map`` values are dicts,
``Array`` values are lists, ``Nested`` columns are passed as their flattened
``Name.Field`` array columns.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import pandas as pd

from grpc_overhead.analyzer.store.user_statements import (
    Abandoned,
    QueryLimits,
    check_user_statement,
)

Parameters = Mapping[str, Any]


class EncodedValue(str):
    """A parameter value already in ClickHouse's text form, passed to the engine as is.

    The HTTP interface receives ``param_x`` values escaped by the client the way
    ClickHouse parses them; escaping them again would change them.
    """


Columns = Sequence[Sequence[Any]]


@dataclass(frozen=True)
class Backend:
    """What kind of store this is, as data: callers read it instead of ``isinstance``."""

    name: str
    #: This process alone writes the data and settles its rollups: a chDB directory is
    #: owned by one process (the engine's lock). A server is shared with other writers
    #: (the collector's clickhouse exporter), so settling is left to them.
    owns_data: bool
    #: ``insert_encoded`` takes bytes in a ClickHouse input format (chDB streams them to
    #: the engine); otherwise it refuses and rows go through ``insert``.
    encoded_inserts: bool
    #: Statements that change data or schema may run (``command``, ``insert``). False for
    #: a store read through another process (``serve``'s HTTP interface): the owner writes
    #: it, and prepares it (``create_call_tables``, rollups) itself.
    writable: bool = True


#: Settings every connection runs with, on every backend, set before ``readonly``.
#: ``optimize_and_compare_chain`` (on by default) adds to each AND chain the comparisons
#: it implies; over the phase expressions (hundreds of ANDed comparisons above the
#: merged-calls subqueries) it was two thirds of the engine's query analysis, the
#: Overview's 3.2 s on a store of 3 calls down to 1.2 s without it. Our filters gain
#: nothing from it: their bounds are bound values, compared once.
#: ``optimize_syntax_fuse_functions`` (on by default) fuses sums, counts and averages of
#: one argument into one ``sumCount``; its pass grows faster than linearly with the
#: aggregates of a query, and the phase breakdown has 120 of them over a subquery that
#: aggregates too: 1.7 s of analysis for a run of 25 calls, 0.6-1.0 s without it, the
#: same answers (the functions it would fuse read columns already in memory).
ENGINE_SETTINGS: dict[str, int] = {
    "optimize_and_compare_chain": 0,
    "optimize_syntax_fuse_functions": 0,
}


#: Where serve's HTTP interface answers its store's snapshot (JSON ``moment_ns``, ``now_ns``),
#: for readers in other processes (``ClickHouseHttpStore.known_snapshot``).
SNAPSHOT_PATH = "/grpc-overhead/snapshot"
#: The database a ``{database:String}`` parameter names, or the current one when it is
#: empty: how a query of ``system.tables`` or ``system.parts`` follows ``--database``.
NAMED_OR_CURRENT_DATABASE = "if({database:String} = '', currentDatabase(), {database:String})"


@dataclass(frozen=True)
class Snapshot:
    """The moment a report or a page reads the store as of (``analyzer.snapshot``):
    ``moment_ns``, every half row stamped up to it is visible; ``now_ns``, the engine's clock
    when it was taken (the two differ while an INSERT of spans was committing). Unix ns."""

    moment_ns: int
    now_ns: int


class Store(abc.ABC):
    """One ClickHouse-speaking store. Thread-safe; use as a context manager."""

    #: Human-readable location for logs and the ``store: ...`` line of ``serve``.
    description: str = ""
    #: What this backend is and can do (see ``Backend``).
    backend: Backend

    @abc.abstractmethod
    def query(
        self, sql: str, parameters: Parameters | None = None, *, readonly: bool = False
    ) -> pd.DataFrame:
        """Run a statement that returns rows. ``readonly=True`` refuses writes and DDL."""

    @abc.abstractmethod
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
        """Run a user's statement read-only under ``limits``, beside the store's own work.

        It never waits for (or holds up) the intake, the pages' queries or
        rollups, and it is killed once ``abandoned()`` turns True. ``output``:
        the engine renders the result in that ClickHouse format and the bytes
        are returned (a statement's own ``FORMAT`` clause); None: a DataFrame.
        ``database``: where unqualified names resolve (None: the store's own).
        Call ``check_user_statement`` first.
        """

    def check_user_statement(self, sql: str) -> str:
        """The statement as the engine formats it; QueryError unless it only reads (the
        policy: ``user_statements.check_user_statement``)."""
        return check_user_statement(self, sql)

    @abc.abstractmethod
    def command(self, sql: str, parameters: Parameters | None = None) -> None:
        """Run a statement for its effect (DDL, INSERT ... SELECT, TRUNCATE)."""

    @abc.abstractmethod
    def insert(self, table: str, columns: Sequence[str], data: Columns) -> int:
        """Insert column-oriented ``data`` (one sequence per name in ``columns``).

        Returns the number of rows inserted.
        """

    def insert_encoded(
        self,
        statement: str,
        input_format: str,
        payload: bytes | Sequence[bytes],
        settings: str = "",
    ) -> int:
        """Insert bytes already encoded in a ClickHouse input format.

        ``statement`` is ``INSERT INTO t (cols)`` without FORMAT; ``settings``
        (``k=v, k2=v2``) go into its SETTINGS clause. ``payload`` may be a
        sequence of chunks, streamed in order as one input (no concatenated
        copy is made). Only backends with ``backend.encoded_inserts`` take it;
        it returns rows written.
        """
        raise NotImplementedError(f"{type(self).__name__} does not take encoded inserts")

    def register_function(
        self,
        name: str,
        function: Callable[..., str],
        argument_types: Sequence[str],
        return_type: str,
    ) -> None:
        """Make a Python ``function`` callable from this store's SQL as ``name`` (replacing
        one of that name). Only backends with ``backend.encoded_inserts`` (an engine in this
        process) take it: the intake's in-engine mapping calls one for rare values."""
        raise NotImplementedError(f"{type(self).__name__} does not take Python functions")

    @property
    def database(self) -> str:
        """The connection's current database: where unqualified names resolve.

        A ClickHouse URL's path (``clickhouse://host:9000/otel`` -> ``otel``),
        ``default`` otherwise. Asked of the store, not parsed, so it is what
        ``report`` and ``sql`` will read; ``SchemaOptions.for_store`` makes
        the intake write there too.
        """
        frame = self.query("SELECT currentDatabase() AS db")
        return str(frame["db"].iloc[0])

    def exclusive(self) -> contextlib.AbstractContextManager[None]:
        """Hold the store for a few statements that must look like one (rollup rewrites).

        On chDB every other user of the store's connection waits meanwhile
        (sessions do not); a ClickHouse server has no such lock, so there
        this is a no-op and the statements are only as atomic as ClickHouse.
        """
        return contextlib.nullcontext()

    def storing_spans(self) -> contextlib.AbstractContextManager[None]:
        """Held around a statement that stores spans. The rows it gives ``grpc_calls`` are
        stamped with the engine's clock when it starts and visible once it returns; a store
        that knows its inserts (``known_snapshot``) notes it, so snapshots stop before it."""
        return contextlib.nullcontext()

    def known_snapshot(self) -> Snapshot | None:
        """The store's snapshot where this process knows it exactly (an embedded engine runs
        every insert in it; serve's HTTP interface asks serve); None: ask the engine
        (``analyzer.snapshot``)."""
        return None

    def session(self) -> Store:
        """A handle for one worker thread that may run next to the store's other work.

        On chDB a separate connection to the same engine: its own temporary
        tables, and its statements run concurrently with other sessions' (the
        store's own connection serializes everything behind one lock, so an
        intake worker sharing it would wait for every report and rollup).
        Close it when done; closing the store closes its sessions. Stores
        without the notion return themselves (and ignore ``close_session``).
        """
        return self

    def close_session(self, session: Store) -> None:
        """Release a handle from ``session``; the store itself is never closed here."""
        if session is not self:
            session.close()

    @abc.abstractmethod
    def close(self) -> None:
        """Release the store; idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.description}>"


def table_exists(store: Store, name: str, database: str = "") -> bool:
    """Whether ``database.name`` exists (``database`` empty: the store's current one)."""
    found = store.query(
        f"SELECT count() AS n FROM system.tables WHERE database = {NAMED_OR_CURRENT_DATABASE} "
        "AND name = {name:String}",
        {"database": database, "name": name},
    )
    return bool(int(found["n"].iloc[0]))


def any_row(
    store: Store,
    table: str,
    condition: str = "",
    parameters: Parameters | None = None,
    *,
    prewhere: bool = False,
    readonly: bool = True,
) -> bool:
    """Whether ``table`` holds a row matching ``condition``: the engine stops at the first
    one (``LIMIT 1``) where ``count()`` would read the whole table. ``prewhere`` reads the
    condition's columns first, for a condition on a few columns of a wide table.
    ``readonly=False`` keeps a writer's check on its own connection (the embedded
    backend's read-only one is a second connection)."""
    clause = f" {'PREWHERE' if prewhere else 'WHERE'} {condition}" if condition else ""
    found = store.query(
        f"SELECT count() AS n FROM (SELECT 1 FROM {table}{clause} LIMIT 1)",
        parameters,
        readonly=readonly,
    )
    return bool(int(found["n"].iloc[0]))


def quote_identifier(name: str) -> str:
    """Backquote a ClickHouse identifier (``Events.Timestamp`` stays one name)."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"

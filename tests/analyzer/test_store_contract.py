"""The store contract's backend-neutral parts: backend properties, sessions, table existence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpc_overhead.analyzer.errors import StoreUnavailable
from grpc_overhead.analyzer.store import (
    ChdbStore,
    ClickHouseServerStore,
    check_free,
    table_exists,
)
from grpc_overhead.analyzer.store.base import ENGINE_SETTINGS
from grpc_overhead.analyzer.store.embedded import ChdbSession
from grpc_overhead.analyzer.store.user_statements import QueryLimits

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChdbStore]:
    with ChdbStore(tmp_path_factory.mktemp("contract")) as opened:
        opened.command("CREATE DATABASE IF NOT EXISTS other")
        opened.command("CREATE TABLE other.kept (id UInt64) ENGINE = MergeTree ORDER BY id")
        opened.command("CREATE TABLE here (id UInt64) ENGINE = MergeTree ORDER BY id")
        yield opened


def test_backends_say_what_callers_branch_on() -> None:
    # Callers read these instead of isinstance checks (report/app settle only owned stores,
    # the intake streams encoded inserts only where the backend takes them).
    assert (ChdbStore.backend.owns_data, ChdbStore.backend.encoded_inserts) == (True, True)
    server = ClickHouseServerStore.backend
    assert (server.owns_data, server.encoded_inserts) == (False, False)
    assert ChdbStore.backend.name != server.name


def test_one_table_existence_helper(store: ChdbStore) -> None:
    assert table_exists(store, "here")
    assert not table_exists(store, "kept")  # current database is default
    assert table_exists(store, "kept", "other")
    assert not table_exists(store, "here", "other")
    assert not table_exists(store, "it's `odd`", "other")  # bound, never formatted


def test_every_connection_runs_with_the_engine_settings(store: ChdbStore) -> None:
    # Set on each connection before readonly: the store's own, its read-only one, a
    # session and a user's query (which ends in readonly=1, so no query could set them).
    reads = " , ".join(f"getSetting('{name}') AS `{name}`" for name in ENGINE_SETTINGS)
    session = store.session()
    try:
        found = [
            store.query(f"SELECT {reads}"),
            store.query(f"SELECT {reads}", readonly=True),
            session.query(f"SELECT {reads}"),
            store.user_query(f"SELECT {reads}", QueryLimits()),
        ]
    finally:
        store.close_session(session)
    for frame in found:
        assert {name: int(frame[name].iloc[0]) for name in ENGINE_SETTINGS} == ENGINE_SETTINGS
    limited = store.user_query("SELECT getSetting('readonly') AS r", QueryLimits())
    assert int(limited["r"].iloc[0]) == 1  # still read-only after them


def test_session_is_a_second_connection_closed_with_the_store(store: ChdbStore) -> None:
    session = store.session()
    try:
        assert isinstance(session, ChdbSession) and session.backend == store.backend
        session.command("INSERT INTO here VALUES (7)")
        assert store.query("SELECT count() AS n FROM here WHERE id = 7")["n"].iloc[0] == 1
    finally:
        store.close_session(session)
    with pytest.raises(StoreUnavailable, match="closed"):
        session.query("SELECT 1")
    assert store.query("SELECT 1 AS one")["one"].iloc[0] == 1  # the store itself stays open


def test_own_engine_is_free_another_process_is_named(store: ChdbStore, tmp_path: Path) -> None:
    check_free(store.directory)  # this process's own engine does not count
    check_free(tmp_path / "never-opened")  # no status file: free
    script = textwrap.dedent(
        f"""
        from grpc_overhead.analyzer.errors import StoreLocked
        from grpc_overhead.analyzer.store import check_free
        try:
            check_free({store.directory!r})
        except StoreLocked as error:
            print("PID", error.holder_pid)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert f"PID {os.getpid()}" in result.stdout

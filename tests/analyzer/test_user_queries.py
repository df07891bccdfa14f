"""User queries: read-only and limited by the engine, beside the store's own work.

Issue 10: the SQL console could ``KILL QUERY`` the intake's inserts, had no
time or memory limit, could not lower one, kept running after its caller left
and held the lock every page waits for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpc_overhead.analyzer.errors import BadInput, QueryError
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.store.user_statements import QueryLimits
from grpc_overhead.cli import sql as sql_command

pytestmark = pytest.mark.e2e

ENDLESS = "SELECT count() FROM numbers(1000000000000000)"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "store") as opened:
        opened.command("CREATE TABLE t (s String) ENGINE = MergeTree ORDER BY s")
        opened.command("INSERT INTO t VALUES ('a'), ('b'), ('c')")
        yield opened


@pytest.mark.parametrize(
    "statement",
    [
        "KILL QUERY WHERE 1",
        "KILL QUERY WHERE query_id = 'x' SYNC",
        "SYSTEM FLUSH LOGS",
        "INSERT INTO t VALUES ('d')",
        "SELECT 1 SETTINGS max_execution_time = 1000",
        "SELECT 1 SETTINGS readonly = 0",
    ],
)
def test_kill_system_writes_and_settings_are_refused(store: Store, statement: str) -> None:
    with pytest.raises(QueryError) as refused:
        store.check_user_statement(statement)
        store.user_query(statement, QueryLimits())
    assert refused.value.is_readonly_refusal
    assert store.query("SELECT count() AS n FROM t")["n"][0] == 3


def test_output_files_are_refused(store: Store, tmp_path: Path) -> None:
    """chDB writes INTO OUTFILE even under readonly=1: refused before it runs."""
    target = tmp_path / "written.txt"
    for statement in (f"SELECT 1 INTO OUTFILE '{target}'", f"SHOW TABLES INTO OUTFILE '{target}'"):
        with pytest.raises(QueryError) as refused:
            store.check_user_statement(statement)
        assert refused.value.is_readonly_refusal and "OUTFILE" in refused.value.message
    assert not target.exists()


def test_limits_are_enforced_by_the_engine(store: Store) -> None:
    with pytest.raises(QueryError, match=r"TIMEOUT_EXCEEDED|Timeout exceeded"):
        store.user_query(ENDLESS, QueryLimits().lowered(max_execution_time_s=0.5))
    with pytest.raises(QueryError, match="max rows"):
        store.user_query("SELECT * FROM t", QueryLimits().lowered(max_result_rows=2))
    with pytest.raises(QueryError, match=r"MEMORY_LIMIT_EXCEEDED|memory limit"):
        store.user_query(
            "SELECT groupArray(number) FROM numbers(10000000)",
            QueryLimits().lowered(max_memory_bytes=10 << 20),
        )
    frame = store.user_query(
        "SELECT getSetting('max_execution_time') AS t, getSetting('readonly') AS r",
        QueryLimits(),
    )
    assert frame.values.tolist() == [[QueryLimits().max_execution_time_s, 1]]


def test_limits_can_be_lowered_never_raised() -> None:
    ceiling = QueryLimits()
    assert ceiling.lowered(max_result_rows=10).max_result_rows == 10
    for name, value in [("max_execution_time_s", 1e6), ("max_memory_bytes", 0)]:
        with pytest.raises(BadInput):
            ceiling.lowered(**{name: value})


def test_an_abandoned_query_is_killed(store: Store) -> None:
    gone = threading.Event()
    threading.Timer(0.5, gone.set).start()
    with pytest.raises(QueryError, match=r"cancelled|CANCELLED"):
        store.user_query(ENDLESS, QueryLimits(), abandoned=gone.is_set)


def test_a_user_query_does_not_hold_up_the_store(store: Store) -> None:
    """While an endless user query runs, the store's own queries and inserts go on."""
    outcome: list[BaseException] = []

    def endless() -> None:
        try:
            store.user_query(ENDLESS, QueryLimits().lowered(max_execution_time_s=15))
        except QueryError as error:
            outcome.append(error)

    runner = threading.Thread(target=endless)
    runner.start()
    try:
        time.sleep(0.3)
        store.command("INSERT INTO t VALUES ('d')")
        assert store.query("SELECT count() AS n FROM t", readonly=True)["n"][0] == 4
        assert runner.is_alive()
    finally:
        runner.join()
    assert outcome and "TIMEOUT" in str(outcome[0]).upper()


def test_sql_command_kills_nothing_and_honours_format_clauses(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    directory = str(tmp_path / "store")
    with open_store(directory) as store:
        store.command("CREATE TABLE t (s String, n UInt8) ENGINE = MergeTree ORDER BY s")
        store.command("INSERT INTO t VALUES ('a', 1)")
    assert sql_command.main(["SELECT s, n FROM t FORMAT Vertical", "--store", directory]) == 0
    assert capsys.readouterr().out == "Row 1:\n──────\ns: a\nn: 1\n"
    assert sql_command.main(["KILL QUERY WHERE 1", "--store", directory]) == 1
    assert "KILL statements are refused" in capsys.readouterr().err
    assert sql_command.main(["SELECT 1 SETTINGS max_threads = 1", "--store", directory]) == 1
    assert "--max-seconds" in capsys.readouterr().err
    assert sql_command.main([ENDLESS, "--store", directory, "--max-seconds", "0.5"]) == 1
    assert "Timeout exceeded" in capsys.readouterr().err
    assert sql_command.main(["SELECT 1", "--store", directory, "--max-seconds", "1e9"]) == 2

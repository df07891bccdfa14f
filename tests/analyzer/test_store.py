"""The store contract on a real chDB directory, and the errors at its edges."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grpc_overhead.analyzer.errors import (
    AnalyzerError,
    BadInput,
    QueryError,
    StoreLocked,
    StoreUnavailable,
)
from grpc_overhead.analyzer.store import ChdbStore, open_store
from grpc_overhead.analyzer.store.clickhouse_errors import split_clickhouse_error

pytestmark = pytest.mark.e2e

TABLE = (
    "CREATE TABLE t (id UInt64, name String, at DateTime64(9), tags Map(LowCardinality(String), "
    "String), times Array(DateTime64(9))) ENGINE = MergeTree ORDER BY id"
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChdbStore]:
    with ChdbStore(tmp_path_factory.mktemp("store")) as opened:
        opened.command(TABLE)
        opened.insert(
            "t",
            ["id", "name", "at", "tags", "times"],
            [
                [1, 2, 3],
                ["plain", "it's\ttabbed\\", "ünï"],
                [1_790_000_000_123_456_789, 0, 5],
                [{"b": "2", "a": "1"}, {}, {"k": "v"}],
                [[1, 2], [], [3]],
            ],
        )
        yield opened


def test_parameters_are_bound_not_formatted(store: ChdbStore) -> None:
    tricky = "it's\ttabbed\\"
    found = store.query("SELECT id FROM t WHERE name = {name:String}", {"name": tricky})
    assert list(found["id"]) == [2]
    found = store.query(
        "SELECT id FROM t WHERE name IN {names:Array(String)} ORDER BY id",
        {"names": [tricky, "ünï", "x' OR 1=1 --"]},
    )
    assert list(found["id"]) == [2, 3]
    echoed = store.query("SELECT {s:String} AS s, {n:UInt64} + 1 AS n", {"s": "a\nb'c", "n": 41})
    assert (echoed["s"][0], int(echoed["n"][0])) == ("a\nb'c", 42)


def test_inserted_values_read_back(store: ChdbStore) -> None:
    row = store.query(
        "SELECT toUnixTimestamp64Nano(at) AS ns, tags, "
        "arrayMap(x -> toUnixTimestamp64Nano(x), times) AS times_ns FROM t WHERE id = 1"
    ).iloc[0]
    assert int(row["ns"]) == 1_790_000_000_123_456_789
    assert row["tags"] == {"a": "1", "b": "2"} or row["tags"] == {"b": "2", "a": "1"}
    assert list(row["times_ns"]) == [1, 2]
    frame = store.query("SELECT at, times FROM t ORDER BY id")
    assert str(frame["at"].dtype).startswith("datetime64[ns")


def test_readonly_refuses_writes_even_with_a_settings_clause(store: ChdbStore) -> None:
    for sql in (
        "INSERT INTO t (id) VALUES (9)",
        "DROP TABLE t",
        "SELECT 1 SETTINGS readonly = 0",
    ):
        with pytest.raises(QueryError) as raised:
            store.query(sql, readonly=True)
        assert raised.value.is_readonly_refusal, sql
        assert raised.value.sql == sql
    assert int(store.query("SELECT count() AS n FROM t", readonly=True)["n"][0]) == 3


def test_query_errors_carry_code_sql_and_parameters(store: ChdbStore) -> None:
    with pytest.raises(QueryError) as raised:
        store.query("SELEC {x:UInt8}", {"x": 1})
    error = raised.value
    assert error.is_syntax_error and error.code == 62
    assert error.sql == "SELEC {x:UInt8}" and error.parameters == {"x": 1}
    assert "Syntax error" in str(error) and "version" not in str(error)
    with pytest.raises(QueryError) as raised:
        store.query("SELECT * FROM no_such_table")
    assert "no_such_table" in str(raised.value)


def test_bad_insert_input_is_bad_input(store: ChdbStore) -> None:
    with pytest.raises(BadInput):
        store.insert("t", ["id", "nope"], [[1], [2]])
    with pytest.raises(BadInput):
        store.insert("t", ["id"], [["not a number"]])


def test_second_process_gets_a_lock_message_naming_this_one(store: ChdbStore) -> None:
    script = textwrap.dedent(
        f"""
        from grpc_overhead.analyzer.errors import StoreLocked
        from grpc_overhead.analyzer.store import open_store
        try:
            open_store({store.directory!r})
        except StoreLocked as error:
            print("PID", error.holder_pid)
            print(error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert f"PID {os.getpid()}" in result.stdout
    assert "Cannot lock file" in result.stdout and f"{store.directory}/status" in result.stdout
    # No promise of an option that does not exist: readers go through a serve's HTTP
    # interface, which this process does not offer.
    assert "against the running" not in result.stdout
    assert "does not offer one" in result.stdout and "Stop it and retry" in result.stdout
    assert "Traceback" not in result.stderr


def test_one_chdb_store_per_process(store: ChdbStore, tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable) as raised:
        open_store(tmp_path / "other")
    assert "one per process" in str(raised.value)
    assert not isinstance(raised.value, StoreLocked)


@pytest.mark.unit
def test_open_store_arguments() -> None:
    with pytest.raises(BadInput):
        open_store("dir", "clickhouse://localhost:9000/db")
    with pytest.raises(BadInput):
        open_store(None, "mysql://localhost:3306")
    # http(s) is ClickHouse's HTTP interface (a serve's, or a server's): reachable or not.
    with pytest.raises(StoreUnavailable) as raised:
        open_store(None, "http://user:secret@127.0.0.1:9/otel")
    assert "127.0.0.1:9" in str(raised.value) and "secret" not in str(raised.value)


@pytest.mark.unit
def test_unreachable_server_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable) as raised:
        open_store(None, "clickhouse://user:secret@127.0.0.1:9/otel")
    message = str(raised.value)
    assert "127.0.0.1:9" in message and "secret" not in message
    assert isinstance(raised.value, AnalyzerError)


@pytest.fixture
def not_clickhouse() -> Iterator[tuple[str, int]]:
    """A real HTTP server that is not ClickHouse (what a wrong port often reaches): it
    answers every POST 200 with an HTML page, and the native hello with HTTP's 400."""

    class Page(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<html><body>Sign in</body></html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "127.0.0.1", server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.unit
def test_a_url_that_reaches_something_else_says_so(not_clickhouse: tuple[str, int]) -> None:
    host, port = not_clickhouse
    with pytest.raises(StoreUnavailable) as raised:
        open_store(None, f"http://{host}:{port}")
    message = str(raised.value)
    assert "does not answer as a ClickHouse HTTP interface" in message and "Sign in" in message
    with pytest.raises(StoreUnavailable) as raised:  # the native URL on an HTTP port
        open_store(None, f"clickhouse://{host}:{port}/db")
    assert f"is {port} its HTTP port? Use http://{host}:{port}" in str(raised.value)
    for url in ("http://u:secret@127.0.0.1:notaport", "http://127.0.0.1:99999"):
        with pytest.raises(BadInput) as bad:  # a traceback (ValueError) before
            open_store(None, url)
        assert "bad ClickHouse HTTP URL" in str(bad.value) and "secret" not in str(bad.value)


@pytest.mark.unit
def test_split_clickhouse_error() -> None:
    assert split_clickhouse_error(
        "Code: 164. DB::Exception: Code: 164. DB::Exception: Cannot modify 'readonly' setting "
        "in readonly mode. (READONLY) (version 26.9.2.1). (READONLY)"
    ) == (164, "Cannot modify 'readonly' setting in readonly mode. (READONLY)")
    assert split_clickhouse_error("no code here") == (None, "no code here")


def test_closed_store_is_unavailable(tmp_path: Path, store: ChdbStore) -> None:
    """Last in the module: closes the module's store."""
    store.close()
    with pytest.raises(StoreUnavailable):
        store.query("SELECT 1")
    store.close()  # idempotent

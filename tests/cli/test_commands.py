"""``grpc-overhead sql`` and ``grpc-overhead serve`` as a user runs them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.schema import create_schema
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.cli import sql as sql_command
from grpc_overhead.processes import free_port
from tests.analyzer.otlp_requests import request, span, stub
from tests.analyzer.seed import insert_spans, synthetic_call

pytestmark = pytest.mark.e2e


@pytest.fixture
def store_dir(tmp_path: Path) -> str:
    directory = str(tmp_path / "store")
    with open_store(directory) as store:
        create_schema(store)
        store.command("INSERT INTO otel_traces (SpanName, SpanKind) VALUES ('a', 'Server')")
    return directory


def test_sql_is_read_only_unless_write(store_dir: str, capsys: pytest.CaptureFixture) -> None:
    insert = "INSERT INTO otel_traces (SpanName) VALUES ('b')"
    assert sql_command.main([insert, "--store", store_dir]) == sql_command.EXIT_QUERY
    error = capsys.readouterr().err
    assert "read-only" in error and "--write" in error and insert in error
    assert sql_command.main([insert, "--store", store_dir, "--write"]) == 0
    assert sql_command.main(["SELECT count() AS n FROM otel_traces", "--store", store_dir]) == 0
    assert capsys.readouterr().out.split() == ["n", "2"]


def test_sql_syntax_error_shows_message_and_sql(
    store_dir: str, capsys: pytest.CaptureFixture
) -> None:
    assert sql_command.main(["SELEC 1 FROM otel_traces", "--store", store_dir]) == 1
    error = capsys.readouterr().err
    assert "Syntax error" in error and "SQL: SELEC 1 FROM otel_traces" in error
    assert "Traceback" not in error


def test_sql_formats(store_dir: str, capsys: pytest.CaptureFixture) -> None:
    query = "SELECT SpanName, SpanKind, map('k', 'v') AS m FROM otel_traces"
    assert sql_command.main([query, "--store", store_dir, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"SpanName": "a", "SpanKind": "Server", "m": {"k": "v"}}
    ]
    assert sql_command.main([query, "--store", store_dir, "--format", "csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "SpanName,SpanKind,m"


def test_sql_makes_the_phase_view_a_store_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A store with calls but without ``grpc_call_phases`` (an older version's, or one a
    benchmark seeded) answers the README's first query instead of UNKNOWN_TABLE."""
    directory = str(tmp_path / "old")
    with open_store(directory) as store:
        create_schema(store)
        create_calls(store)  # the calls, not the view
        insert_spans(store, synthetic_call())
    assert (
        sql_command.main(["SELECT count() AS n FROM grpc_call_phases", "--store", directory]) == 0
    )
    assert capsys.readouterr().out.split() == ["n", "1"]


def test_sql_on_a_store_with_nothing_says_how_the_view_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "empty").mkdir()
    query = "SELECT count() FROM grpc_call_phases"
    assert sql_command.main([query, "--store", str(tmp_path / "empty")]) == 1
    assert "run `grpc-overhead report` on this store once" in capsys.readouterr().err


def test_sql_refuses_a_store_that_is_not_there(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A typo in --store is an error, not a new empty store read as if it were the real one."""
    missing, a_file = tmp_path / "typo", tmp_path / "file"
    a_file.write_text("")
    for where in (missing, a_file):
        assert sql_command.main(["SELECT 1", "--store", str(where)]) == 2
        assert f"no store at {where}" in capsys.readouterr().err
    assert not missing.exists()


def _serve(directory: str, port: int, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "serve",
            "--store",
            directory,
            "--otlp-port",
            str(port),
            "--no-app",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_line(process: subprocess.Popen, prefix: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and process.poll() is not None:
            break
    error = process.stderr.read() if process.stderr else ""
    raise AssertionError(f"no {prefix!r} line; stderr: {error}")


def test_serve_stores_spans_refuses_a_second_owner_and_stops_cleanly(tmp_path: Path) -> None:
    directory, port = str(tmp_path / "store"), free_port()
    server = _serve(directory, port)
    try:
        assert (
            _wait_for_line(server, "intake listening on")
            .strip()
            .startswith(f"intake listening on 127.0.0.1:{port}")
        )
        assert _wait_for_line(server, "store:").strip() == f"store: chDB {directory}"
        channel, export = stub(port)
        export(request(span(1), span(2)), timeout=30)
        channel.close()

        second = _serve(directory, free_port())
        _, error = second.communicate(timeout=120)
        assert second.returncode == 2
        # Said as a serve needs it: where the first one takes spans, not how readers read.
        assert f"already served by process {server.pid}" in error, error
        assert f"intake 127.0.0.1:{port}" in error and "ClickHouse HTTP http://" in error
        assert "Traceback" not in error

        server.send_signal(signal.SIGTERM)
        out, error = server.communicate(timeout=60)
        assert server.returncode == 0, error
        assert "intake stopped: 2 spans stored" in out
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    with open_store(directory) as store:
        assert int(store.query("SELECT count() AS n FROM otel_traces")["n"][0]) == 2


def test_a_sigterm_while_serve_starts_still_stops_it_cleanly(tmp_path: Path) -> None:
    """A SIGTERM as soon as serve says where its store is (with retention, it then sets the
    TTLs before its loop runs) is the graceful stop: exit 0, the intake's summary said, the
    readers' info file removed; it used to kill serve there (exit -15)."""
    directory = tmp_path / "store"
    server = _serve(str(directory), free_port(), "--retention", "7d")
    try:
        _wait_for_line(server, "store:")
        server.send_signal(signal.SIGTERM)
        out, error = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, error
    assert "intake stopped: 0 spans stored" in out, out
    assert not (directory / "grpc-overhead-serve.json").exists()


def test_serve_with_unreachable_clickhouse_exits_2_without_traceback() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "serve",
            "--clickhouse",
            "clickhouse://default:pw@127.0.0.1:9/otel",
            "--otlp-port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert result.returncode == 2
    assert "cannot reach ClickHouse" in result.stderr and "pw" not in result.stderr
    assert "Traceback" not in result.stderr

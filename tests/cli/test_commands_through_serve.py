"""``report``, ``sql`` and ``app`` started as separate processes while ``serve`` owns the store:
they read through serve's ClickHouse HTTP interface. Real processes throughout."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpc_overhead.analyzer.store.owner import read_serve_info
from grpc_overhead.processes import offline_env
from harness.browser import RunningApp, start_serve_http
from tests.analyzer.seed import module_store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e

CALLS = 40


def seed_store(directory: Path, calls: int = CALLS) -> None:
    subprocess.run(
        [sys.executable, "-m", "tests.app.seeded", str(directory), str(calls)],
        check=True,
        capture_output=True,
        timeout=120,
    )


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env or offline_env(),
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, RunningApp]]:
    store = tmp_path_factory.mktemp("served") / "store"
    seed_store(store)
    serve = start_serve_http(store, offline_env())
    yield store, serve
    assert serve.stop() == 0, serve.text()


def test_serve_advertises_its_interface_in_the_store(served):
    store, serve = served
    info = read_serve_info(str(store))
    assert info is not None and info.pid == serve.process.pid and info.http_url == serve.url
    ping = subprocess.run(["curl", "-sS", f"{serve.url}/ping"], capture_output=True, timeout=30)
    assert ping.stdout == b"Ok.\n"


def test_report_reads_through_serve(served):
    store, _ = served
    done = command("report", "--store", str(store), "--format", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["calls"] == CALLS
    assert "in use by" not in done.stderr
    # The size comes through the HTTP interface too (system.parts, read-only).
    assert document["store"]["calls"] == CALLS and document["store"]["bytes_per_call"] > 0


def test_sql_reads_through_serve_and_passes_formats_through(served):
    store, _ = served
    done = command("sql", "--store", str(store), "SELECT count() FROM grpc_call_phases FORMAT CSV")
    assert (done.returncode, done.stdout) == (0, f"{CALLS}\n"), done.stderr
    done = command(
        "sql",
        "--store",
        str(store),
        "--format",
        "json",
        "SELECT rpc_method, count() AS calls FROM grpc_call_phases"
        " GROUP BY rpc_method ORDER BY calls DESC",
    )
    assert json.loads(done.stdout)[0] == {"rpc_method": "Predict", "calls": 32}
    done = command("sql", "--store", str(store), "SELECT 1 AS n, 'x' AS s FORMAT JSONEachRow")
    assert done.stdout == '{"n":1,"s":"x"}\n'


def test_writes_are_refused_by_the_reader_with_what_to_do(served):
    store, _ = served
    done = command("sql", "--store", str(store), "DROP TABLE grpc_calls")
    assert done.returncode == 1 and "read through the `serve` that owns it" in done.stderr
    done = command("sql", "--store", str(store), "--write", "TRUNCATE TABLE otel_traces")
    assert done.returncode == 2 and "read-only here" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_serve_with_a_password_asks_readers_for_it(tmp_path: Path):
    store = tmp_path / "store"
    seed_store(store, 4)
    env = offline_env(GRPC_OVERHEAD_HTTP_USER="analyst", GRPC_OVERHEAD_HTTP_PASSWORD="s3cret")
    serve = start_serve_http(store, env)
    try:
        done = command(
            "sql", "--store", str(store), "SELECT count() FROM grpc_call_phases", env=env
        )
        assert done.returncode == 0 and done.stdout.split()[-1] == "4", done.stderr
        wrong = offline_env(GRPC_OVERHEAD_HTTP_USER="analyst", GRPC_OVERHEAD_HTTP_PASSWORD="x")
        done = command("report", "--store", str(store), env=wrong)
        assert done.returncode == 2 and "refused the credentials" in done.stderr
        curl = subprocess.run(
            ["curl", "-sS", "-u", "analyst:s3cret", f"{serve.url}/?query=SELECT%201"],
            capture_output=True,
            timeout=30,
        )
        assert curl.stdout == b"1\n"
    finally:
        assert serve.stop() == 0, serve.text()


def test_without_http_readers_get_the_lock_message_and_no_false_promise(tmp_path: Path):
    store = tmp_path / "store"
    seed_store(store, 2)
    serve = start_serve_http(store, offline_env(), "--no-http")
    try:
        done = command("report", "--store", str(store))
    finally:
        assert serve.stop() == 0, serve.text()
    assert done.returncode == 2
    assert f"in use by process {serve.process.pid}" in done.stderr
    assert "against the running" not in done.stderr and "does not offer one" in done.stderr


def test_an_http_port_asked_for_and_taken_fails_clearly(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = command(
            "serve",
            "--store",
            str(tmp_path / "store"),
            "--no-app",
            "--otlp-port",
            "0",
            "--http-port",
            str(port),
        )
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_default_port_taken_falls_back_to_a_free_one(module_store, monkeypatch, capsys):
    from grpc_overhead.cli import serve as serve_command
    from grpc_overhead.cli import serve_http

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(serve_http, "DEFAULT_HTTP_PORT", port)  # stands for 8123
        args = serve_command.parser().parse_args(["--no-app"])
        interface = serve_http.start_http(args, module_store)
        try:
            assert interface is not None and interface.port not in (port, 0)
            ping = subprocess.run(["curl", "-sS", f"{interface.url}/ping"], capture_output=True)
            assert ping.stdout == b"Ok.\n"
        finally:
            interface.stop()
    assert f"port {port} is taken" in capsys.readouterr().err

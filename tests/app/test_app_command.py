"""``grpc-overhead app``: the messages a user gets when the app cannot open a store.

A chDB directory belongs to one process: while ``serve`` owns it, ``app`` reads
it through serve's ClickHouse HTTP interface; with that off (``--no-http``) it
says what to do instead of failing on the engine's lock. Every case runs the
real commands as child processes.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_overhead.cli.processes import free_port, offline_env
from grpc_overhead.cli.serve import SERVE_INFO_FILE, read_serve_info
from harness.browser import (
    EXCEPTION,
    calls_metric,
    chromium,
    open_page,
    start_app,
    start_serve,
    start_serve_http,
)
from tests.app.seeded import seed

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def app_command(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "app", "--no-browser", *args],
        capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
        env=offline_env(),
    )  # fmt: skip


def test_a_store_owned_by_serve_is_read_through_it(tmp_path: Path):
    store = tmp_path / "store"
    seed(store, 20)
    serve = start_serve(store, free_port(), offline_env())
    try:
        info = read_serve_info(str(store))
        assert info is not None and info.pid == serve.process.pid and info.app_url == serve.url
        assert info.http_url.startswith("http://127.0.0.1:")
        app = start_app(store, offline_env())
        try:
            assert f"through serve (process {serve.process.pid})" in app.text()
            with chromium() as browser:
                page = browser.new_page()
                open_page(page, f"{app.url}/overview")
                assert page.locator(EXCEPTION).count() == 0
                assert calls_metric(page) == 20
        finally:
            assert app.stop() == 0, app.text()
    finally:
        assert serve.stop() == 0, serve.text()
    # serve removes its note when it stops, so a stale URL is never offered.
    assert not (store / SERVE_INFO_FILE).exists()


def test_a_store_owned_by_serve_without_http_says_how_to_read_it(tmp_path: Path):
    store = tmp_path / "store"
    serve = start_serve_http(store, offline_env(), "--no-http")
    try:
        done = app_command("--store", str(store), "--port", "0")
    finally:
        assert serve.stop() == 0, serve.text()
    assert done.returncode == 2
    assert f"(process {serve.process.pid}) running with --no-app and --no-http" in done.stderr
    assert "restart it without --no-http" in done.stderr and "Traceback" not in done.stderr


def test_no_store_says_how_to_make_one(tmp_path: Path):
    done = app_command("--store", str(tmp_path / "missing"), "--port", "0")
    assert done.returncode == 2
    assert done.stderr.startswith("grpc-overhead app: no store at ")
    assert "grpc-overhead demo" in done.stderr
    assert not (tmp_path / "missing").exists()


def test_a_taken_port_says_which_option_to_change(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = app_command("--store", str(tmp_path), "--port", str(port))
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "--port 0" in done.stderr
    assert "Traceback" not in done.stderr

"""``grpc-overhead app``: the messages a user gets when the app cannot open a store.

A chDB directory belongs to one process: while ``serve`` owns it, ``app`` reads
it through serve's ClickHouse HTTP interface; with that off (``--no-http``) it
says what to do instead of failing on the engine's lock. Every case runs the
real commands as child processes.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpc_overhead.cli.serve import SERVE_INFO_FILE, read_serve_info
from grpc_overhead.processes import free_port, offline_env
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
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )


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
                # serve writes it meanwhile: live, as the `streamlit run` entry reads it.
                toggle = page.locator(
                    '[data-testid="stSidebar"] [data-testid="stCheckbox"]'
                ).filter(has_text="Auto-refresh")
                assert toggle.locator("input").is_checked()
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


#: Calls nobody settled: their roll-up takes seconds (about 28 s per million on 2 quiet cores).
UNSETTLED_CALLS = 400_000
#: ... and enough that the roll-up outlasts the app's start on a busy machine (400,000 took
#: 13 s to roll up on a quiet one, the app's start up to as long on a busy one).
OUTLASTING_CALLS = 1_000_000


def generated_store(tmp_path: Path, calls: int = UNSETTLED_CALLS) -> Path:
    store = tmp_path / "store"
    subprocess.run(
        [sys.executable, "-m", "harness.generated_calls", str(store), str(calls)],
        check=True,
        timeout=300,
        env=offline_env(),
        stdin=subprocess.DEVNULL,
    )
    return store


def store_sql(store: Path, query: str) -> int:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "sql",
            "--store",
            str(store),
            "--format",
            "json",
            query,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=offline_env(),
        check=True,
    )
    return int(json.loads(done.stdout)[0]["n"])


def test_a_store_nobody_settled_is_served_at_once_and_rolled_up_beside_the_app(tmp_path: Path):
    """The app used to roll the whole store up before it answered (19-29 s at 1 M calls)."""
    store = generated_store(tmp_path)
    app = start_app(store, offline_env())
    try:
        assert "settled minutes rolled up" not in app.text(), "the app waited for the roll-up"
        with chromium() as browser:
            page = browser.new_page()
            open_page(page, f"{app.url}/overview")  # while the roll-up runs: raw, same numbers
            assert page.locator(EXCEPTION).count() == 0
            assert calls_metric(page) == UNSETTLED_CALLS
        deadline = time.monotonic() + 300
        while "settled minutes rolled up" not in app.text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "settled minutes rolled up" in app.text(), app.text()
    finally:
        assert app.stop() == 0, app.text()
    settled = "SELECT count() AS n FROM grpc_settled_calls"
    assert store_sql(store, settled) == UNSETTLED_CALLS


def test_quitting_during_the_roll_up_stops_it_and_the_next_one_finishes_it(tmp_path: Path):
    store = generated_store(tmp_path, OUTLASTING_CALLS)
    app = start_app(store, offline_env())
    assert app.stop() == 0, app.text()  # SIGTERM a moment after the app answered
    assert "rolling up settled minutes failed" not in app.text()
    assert "settled minutes rolled up" not in app.text(), "stopped only once it was done"
    settled = "SELECT count() AS n FROM grpc_settled_calls"
    assert store_sql(store, settled) < OUTLASTING_CALLS
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "report",
            "--store",
            str(store),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=offline_env(),
    )
    assert report.returncode == 0, report.stderr
    assert store_sql(store, settled) == OUTLASTING_CALLS  # resumed, nothing twice

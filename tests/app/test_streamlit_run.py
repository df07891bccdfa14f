"""``streamlit run app/streamlit_app.py``: Streamlit's own launcher, against a running serve
(through its ClickHouse HTTP interface) or a store directory. Real streamlit, real Chromium."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from grpc_overhead.processes import free_port, offline_env, stop_process
from harness.browser import EXCEPTION, REPO, calls_metric, chromium, open_page, start_serve_http
from tests.app.seeded import seed

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

ENTRY = REPO / "app" / "streamlit_app.py"


def streamlit_run(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], str, list]:
    """``streamlit run app/streamlit_app.py`` on a free port; waits until it serves."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            str(ENTRY),
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            *args,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=REPO,
    )
    output: list[str] = []

    def read() -> None:
        assert process.stdout is not None
        output.extend(process.stdout)

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + 90
    while not any(re.search(r"Local URL: http", line) for line in output):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process, 10)
            raise RuntimeError(f"streamlit did not start: {''.join(output)}")
        time.sleep(0.2)
    return process, f"http://127.0.0.1:{port}", output


def shows_calls(url: str, expected: int) -> None:
    with chromium() as browser:
        page = browser.new_page()
        open_page(page, f"{url}/overview")
        assert page.locator(EXCEPTION).count() == 0
        assert calls_metric(page) == expected


def test_streamlit_run_reads_a_running_serve(tmp_path: Path):
    store = tmp_path / "store"
    seed(store, 30)
    serve = start_serve_http(store, offline_env())
    try:
        # The store directory on the command line: serve owns it, so the app goes through it.
        app, url, output = streamlit_run(["--", "--store", str(store)], offline_env())
        try:
            shows_calls(url, 30)
        finally:
            stop_process(app, 30)
        # Or the interface's URL, from the environment.
        env = offline_env(GRPC_OVERHEAD_CLICKHOUSE_URL=serve.url)
        app, url, output = streamlit_run([], env)
        try:
            shows_calls(url, 30)
        finally:
            stop_process(app, 30)
        assert "Traceback" not in "".join(output)
    finally:
        assert serve.stop() == 0, serve.text()


def test_streamlit_run_opens_a_free_store_directory_itself(tmp_path: Path):
    store = tmp_path / "store"
    seed(store, 12)
    app, url, output = streamlit_run([], offline_env(GRPC_OVERHEAD_STORE=str(store)))
    try:
        shows_calls(url, 12)
    finally:
        stop_process(app, 30)
    assert "Traceback" not in "".join(output)

"""``grpc-overhead app``: the messages a user gets when the app cannot open a store.

A chDB directory belongs to one process: while ``serve`` owns it, ``app`` must
say so and point at the app that serve already runs, not fail on the engine's
lock. Every case runs the real commands as child processes.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_overhead.cli.processes import free_port, offline_env
from grpc_overhead.cli.serve import SERVE_INFO_FILE, read_serve_info
from harness.browser import start_serve

pytestmark = pytest.mark.e2e


def app_command(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "app", "--no-browser", *args],
        capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
        env=offline_env(),
    )  # fmt: skip


def test_a_store_owned_by_serve_points_to_the_running_app(tmp_path: Path):
    store = tmp_path / "store"
    serve = start_serve(store, free_port(), offline_env())
    try:
        info = read_serve_info(str(store))
        assert info is not None and info.pid == serve.process.pid and info.app_url == serve.url
        done = app_command("--store", str(store), "--port", "0")
    finally:
        assert serve.stop() == 0, serve.text()
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"owned by `grpc-overhead serve` (process {serve.process.pid})" in done.stderr
    assert f"open {serve.url}" in done.stderr
    # serve removes its note when it stops, so a stale URL is never offered.
    assert not (store / SERVE_INFO_FILE).exists()


def test_a_store_owned_by_serve_without_app_says_how_to_get_one(tmp_path: Path):
    store = tmp_path / "store"
    serve = subprocess.Popen(
        [sys.executable, "-m", "grpc_overhead", "serve", "--store", str(store), "--otlp-port",
         str(free_port()), "--no-app"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=offline_env(),
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            if line.startswith("app: off"):
                break
        done = app_command("--store", str(store), "--port", "0")
    finally:
        serve.terminate()
        serve.wait(30)
    assert done.returncode == 2
    assert f"(process {serve.pid}) running with --no-app" in done.stderr
    assert "restart it without --no-app" in done.stderr


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

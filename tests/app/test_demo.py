"""``grpc-overhead demo``: the whole stack starts, plays every scenario, stops, and leaves data.

The real thing, as a user runs it (collector built by ``make collector``):
serve (intake + chDB + app), the collector, two services and the load
generator, as child processes. Every process the demo started carries a
marker in its environment, so the test can prove none outlives the demo.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from grpc_overhead.cli.demo import SCENARIOS, SERVICES
from grpc_overhead.processes import free_port, offline_env
from harness.browser import start_serve

pytestmark = pytest.mark.e2e

EIGHT_PHASES = [
    "client_serialize",
    "request_network",
    "server_queue",
    "request_deserialize",
    "processing",
    "response_serialize",
    "response_network",
    "client_deserialize",
]
ALL_PHASES = [*EIGHT_PHASES, "total", "server_residence", "network_overhead", "unattributed"]
MARKER = "GRPC_OVERHEAD_TEST_DEMO_MARKER"


def demo(*args: str, env: dict[str, str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", "demo", "--no-browser", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def processes_with(marker: str) -> list[str]:
    """Command lines of the live processes whose environment carries ``marker``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                if marker.encode() not in handle.read():
                    continue
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                command = handle.read().replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{pid}: {command}")
        except OSError:
            continue
    return found


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", *args],
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )


def test_demo_runs_the_whole_stack_and_leaves_a_store_with_every_phase(tmp_path: Path):
    store, logs = tmp_path / "store", tmp_path / "logs"
    marker = uuid.uuid4().hex
    env = {**offline_env(), MARKER: marker}
    done = demo(
        "--duration",
        "60",
        "--store",
        str(store),
        "--app-port",
        "0",
        "--logs",
        str(logs),
        env=env,
        timeout_s=420,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert processes_with(marker) == [], "processes left running after the demo"
    assert "app: http://127.0.0.1:" in done.stdout
    assert f"grpc-overhead report --store {store}" in done.stdout
    for spec in SERVICES:
        assert f"{spec.name}: 127.0.0.1:" in done.stdout

    report = cli("report", "--store", str(store), "--format", "json")
    assert report.returncode == 0, report.stderr
    body = json.loads(report.stdout)
    methods = {m["method"]: m for m in body["methods"]}
    # Unary, batched and streaming calls all arrived; Predict has every phase measured.
    assert {"Predict", "PredictBatch", "PredictStream"} <= set(methods)
    for phase in ALL_PHASES:
        values = methods["Predict"]["phases"][phase]
        assert values["p50_us"] is not None and values["p99_us"] is not None, phase
    # Queuing under the burst: predictor-a's two workers make callers wait.
    assert methods["Predict"]["phases"]["server_queue"]["p99_us"] > 1000
    # ... and that is what Findings, the page the demo opens on, puts first for the burst:
    # more workers than calls in flight would save the wait.
    burst = cli("findings", "--store", str(store), "--run", "demo-burst", "--format", "json")
    assert burst.returncode == 0, burst.stderr
    top = json.loads(burst.stdout)["findings"][0]
    assert (top["kind"], top["method"]) == ("server_pool_saturated", "Predict"), top
    assert top["saving_us"]["p50"] > 1000 and top["confidence"] != "low", top
    # The compression scenario's gzip calls pay CPU for bytes loopback moves for free.
    compression = cli(
        "findings", "--store", str(store), "--run", "demo-compression", "--format", "json"
    )
    assert compression.returncode == 0, compression.stderr
    top = json.loads(compression.stdout)["findings"][0]
    assert (top["kind"], top["method"]) == ("compression_costs_more", "Predict"), top
    assert top["evidence"]["algorithm"] == "gzip", top
    # Over every run, the burst pins its 16 callers to predictor-a: the instances are uneven.
    everything = cli("findings", "--store", str(store), "--format", "json")
    assert everything.returncode == 0, everything.stderr
    uneven = [f for f in json.loads(everything.stdout)["findings"] if f["kind"] == "load_imbalance"]
    assert [(f["method"], f["instance"]) for f in uneven] == [("Predict", "predictor-a")], uneven

    # Every scenario ran (one run id each) and both instances served calls.
    sql = cli(
        "sql",
        "--store",
        str(store),
        "--format",
        "json",
        "SELECT groupUniqArray(run_id) AS runs, groupUniqArray(server_instance) AS instances, "
        "groupUniqArray(compression) AS grpc_compression FROM grpc_calls",
    )
    assert sql.returncode == 0, sql.stderr
    [row] = json.loads(sql.stdout)
    assert set(row["runs"]) >= {scenario.run_id for scenario in SCENARIOS}
    assert "demo-compression" in row["runs"]
    assert set(row["instances"]) >= {spec.name for spec in SERVICES}
    assert "gzip" in row["grpc_compression"]


def test_demo_on_a_store_owned_by_serve_says_where_its_app_is(tmp_path: Path):
    store = tmp_path / "store"
    serve = start_serve(store, free_port(), offline_env())
    try:
        done = demo("--store", str(store), "--app-port", "0", env=offline_env(), timeout_s=120)
    finally:
        serve.stop()
    assert done.returncode == 2
    assert f"is in use by process {serve.process.pid}" in done.stderr
    assert f"Its app: {serve.url}" in done.stderr
    assert "pass another --store DIR" in done.stderr


def test_demo_with_its_app_port_taken_says_which_option_to_change(tmp_path: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = demo(
            "--store",
            str(tmp_path / "store"),
            "--app-port",
            str(port),
            env=offline_env(),
            timeout_s=120,
        )
    assert done.returncode == 2
    assert f"port {port} on 127.0.0.1 is already in use" in done.stderr
    assert "--app-port 0" in done.stderr


def test_demo_without_a_usable_collector_says_how_to_continue(tmp_path: Path):
    env = {**offline_env(), "GRPC_OVERHEAD_COLLECTOR_BIN": str(tmp_path / "no-otelcol")}
    done = demo("--store", str(tmp_path / "store"), "--app-port", "0", env=env, timeout_s=120)
    assert done.returncode == 2
    assert "no-otelcol, which is not an executable file" in done.stderr
    assert "grpc-overhead demo --no-collector" in done.stderr
    assert not (tmp_path / "store").exists()


def test_demo_without_the_collector_sends_spans_straight_to_the_intake(tmp_path: Path):
    store = tmp_path / "store"
    marker = uuid.uuid4().hex
    env = {**offline_env(), MARKER: marker}
    done = demo(
        "--no-collector",
        "--duration",
        "15",
        "--store",
        str(store),
        "--app-port",
        "0",
        "--logs",
        str(tmp_path / "logs"),
        env=env,
        timeout_s=240,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert "collector: off (--no-collector)" in done.stdout
    assert processes_with(marker) == []
    report = cli("report", "--store", str(store), "--format", "json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["calls"] > 0

"""``grpc-overhead demo --jaeger``: Jaeger runs beside the stack, receives its traces, and stops."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from grpc_overhead.cli.jaeger import JaegerError, build, get_json
from grpc_overhead.processes import offline_env, stop_process
from tests.app.test_demo import MARKER, processes_with

pytestmark = pytest.mark.e2e


def test_demo_with_jaeger_fans_every_trace_out_to_it(tmp_path: Path) -> None:
    try:
        build()
    except JaegerError as error:
        pytest.fail(f"Jaeger cannot be built here: {error}", pytrace=False)
    marker = uuid.uuid4().hex
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "demo",
            "--jaeger",
            "--no-browser",
            "--duration",
            "15",
            "--app-port",
            "0",
            "--store",
            str(tmp_path / "store"),
            "--logs",
            str(tmp_path / "logs"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**offline_env(), MARKER: marker},
    )
    try:
        assert demo.stdout is not None
        url, lines = "", []
        for line in demo.stdout:
            lines.append(line)
            if line.startswith("jaeger: "):
                url = line.split()[1]
                break
        assert url.startswith("http://127.0.0.1:"), "".join(lines)
        services: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not {"predictor", "loadgen"} <= set(services):
            services = get_json(f"{url}/api/v3/services").get("services") or []
            time.sleep(1)
        assert {"predictor", "loadgen"} <= set(services)
        output, _ = demo.communicate(timeout=300)
    finally:
        stop_process(demo, timeout_s=60)
    assert demo.returncode == 0, "".join(lines) + (output or "")
    assert processes_with(marker) == [], "processes left running after the demo"
    with pytest.raises(JaegerError):
        get_json(f"{url}/api/v3/services", timeout_s=2)

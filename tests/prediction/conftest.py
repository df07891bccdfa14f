"""Fixtures for the prediction service tests.

Subprocesses run with ``offline_env()``: the OTLP endpoint is a loopback port
where nothing listens (spans are dropped, never sent to a collector a developer
happens to run on :4317) and each export attempt is bounded, so nothing can
hang on telemetry. test_prediction_e2e.py keeps the exporter's default timeout
in one test on purpose.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from grpc_overhead.prediction.process import ServiceProcess, offline_env


@dataclass
class LoadResult:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float

    @property
    def summary(self) -> dict[str, Any]:
        assert self.returncode == 0, f"load exited {self.returncode}: {self.stderr}"
        return json.loads(self.stdout)


def run_load(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> LoadResult:
    """``grpc-overhead load --quiet ARGS`` as a subprocess."""
    command = [sys.executable, "-m", "grpc_overhead", "load", "--quiet", *args]
    started = time.monotonic()
    done = subprocess.run(
        command,
        env=env or offline_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return LoadResult(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def check_summary(summary: dict[str, Any], calls: int | None = None) -> None:
    """The invariants every JSON summary must satisfy."""
    for key in ("run_id", "calls", "ok", "errors", "duration_s", "rps", "latency_ms",
                "histogram", "status_codes"):  # fmt: skip
        assert key in summary, key
    assert summary["ok"] + summary["errors"] == summary["calls"]
    assert sum(summary["status_codes"].values()) == summary["calls"]
    assert summary["status_codes"].get("OK", 0) == summary["ok"]
    if calls is not None:
        assert summary["calls"] == calls
    latency = summary["latency_ms"]
    if summary["ok"]:
        order = [latency[k] for k in ("min", "p50", "p90", "p99", "p999", "max")]
        assert order == sorted(order), latency
        assert latency["min"] <= latency["mean"] <= latency["max"]
        assert latency["min"] > 0
        assert sum(row["count"] for row in summary["histogram"]) == summary["ok"]
        bounds = [row["le_ms"] for row in summary["histogram"]]
        assert bounds == sorted(bounds) and bounds[-1] == latency["max"]
    assert summary["duration_s"] > 0
    assert summary["rps"] == pytest.approx(summary["calls"] / summary["duration_s"], rel=0.01)


@pytest.fixture(scope="session")
def service() -> Iterator[ServiceProcess]:
    """One `grpc-overhead service` subprocess shared by the e2e tests of this folder."""
    with ServiceProcess(["--workers", "4", "--instance-id", "e2e-service"], env=offline_env()) as svc:
        yield svc

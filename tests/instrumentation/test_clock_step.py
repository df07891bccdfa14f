"""A wall clock stepped under a running service (a virtual machine resumed, NTP or an
operator setting it): the spans of calls made after the step carry the new wall time.

Before, the export worker re-anchored every 30 s only, so for up to 30 s every span was
off by the step, and a phase between processes (network) would read it as latency. The
step is real: libfaketime moves the child's wall clock (not its monotonic one) when the
test replaces its timestamp file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grpc_overhead.processes import offline_env
from harness.ground_truth.pipeline import libfaketime

pytestmark = pytest.mark.e2e

STEP_S = 10

#: An instrumented echo server and client in one process: a call, then a line on stdin
#: (the parent has stepped the clock by then), then a call whose client span it prints
#: beside the wall time read just before it.
CHILD = """
import json, sys, time
import grpc
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from grpc_overhead.instrumentation import SpanPipeline, instrument_channel
from tests.instrumentation import echo_service

exporter = InMemorySpanExporter()
pipeline = SpanPipeline(exporter=exporter)
server, target = echo_service.start_sync_server(pipeline)
channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=pipeline)
echo = echo_service.multicallables(channel)["Echo"]
echo(BytesValue(value=b"x"), timeout=20)
assert pipeline.force_flush()
print("stepping", flush=True)
sys.stdin.readline()
made = time.time_ns()
echo(BytesValue(value=b"x"), timeout=20)
assert pipeline.force_flush()
clients = [s for s in exporter.get_finished_spans() if s.kind.name == "CLIENT"]
latest = max(clients, key=lambda span: span.start_time)
print(json.dumps({"made": made, "started": latest.start_time, "calls": len(clients)}))
"""


def _set_offset(path: Path, offset_s: int) -> None:
    """Replace the file at once: libfaketime must never read it half written."""
    staged = path.with_suffix(".new")
    staged.write_text(f"{offset_s:+d}\n")
    os.replace(staged, path)


def test_a_call_after_a_wall_clock_step_carries_the_new_wall_time(tmp_path):
    offset_file = tmp_path / "faketime"
    _set_offset(offset_file, 0)
    env = offline_env(
        LD_PRELOAD=libfaketime(),
        FAKETIME_TIMESTAMP_FILE=str(offset_file),
        FAKETIME_NO_CACHE="1",
        FAKETIME_CACHE_DURATION="0",
        FAKETIME_DONT_FAKE_MONOTONIC="1",
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "stepping", child.stderr.read()
        _set_offset(offset_file, STEP_S)
        out, err = child.communicate("stepped\n", timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, err
    result = json.loads(out)
    assert result["calls"] == 2
    # The call started just after ``made`` on the stepped clock; with the old anchor its
    # span would start STEP_S seconds before it.
    late_ms = (result["started"] - result["made"]) / 1e6
    assert 0 <= late_ms < 1_000, f"the span started {late_ms:.1f} ms after the wall time read"

"""Defaults that meet: serve on the standard OTLP port, and clear words when a port is taken.

Real processes: ``serve`` (intake + chDB), ``collector run``, an OpenTelemetry
SDK exporter sending real OTLP, and listeners holding ports. The default
behaviour (plain ``serve`` takes 4317) runs in a network namespace of its own
(``harness.quickstart``), where 4317 is free whatever the machine runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from grpc_overhead.processes import Child, child_env, free_port
from harness import quickstart

pytestmark = pytest.mark.e2e
START_TIMEOUT_S = 90.0


@pytest.fixture
def held_port() -> Iterator[int]:
    """A loopback port this test process listens on (so its holder is this pid)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def _serve(tmp_path: Path, *args: str) -> Child:
    log = tmp_path / "serve.log"
    return Child("serve", ["serve", "--store", str(tmp_path / "store"), *args], child_env(), log)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", *args],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
        env=child_env(),
    )


def _send_spans(port: int, count: int) -> None:
    """``count`` spans through the SDK's own OTLP/gRPC exporter, each export awaited."""
    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{port}", insecure=True, timeout=30)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("default-ports-test")
    for index in range(count):
        with tracer.start_as_current_span(f"span-{index}"):
            pass
    provider.shutdown()


def test_serve_takes_otlp_on_the_standard_port_too(tmp_path: Path) -> None:
    standard = free_port()
    serve = _serve(tmp_path, "--otlp-port", "0", "--standard-otlp-port", str(standard), "--no-app")
    serve.start()
    try:
        serve.wait_for(
            rf"^OTLP also on 127\.0\.0\.1:{standard} ", START_TIMEOUT_S, threading.Event()
        )
        _send_spans(standard, 5)
    finally:
        assert serve.stop() == 0, serve.tail()
    assert "intake stopped: 5 spans stored, 0 rejected" in serve.output(), serve.tail()


def test_an_explicit_standard_port_taken_is_a_clear_error(tmp_path: Path, held_port: int) -> None:
    done = _run(
        "serve",
        "--store",
        str(tmp_path / "store"),
        "--otlp-port",
        "0",
        "--standard-otlp-port",
        str(held_port),
        "--no-app",
    )
    assert done.returncode == 2, done.stderr
    assert f"127.0.0.1:{held_port} is held by pid {os.getpid()} (" in done.stderr
    assert "--standard-otlp-port N|off" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_intake_port_names_its_holder(tmp_path: Path, held_port: int) -> None:
    done = _run(
        "serve", "--store", str(tmp_path / "store"), "--otlp-port", str(held_port), "--no-app"
    )
    assert done.returncode == 2, done.stderr
    assert f"held by pid {os.getpid()} (" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_standard_port_is_a_usage_error(tmp_path: Path) -> None:
    done = _run("serve", "--store", str(tmp_path / "store"), "--standard-otlp-port", "4317x")
    assert done.returncode == 2
    assert "not a port number or 'off'" in done.stderr
    assert "Traceback" not in done.stderr


def test_collector_run_on_a_port_serve_holds_says_so(tmp_path: Path) -> None:
    standard = free_port()
    serve = _serve(tmp_path, "--otlp-port", "0", "--standard-otlp-port", str(standard), "--no-app")
    serve.start()
    try:
        serve.wait_for(r"^OTLP also on ", START_TIMEOUT_S, threading.Event())
        done = _run(
            "collector", "run", "--otlp-port", str(standard), "--health-port", str(free_port())
        )
    finally:
        serve.stop()
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"OTLP port {standard} is already in use by pid {serve.process.pid} (" in done.stderr
    assert "--standard-otlp-port off" in done.stderr
    assert "Traceback" not in done.stderr


PLAIN_SERVE_WITH_A_PORT_TAKEN = """
python -c 'import socket, time
s = socket.socket(); s.bind(("127.0.0.1", PORT)); s.listen(); time.sleep(120)' &
timeout 30 bash -c 'until (: </dev/tcp/127.0.0.1/PORT) 2>/dev/null; do sleep 0.2; done'
grpc-overhead serve --store ./store --no-app > serve.out 2>&1 &
timeout 60 bash -c 'until grep -q "^app: off" serve.out; do sleep 0.2; done'
kill %2; wait %2
cat serve.out
"""


@pytest.mark.parametrize(
    ("port", "note", "not_said"),
    [
        (4317, "note: the standard OTLP port 127.0.0.1:4317 is held by pid ", "OTLP also on"),
        (
            4318,
            "note: the standard OTLP/HTTP port 127.0.0.1:4318 is held by pid ",
            "OTLP/HTTP listening",
        ),
    ],
    ids=["grpc-4317", "http-4318"],
)
def test_plain_serve_leaves_a_taken_standard_port_and_says_who_holds_it(
    tmp_path: Path, port: int, note: str, not_said: str
) -> None:
    """The default path: intake on 4327, a standard port held by someone else (a
    collector, say)."""
    env = quickstart.clean_env(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )
    script = PLAIN_SERVE_WITH_A_PORT_TAKEN.replace("PORT", str(port))
    run = quickstart.run_block(script, tmp_path, env, 120, ports=(4317, 4318, 4327))
    assert run.returncode == 0, run.output
    assert "intake listening on 127.0.0.1:4327" in run.output
    assert note in run.output
    assert "(python -c import socket, time" in run.output  # the holder's command line
    assert not_said not in run.output
    assert "Failed to add port" not in run.output  # grpcio is not asked for a port in use
    assert "intake stopped:" in run.output  # went on, then stopped cleanly

"""OTLP/HTTP on ``serve``: the standard port 4318 by the defaults-that-meet rules, and
OTLP/JSON posted with curl, stored and read back with ``grpc-overhead sql`` (a taken 4318:
tests/cli/test_default_ports.py, beside a taken 4317).

The default behaviour (a plain ``serve`` takes 4318) runs in a network namespace of its
own (``harness.quickstart``), where 4318 is free whatever the machine runs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import quickstart

pytestmark = pytest.mark.e2e

#: A trace as the OTLP/JSON mapping spells it (hex ids, int64 as strings, enum names and
#: numbers, camelCase), after opentelemetry-proto's examples/trace.json.
TRACE = {
    "resourceSpans": [
        {
            "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "curl"}}]},
            "scopeSpans": [
                {
                    "scope": {"name": "by-hand"},
                    "spans": [
                        {
                            "traceId": "5b8efff798038103d269b633813fc60c",
                            "spanId": "eee19b7ec3c1b174",
                            "name": "demo.Echo/Say",
                            "kind": "SPAN_KIND_CLIENT",
                            "startTimeUnixNano": "1790000000000000000",
                            "endTimeUnixNano": "1790000000004000000",
                            "attributes": [{"key": "rpc.system", "value": {"stringValue": "grpc"}}],
                        },
                        {
                            "traceId": "5b8efff798038103d269b633813fc60c",
                            "spanId": "eee19b7ec3c1b175",
                            "parentSpanId": "eee19b7ec3c1b174",
                            "name": "demo.Echo/Say",
                            "kind": 2,
                            "startTimeUnixNano": "1790000000001000000",
                            "endTimeUnixNano": "1790000000003000000",
                            "attributes": [{"key": "rpc.system", "value": {"stringValue": "grpc"}}],
                        },
                    ],
                }
            ],
        }
    ]
}

PLAIN_SERVE_AND_CURL = """
grpc-overhead serve --store ./store --no-app > serve.out 2>&1 &
timeout 60 bash -c 'until grep -q "^app: off" serve.out; do sleep 0.2; done'
curl -sS -o answer.json -w '%{http_code} %{content_type}\\n' \\
  -H 'Content-Type: application/json' --data-binary @trace.json \\
  http://127.0.0.1:4318/v1/traces
gzip -k trace.json
curl -sS -o answer-gzip.json -w '%{http_code}\\n' -H 'Content-Type: application/json' \\
  -H 'Content-Encoding: gzip' --data-binary @trace.json.gz http://127.0.0.1:4318/v1/traces
curl -sS -w ' %{http_code}\\n' -H 'Content-Type: application/json' \\
  --data-binary '{"resourceSpans": [' http://127.0.0.1:4318/v1/traces
kill %1; wait %1 || true
cat serve.out
echo "answer: $(cat answer.json)"
grpc-overhead sql --store ./store --format json \\
  "SELECT SpanId, ParentSpanId, SpanKind, ServiceName, Duration FROM otel_traces ORDER BY SpanId"
"""


def _env() -> dict[str, str]:
    return quickstart.clean_env(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    )


def test_plain_serve_takes_otlp_http_on_4318_and_stores_what_curl_posts(tmp_path: Path) -> None:
    (tmp_path / "trace.json").write_text(json.dumps(TRACE), encoding="utf-8")
    run = quickstart.run_block(
        PLAIN_SERVE_AND_CURL, tmp_path, _env(), 180, ports=(4317, 4318, 4327)
    )
    assert run.returncode == 0, run.output
    assert "OTLP/HTTP listening on http://127.0.0.1:4318/v1/traces" in run.output
    assert "200 application/json" in run.output and "answer: {}" in run.output
    assert "invalid JSON" in run.output and " 400" in run.output  # the broken body, refused
    # The gzip'd copy is the same request: recognised as a resend, not stored twice.
    assert "intake stopped: 2 spans stored, 0 rejected" in run.output, run.output
    rows = json.loads(run.output[run.output.index("[", run.output.index("answer: ") + 10) :])
    assert [(row["SpanKind"], row["ParentSpanId"], row["Duration"]) for row in rows] == [
        ("Client", "", 4_000_000),
        ("Server", "eee19b7ec3c1b174", 2_000_000),
    ]
    assert {row["ServiceName"] for row in rows} == {"curl"}


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


def test_an_explicit_otlp_http_port_taken_is_a_clear_error(tmp_path: Path, held_port: int) -> None:
    import subprocess

    from grpc_overhead.processes import child_env

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "serve",
            "--store",
            str(tmp_path / "store"),
            "--otlp-port",
            "0",
            "--otlp-http-port",
            str(held_port),
            "--no-app",
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env=child_env(),
    )
    assert done.returncode == 2, done.stderr
    assert f"cannot listen for OTLP/HTTP on 127.0.0.1:{held_port}" in done.stderr
    assert f"held by pid {os.getpid()} (" in done.stderr and "--otlp-http-port N|off" in done.stderr
    assert "Traceback" not in done.stderr

"""The README's quickstart blocks, run verbatim: "Try it" and "Instrument your own service".

Each block is taken from README.md as it stands (``harness.quickstart``) and run
with ``bash -e`` in a checkout-like scratch directory, in a network namespace
of its own, so its default ports are the real defaults: nothing configures an
endpoint, and the spans must still reach ``serve``. Real processes throughout:
``serve`` (intake, chDB, the app), the prediction service and load generator,
or a plain grpcio server and client under ``opentelemetry-instrument`` in a
venv holding only grpc-overhead-instrumentation and OpenTelemetry's packages.
Call counts are the small ones the blocks document; every run is bounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import quickstart

pytestmark = pytest.mark.e2e

#: Longest a block may take (serve's start, a few hundred calls, the report).
BLOCK_TIMEOUT_S = 240.0
#: Every phase a call instrumented on both sides has (report --format json).
BOTH_SIDES = (
    "client_serialize",
    "request_network",
    "server_queue",
    "request_deserialize",
    "processing",
    "response_serialize",
    "response_network",
    "client_deserialize",
    "total",
)


def _phases(output: str, method: str) -> dict[str, list[float]]:
    """The block's own ``report`` table for ``method``: phase -> [p50, p90, p99, mean, calls]."""
    table = output[output.index(f"{method}: ") :]
    rows = {}
    for line in table.splitlines()[1:]:
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 6 and cells[0] in BOTH_SIDES and cells[0] not in rows:
            rows[cells[0]] = [float(c.replace(",", "")) for c in cells[1:]]
    return rows


def _check_defaults_met(run: quickstart.BlockRun, spans: int) -> None:
    """serve took OTLP on the standard port, the app came up, every span arrived."""
    assert run.returncode == 0, run.output[-4000:]
    assert "OTLP also on 127.0.0.1:4317" in run.output, run.output[-4000:]
    assert "app: http://127.0.0.1:8501" in run.output  # the URL the README names
    assert f"intake stopped: {spans} spans stored, 0 rejected" in run.output, run.output[-4000:]
    assert "Failed to export" not in run.output
    assert "Traceback" not in run.output


def test_try_it_runs_verbatim_and_reaches_serve_with_no_endpoint(tmp_path: Path) -> None:
    script = quickstart.block("try-it")
    assert "--calls 300" in script  # the count checked below is the one the block documents
    run = quickstart.run_block(
        script, quickstart.checkout_like(tmp_path), quickstart.clean_env(), BLOCK_TIMEOUT_S
    )
    _check_defaults_met(run, spans=600)  # 300 calls, a client and a server span each
    assert "grpc_overhead.prediction.v1.Predictor/Predict: 300 calls" in run.output

    phases = _phases(run.output, "grpc_overhead.prediction.v1.Predictor/Predict")
    assert {phase: row[-1] for phase, row in phases.items()} == dict.fromkeys(BOTH_SIDES, 300)


def test_instrument_your_own_service_runs_verbatim(tmp_path: Path) -> None:
    script = quickstart.block("own-service")
    assert "--calls 200" in script and "--port 50061" in script
    venv = quickstart.user_venv(quickstart.install_line(script))
    run = quickstart.run_block(
        script, quickstart.checkout_like(tmp_path), venv.env(), BLOCK_TIMEOUT_S
    )
    _check_defaults_met(run, spans=400)
    assert "200 calls to 127.0.0.1:50061" in run.output  # the client's own summary
    assert "example.Echo/Say: 200 calls" in run.output  # report's table

    # Both sides instrumented and joined into one call: every phase of every call.
    phases = _phases(run.output, "example.Echo/Say")
    assert {phase: row[-1] for phase, row in phases.items()} == dict.fromkeys(BOTH_SIDES, 200)
    # The example server spends --work-ms (2 ms by default) of CPU per call: processing p50.
    assert phases["processing"][0] >= 1900


def test_running_it_for_a_team_runs_verbatim(tmp_path: Path) -> None:
    """TLS and tokens on the intake, passwords for readers and the app, from files; the
    service and load generator send with the standard variables; report and curl read."""
    script = quickstart.block("team")
    assert "--calls 100" in script
    run = quickstart.run_block(
        script, quickstart.checkout_like(tmp_path), quickstart.clean_env(), BLOCK_TIMEOUT_S
    )
    assert run.returncode == 0, run.output[-4000:]
    assert "intake listening on 0.0.0.0:4327 (TLS and tokens)" in run.output
    assert "OTLP also on 0.0.0.0:4317" in run.output, run.output[-4000:]
    assert "clickhouse http: https://127.0.0.1:8123" in run.output
    assert "app: https://" in run.output
    assert "warning" not in run.output.lower() and "refusing" not in run.output
    assert "grpc_overhead.prediction.v1.Predictor/Predict: 100 calls" in run.output
    assert "\n200\n" in run.output  # curl: every span of the 100 calls, through HTTPS
    assert "intake stopped: 200 spans stored, 0 rejected" in run.output, run.output[-4000:]
    assert "Failed to export" not in run.output and "Traceback" not in run.output
    secrets = [
        (tmp_path / "team" / name).read_text().strip()
        for name in ("tokens", "http-password", "app-password")
    ]
    assert all(secret and secret not in run.output for secret in secrets)

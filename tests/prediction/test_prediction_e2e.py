"""`grpc-overhead service` and `grpc-overhead load` as real processes."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from grpc_overhead.load_generator.stats import check_summary as summary_problems
from grpc_overhead.processes import ServiceProcess, offline_env, run_load

pytestmark = pytest.mark.e2e


def check_summary(summary: dict[str, Any], calls: int | None = None) -> None:
    assert summary_problems(summary) == []
    if calls is not None:
        assert summary["calls"] == calls
    if summary["ok"]:
        latency = summary["latency_ms"]
        assert latency["min"] > 0
        assert summary["histogram"][-1]["le_ms"] == latency["max"]


@pytest.mark.parametrize("mode", ["unary", "stream", "batch", "chunks", "upload"])
def test_every_mode(service, mode: str) -> None:
    result = run_load(
        "--target",
        service.target,
        "--mode",
        mode,
        "--calls",
        "20",
        "--concurrency",
        "2",
        "--entities",
        "50",
        "--features",
        "16",
        "--stream-messages",
        "3",
        "--batch-size",
        "3",
        "--chunk-entities",
        "20",
        "--json",
        "--run-id",
        f"e2e-{mode}",
    )
    summary = result.summary
    check_summary(summary, calls=20)
    assert summary["ok"] == 20, summary["error_messages"]
    assert summary["run_id"] == f"e2e-{mode}"
    assert summary["server_instances"] == {"e2e-service": 20}
    per_call = {"stream": 3, "batch": 3}.get(mode, 1) * 50
    assert summary["predictions"] == 20 * per_call
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("compression", ["gzip", "deflate", "zstd", "lz4", "snappy"])
def test_compressions(service, compression: str) -> None:
    summary = run_load(
        "--target",
        service.target,
        "--calls",
        "10",
        "--compression",
        compression,
        "--entities",
        "100",
        "--json",
    ).summary
    check_summary(summary, calls=10)
    assert summary["ok"] == 10, summary["error_messages"]
    payload = summary["payload"]
    if compression in ("zstd", "lz4", "snappy"):
        assert (payload["encoding"], payload["codec"], payload["grpc_compression"]) == (
            "packed",
            compression,
            "none",
        )
        assert payload["request_bytes"] < payload["raw_feature_bytes"]
    else:
        assert (payload["encoding"], payload["grpc_compression"]) == ("repeated", compression)


def test_text_summary(service) -> None:
    result = run_load("--target", service.target, "--calls", "15", "--mode", "stream")
    assert result.returncode == 0, result.stderr
    for heading in (
        "Summary:",
        "Requests/sec:",
        "Response time histogram",
        "Latency distribution",
        "99.9 % in",
        "Status code distribution:",
        "[OK]\t15 responses",
    ):
        assert heading in result.stdout, heading


def test_round_robin_over_targets(service) -> None:
    with ServiceProcess(["--instance-id", "second", "--workers", "2"], env=offline_env()) as other:
        summary = run_load(
            "--target",
            f"{service.target},{other.target}",
            "--calls",
            "20",
            "--channels",
            "2",
            "--json",
        ).summary
    check_summary(summary, calls=20)
    assert summary["server_instances"] == {"e2e-service": 10, "second": 10}


def test_open_loop_poisson(service) -> None:
    result = run_load(
        "--target",
        service.target,
        "--rps",
        "40",
        "--duration",
        "2",
        "--entities",
        "20",
        "--json",
    )
    summary = result.summary
    check_summary(summary)
    assert 20 <= summary["calls"] <= 160  # Poisson(80): far outside is a scheduler bug
    open_loop = summary["open_loop"]
    assert open_loop["rps_target"] == 40
    assert 0 <= open_loop["late_calls"] <= summary["calls"]
    assert open_loop["start_lag_ms"]["max"] >= open_loop["start_lag_ms"]["p50"] >= 0
    assert summary["duration_s"] < 2 + 10  # arrivals stop at 2 s; stragglers are bounded


def test_duration_bounded_closed_loop(service) -> None:
    result = run_load("--target", service.target, "--duration", "1", "--entities", "20", "--json")
    summary = result.summary
    check_summary(summary)
    assert summary["calls"] > 0
    assert 0.9 <= summary["duration_s"] < 5


def test_model_cost_and_server_options() -> None:
    args = [
        "--model-cost-ms",
        "5",
        "--workers",
        "2",
        "--max-concurrent-rpcs",
        "64",
        "--compression",
        "gzip",
    ]
    with ServiceProcess(args, env=offline_env()) as svc:
        summary = run_load("--target", svc.target, "--calls", "12", "--json").summary
    check_summary(summary, calls=12)
    assert summary["ok"] == 12
    assert summary["latency_ms"]["min"] >= 4  # every call burns 5 ms of server CPU


def test_max_connection_age_reconnects_without_errors() -> None:
    with ServiceProcess(["--max-connection-age-s", "0.5"], env=offline_env()) as svc:
        summary = run_load(
            "--target",
            svc.target,
            "--duration",
            "2",
            "--concurrency",
            "2",
            "--entities",
            "20",
            "--json",
        ).summary
    check_summary(summary)
    assert summary["calls"] > 0 and summary["errors"] == 0, summary["error_messages"]


def test_aio_service() -> None:
    with ServiceProcess(["--aio", "--workers", "2"], env=offline_env()) as svc:
        for mode in ("unary", "stream", "upload"):
            summary = run_load(
                "--target", svc.target, "--mode", mode, "--calls", "10", "--json"
            ).summary
            check_summary(summary, calls=10)
            assert summary["ok"] == 10, summary["error_messages"]
        assert svc.stop() == 0


def test_tls_end_to_end(tmp_path: Path) -> None:
    tls_dir = tmp_path / "tls"
    with ServiceProcess(["--tls", "--tls-dir", str(tls_dir)], env=offline_env()) as svc:
        assert svc.tls_ca == tls_dir / "cert.pem" and svc.tls_ca.is_file()
        summary = run_load(
            "--target", svc.target, "--tls-ca", str(svc.tls_ca), "--calls", "10", "--json"
        ).summary
        check_summary(summary, calls=10)
        assert summary["ok"] == 10 and summary["config"]["tls"] is True
        # a plaintext client cannot talk to it: a clear message, exit 2
        plain = run_load("--target", svc.target, "--calls", "1", "--connect-timeout", "1")
        assert plain.returncode == 2
        assert "cannot connect" in plain.stderr and "Traceback" not in plain.stderr
        # nor a TLS client that does not trust the certificate
        untrusted = run_load(
            "--target", svc.target, "--tls", "--calls", "1", "--connect-timeout", "1"
        )
        assert untrusted.returncode == 2 and "TLS" in untrusted.stderr


def test_tls_temporary_directory_is_removed() -> None:
    with ServiceProcess(["--tls"], env=offline_env()) as svc:
        ca = svc.tls_ca
        assert ca is not None and ca.is_file()
        summary = run_load(
            "--target", svc.target, "--tls-ca", str(ca), "--calls", "3", "--json"
        ).summary
        assert summary["ok"] == 3
    assert not ca.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_stop_gracefully(sig: int) -> None:
    with ServiceProcess(["--grace-s", "2"], env=offline_env()) as svc:
        started = time.monotonic()
        assert svc.stop(sig=sig) == 0
        assert time.monotonic() - started < 10
        assert "Traceback" not in svc.stderr_text()


def test_busy_port_is_a_clear_error() -> None:
    with ServiceProcess(env=offline_env()) as svc:
        taken = ServiceProcess(["--port", str(svc.port)], env=offline_env())
        with pytest.raises(Exception, match="exited with 2"):
            taken.start()
        assert "cannot listen on" in taken.stderr_text()
        assert "Traceback" not in taken.stderr_text()


def test_no_collector_processes_exit_promptly() -> None:
    """Default exporter settings, nothing listening at the OTLP endpoint: spans are dropped
    quietly and neither process lingers at exit."""
    env = offline_env(exporter_timeout_s=None)
    with ServiceProcess(env=env) as svc:
        result = run_load("--target", svc.target, "--calls", "30", "--json", env=env)
        check_summary(result.summary, calls=30)
        assert result.elapsed_s < 10, f"load took {result.elapsed_s:.1f} s to exit"
        started = time.monotonic()
        assert svc.stop() == 0
        assert time.monotonic() - started < 10

"""The real pipeline the harness injects causes into: ``serve`` (intake + chDB store), the
instrumented ``service`` and ``load``, and the analyzer's report per run id.

Spans go straight to the intake over OTLP (the collector adds nothing the
attribution depends on; ``tests/pipeline`` covers the collector path). The
store is read only after ``serve`` stopped, since a chDB directory belongs to
one process; ``reports`` reads every run of a scenario in one subprocess (the
test process may already own another chDB path).
"""

from __future__ import annotations

import glob
import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from grpc_overhead.collector.runner import CollectorProcess
from grpc_overhead.processes import (
    ServiceProcess,
    free_port,
    offline_env,
    run_load,
    stop_process,
)

SKEWED_HOST = "skewed-host"


class ServeProcess:
    """``grpc-overhead serve`` on a store directory, until SIGTERM (which flushes)."""

    def __init__(
        self,
        store: Path,
        otlp_port: int,
        otlp_http_port: int | None = None,
        *,
        clickhouse_http_port: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``otlp_http_port``: also take OTLP/HTTP there (0: a free one; ``http_url`` says
        where); None: gRPC only. ``clickhouse_http_port``: serve's ClickHouse HTTP
        interface there (``clickhouse_url``), to read the store while serve owns it."""
        command = [
            sys.executable,
            "-m",
            "grpc_overhead",
            "serve",
            "--store",
            str(store),
            "--otlp-port",
            str(otlp_port),
            "--no-app",
            *extra_args,
        ]
        if otlp_http_port is not None:
            command += ["--otlp-http-port", str(otlp_http_port)]
        self.clickhouse_url = ""
        if clickhouse_http_port is not None:
            command += ["--http-port", str(clickhouse_http_port)]
            self.clickhouse_url = f"http://127.0.0.1:{clickhouse_http_port}"
        #: Where OTLP/HTTP senders post (``.../v1/traces``), '' without one.
        self.http_url = ""
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=offline_env(),
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"serve exited: {self.process.stderr.read()}")
            if "OTLP/HTTP listening on " in line:
                self.http_url = line.split("OTLP/HTTP listening on ", 1)[1].strip()
            if "store: " in line:  # printed after both listeners
                return
        self.stop()
        raise RuntimeError("serve did not start within 60 s")

    @property
    def http_endpoint(self) -> str:
        """``OTEL_EXPORTER_OTLP_ENDPOINT`` for OTLP/HTTP senders (they add /v1/traces)."""
        return self.http_url.removesuffix("/v1/traces")

    def stop(self) -> None:
        stop_process(self.process)


@contextmanager
def through_collector(store: Path) -> Iterator[int]:
    """``serve`` on ``store`` behind the real embedded collector; yields the collector's OTLP
    port. Leaving stops the collector first (SIGTERM: it flushes to the intake), then serve."""
    intake_port, collector_port = free_port(), free_port()
    serve = ServeProcess(store, intake_port)
    try:
        with CollectorProcess(
            "embedded",
            otlp_port=collector_port,
            intake=f"127.0.0.1:{intake_port}",
            health_port=free_port(),
        ):
            yield collector_port
    finally:
        serve.stop()


def report(store: Path, *extra: str) -> dict:
    """``grpc-overhead report --format json`` on a stopped store (asserts it succeeded)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_overhead",
            "report",
            "--store",
            str(store),
            "--format",
            "json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def reports(
    store: Path, run_ids: Sequence[str], *, findings: bool = False
) -> dict[str, dict[str, Any]]:
    """The JSON report (``report.to_json``) of each run, or with ``findings`` its findings
    (``Findings.to_json``), read in one subprocess (one engine start)."""
    flag = ["--findings"] if findings else []
    done = subprocess.run(
        [sys.executable, "-m", "harness.ground_truth.read_reports", *flag, str(store), *run_ids],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        env=offline_env(),
        cwd=Path(__file__).resolve().parents[2],
    )
    if done.returncode != 0:
        raise RuntimeError(f"reading reports failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def libfaketime() -> str:
    """libfaketime preloaded into the service itself: the ``faketime`` wrapper forks, so
    SIGTERM would stop the wrapper and orphan the service before it flushed its spans."""
    found = glob.glob("/usr/lib/*/faketime/libfaketime.so.1")
    if not found:
        raise RuntimeError("Debian's faketime is missing: run make system-packages")
    return found[0]


class Pipeline:
    """One scenario's processes: a serve on a fresh store, and services/loads pointed at it.

    ``with Pipeline(store_dir) as pipeline:`` ... ``pipeline.reports(run_ids)`` after the
    block (serve stopped and flushed).
    """

    def __init__(self, store: Path) -> None:
        self.store = store
        self.intake_port = free_port()
        self.endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.intake_port}"}
        self.serve: ServeProcess | None = None

    def __enter__(self) -> Pipeline:
        self.serve = ServeProcess(self.store, self.intake_port)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.serve is not None:
            self.serve.stop()

    def service_env(self, skew_s: float | None = None, host: str = SKEWED_HOST) -> dict[str, str]:
        """The service's environment. With ``skew_s`` (even 0.0) libfaketime is preloaded:
        its wall clock is shifted by that much and, when shifted, it declares ``host`` as a
        server on another machine would. A preload with 0.0 is the control for a skewed run:
        the preload itself slows gRPC core's clock reads a little."""
        env = offline_env(OTEL_SERVICE_NAME="predictor", **self.endpoint)
        if skew_s is None:
            return env
        env |= {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME": f"{skew_s:+.6f}",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }
        if skew_s:
            env["OTEL_RESOURCE_ATTRIBUTES"] = f"host.name={host}"
        return env

    @contextmanager
    def service(
        self,
        *args: str,
        skew_s: float | None = None,
        host: str = SKEWED_HOST,
        env: dict[str, str] | None = None,
    ) -> Iterator[ServiceProcess]:
        environment = self.service_env(skew_s, host) | (env or {})
        with ServiceProcess(list(args), env=environment) as service:
            yield service

    def load(
        self,
        target: str,
        run_id: str,
        *args: str,
        timeout_s: float = 180,
        env: dict[str, str] | None = None,
    ) -> dict:
        """One bounded ``grpc-overhead load`` run (``--calls`` must be among ``args``);
        its ``--json`` summary. ``env`` adds to the load generator's environment."""
        assert "--calls" in args, "loads are bounded: pass --calls"
        environment = offline_env(OTEL_SERVICE_NAME="loadgen", **self.endpoint) | (env or {})
        result = run_load(
            "--target",
            target,
            "--run-id",
            run_id,
            "--json",
            "--duration",
            "120",
            *args,
            env=environment,
            timeout_s=timeout_s,
        )
        summary = result.summary
        if summary["errors"]:
            raise RuntimeError(
                f"load {run_id}: {summary['errors']} errors {summary['error_messages']}"
            )
        return summary

    def reports(self, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        return reports(self.store, run_ids)

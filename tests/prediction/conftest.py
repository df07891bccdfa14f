"""Fixtures for the prediction service tests.

Subprocesses run with ``offline_env()``: the OTLP endpoint is a loopback port
where nothing listens (spans are dropped, never sent to a collector a developer
happens to run on :4317) and each export attempt is bounded, so nothing can
hang on telemetry. test_prediction_e2e.py keeps the exporter's default timeout
in one test on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grpc_overhead.processes import ServiceProcess, offline_env


@pytest.fixture(scope="session")
def service() -> Iterator[ServiceProcess]:
    """One `grpc-overhead service` subprocess shared by the e2e tests of this folder."""
    args = ["--workers", "4", "--instance-id", "e2e-service"]
    with ServiceProcess(args, env=offline_env()) as svc:
        yield svc

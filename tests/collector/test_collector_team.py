"""The team config for real: SDK -> collector (team.yaml) -> TLS + bearer token -> serve.

The real collector exports over TLS with a token from its file into a real serve with
--tls-cert/--tls-key and --auth-token-file; one with a token serve does not hold stores
nothing, and serve counts its requests as unauthenticated.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from grpc_overhead.collector import CollectorProcess
from grpc_overhead.instrumentation import environment
from grpc_overhead.processes import offline_env
from harness.browser import start_serve_http
from tests.analyzer.certificates import Authority
from tests.collector.test_collector_pipeline import _send_one_span

pytestmark = pytest.mark.e2e


def _stored(serve_text: str) -> int:
    found = re.search(r"intake stopped: (\d+) spans stored", serve_text)
    assert found, serve_text
    return int(found.group(1))


def test_the_team_collector_sends_over_tls_with_its_token(
    collector_bin: Path, free_port: Callable[[], int], tmp_path: Path
) -> None:
    authority = Authority(tmp_path / "ca")
    certificate = authority.issue("serve", server=True)
    (tmp_path / "serve-tokens").write_text("collector-a-token\n")
    (tmp_path / "good-token").write_text("collector-a-token\n")
    (tmp_path / "bad-token").write_text("not-a-token-of-serve\n")
    serve = start_serve_http(
        tmp_path / "store",
        offline_env(),
        "--no-http",
        "--tls-cert",
        str(certificate.certificate),
        "--tls-key",
        str(certificate.key),
        "--auth-token-file",
        str(tmp_path / "serve-tokens"),
    )
    try:
        intake = re.search(r"^intake listening on (\S+) \(TLS and tokens\)$", serve.text(), re.M)
        assert intake, serve.text()

        def collector(token: str) -> CollectorProcess:
            return CollectorProcess(
                "team",
                binary=collector_bin,
                otlp_port=free_port(),
                health_port=free_port(),
                intake=intake.group(1),
                env={
                    environment.INTAKE_CA: str(authority.certificate),
                    environment.INTAKE_TOKEN_FILE: str(tmp_path / token),
                    environment.INTAKE_SERVER_NAME: "localhost",
                    environment.COLLECTOR_STORAGE_DIR: str(tmp_path / f"queue-{token}"),
                },
            )

        with collector("good-token") as good:
            for _ in range(3):
                _send_one_span(good.otlp_endpoint)
        with collector("bad-token") as bad:
            _send_one_span(bad.otlp_endpoint)
            deadline = time.monotonic() + 30
            while "Unauthenticated" not in bad.logs() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert "Unauthenticated" in bad.logs(), bad.logs()
            assert "not-a-token-of-serve" not in bad.logs()
    finally:
        assert serve.stop() == 0, serve.text()
    text = serve.text()
    assert _stored(text) == 3, text
    unauthenticated = re.search(r"(\d+) unauthenticated", text)
    assert unauthenticated and int(unauthenticated.group(1)) >= 1, text
    assert "collector-a-token" not in text

"""The REST baseline service stops on SIGTERM through its own flush, not by the signal."""

from __future__ import annotations

import pytest

from grpc_overhead.processes import ServiceProcess, offline_env

pytestmark = pytest.mark.e2e


def test_sigterm_ends_the_rest_service_after_its_spans_are_flushed() -> None:
    # uvicorn re-raises the signal that stopped it; with the default handler the process
    # died there (exit -15) before its last spans were flushed (the experiment's REST cell
    # then lost its last calls' server halves). It must return from serve() instead.
    with ServiceProcess(["--rest"], env=offline_env()) as service:
        assert service.port
    assert service.process is not None
    assert service.process.returncode == 0, service.process.returncode

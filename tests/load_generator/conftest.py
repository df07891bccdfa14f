"""An in-process prediction server and in-memory span pipeline for load generator tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grpc_overhead.prediction.server import ServiceConfig, build_server


@pytest.fixture(scope="module")
def target(pipeline) -> Iterator[str]:
    server, port = build_server(ServiceConfig(workers=4, instance_id="load-tests"), pipeline)
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(None)

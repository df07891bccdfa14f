"""An OTLP/HTTP intake for a test module, and how its tests talk to it: ``running`` (an
intake with its HTTP receiver on a free port, over a real chDB store, one per module),
``store`` (emptied for the test) and ``intake``; import ``intake_fixture``,
``running_fixture`` and ``store_fixture`` into the test module (``# noqa: F401``).
"""

from __future__ import annotations

import http.client
import itertools
import json
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from google.rpc import status_pb2

from grpc_overhead.analyzer.intake import Intake
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.otlp_requests import request, running_intake, span

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
TRACE_ID = "5b8efff798038103d269b633813fc60c"
SPAN_ID = "eee19b7ec3c1b174"


@pytest.fixture(scope="module", name="running")
def running_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Intake]]:
    yield from running_intake(tmp_path_factory.mktemp("intake-http"), http_port=0)


@pytest.fixture(name="store")
def store_fixture(running: tuple[Store, Intake]) -> Store:
    running[0].command("TRUNCATE TABLE otel_traces")
    return running[0]


@pytest.fixture(name="intake")
def intake_fixture(running: tuple[Store, Intake], store: Store) -> Intake:
    return running[1]


def post(
    url: str, body: bytes, headers: dict[str, str], path: str = "/v1/traces", method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def status_of(body: bytes, headers: dict[str, str]) -> status_pb2.Status:
    """The ``google.rpc.Status`` of an error answer, in the encoding it came in."""
    if headers["Content-Type"] == "application/json":
        document = json.loads(body)
        return status_pb2.Status(code=document["code"], message=document["message"])
    return status_pb2.Status.FromString(body)


_numbers = itertools.count(100)


def fresh(service: str = "svc") -> bytes:
    """A request no earlier test sent: the intake recognises a resent request (its digest)
    and does not store it again, even after the table was emptied."""
    return request(span(next(_numbers)), service=service)


def fresh_span_id() -> int:
    """A span number no earlier request used (``span(fresh_span_id())``)."""
    return next(_numbers)


def count(store: Store) -> int:
    return int(store.query("SELECT count() AS n FROM otel_traces")["n"][0])

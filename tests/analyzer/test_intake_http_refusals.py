"""The intake's OTLP/HTTP receiver refuses what the OTLP/HTTP specification says it must:
every bad body answered with the specified status and nothing stored, sizes over the
limit unread, a full intake or a failing store asking to retry later, and hostile
senders (a connection flood, one vanishing mid-body) costing no thread or traceback.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import struct
import time
from urllib.parse import urlsplit

import pytest
from google.rpc import code_pb2

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.otlp_http import (  # noqa: F401
    JSON,
    PROTOBUF,
    SPAN_ID,
    TRACE_ID,
    count,
    fresh,
    fresh_span_id,
    intake_fixture,
    post,
    running_fixture,
    status_of,
    store_fixture,
)
from tests.analyzer.otlp_requests import request, span, tricky_request

pytestmark = pytest.mark.e2e


BOMB = gzip.compress(b"\0" * (65 << 20))  # 65 MiB of zeros, 64 KiB on the wire


@pytest.mark.parametrize(
    ("body", "headers", "status", "code", "says"),
    [
        (tricky_request()[:-7], PROTOBUF, 400, code_pb2.INVALID_ARGUMENT, "cannot decode"),
        (b'{"resourceSpans": [', JSON, 400, code_pb2.INVALID_ARGUMENT, "invalid JSON"),
        (b"[1, 2]", JSON, 400, code_pb2.INVALID_ARGUMENT, "must be an object"),
        (b'{"a": "\xff"}', JSON, 400, code_pb2.INVALID_ARGUMENT, "UTF-8"),
        (b"[" * 100_000, JSON, 400, code_pb2.INVALID_ARGUMENT, ""),
        (
            json.dumps(
                {
                    "resourceSpans": [
                        {"scopeSpans": [{"spans": [{"traceId": "not-hex!", "spanId": SPAN_ID}]}]}
                    ]
                }
            ).encode(),
            JSON,
            400,
            code_pb2.INVALID_ARGUMENT,
            "traceId is not hex",
        ),
        (
            json.dumps(
                {
                    "resourceSpans": [
                        {
                            "scopeSpans": [
                                {
                                    "spans": [
                                        {
                                            "traceId": TRACE_ID,
                                            "spanId": SPAN_ID,
                                            "startTimeUnixNano": "soon",
                                        }
                                    ]
                                }
                            ]
                        }
                    ]
                }
            ).encode(),
            JSON,
            400,
            code_pb2.INVALID_ARGUMENT,
            "startTimeUnixNano",
        ),
        (b"hello", {"Content-Type": "text/plain"}, 415, code_pb2.INVALID_ARGUMENT, "text/plain"),
        (b"x", {**PROTOBUF, "Content-Encoding": "br"}, 415, code_pb2.INVALID_ARGUMENT, "'br'"),
        (
            b"not gzip",
            {**PROTOBUF, "Content-Encoding": "gzip"},
            400,
            code_pb2.INVALID_ARGUMENT,
            "bad gzip",
        ),
        (
            gzip.compress(tricky_request())[:-20],
            {**PROTOBUF, "Content-Encoding": "gzip"},
            400,
            code_pb2.INVALID_ARGUMENT,
            "truncated",
        ),
        (
            BOMB,
            {**PROTOBUF, "Content-Encoding": "gzip"},
            413,
            code_pb2.RESOURCE_EXHAUSTED,
            "inflates to more than",
        ),
    ],
    ids=[
        "truncated-protobuf",
        "invalid-json",
        "json-array",
        "json-not-utf8",
        "json-too-deep",
        "json-bad-hex",
        "json-bad-int64",
        "wrong-content-type",
        "unknown-encoding",
        "bad-gzip",
        "truncated-gzip",
        "gzip-bomb",
    ],
)
def test_bad_bodies_get_the_specified_answer_and_store_nothing(
    intake: Intake, store: Store, body: bytes, headers: dict, status: int, code: int, says: str
) -> None:
    answered, answer_headers, answer = post(intake.http_url, body, headers)
    assert answered == status, answer
    error = status_of(answer, answer_headers)
    assert error.code == code and says in error.message, error.message
    assert error.message.startswith("grpc-overhead intake:")
    assert "Retry-After" not in answer_headers  # not retryable
    assert count(store) == 0
    # ... and the receiver keeps serving.
    assert post(intake.http_url, fresh(), PROTOBUF)[0] == 200
    assert count(store) == 1


def test_declared_sizes_over_the_limit_are_refused_unread(store: Store) -> None:
    with Intake(store, IntakeConfig(port=0, http_port=0, max_message_bytes=1000)) as small:
        status, headers, answer = post(small.http_url, b"\0" * 2000, PROTOBUF)
        assert status == 413 and headers.get("Connection") == "close"
        assert "2000 bytes, more than the limit of 1000" in status_of(answer, headers).message


def test_other_paths_and_methods(intake: Intake, store: Store) -> None:
    """metrics and logs are not taken (UNIMPLEMENTED on gRPC): 404 saying so."""
    for path, signal in (("/v1/metrics", "metrics"), ("/v1/logs", "logs")):
        status, headers, answer = post(intake.http_url, b"", PROTOBUF, path=path)
        error = status_of(answer, headers)
        assert status == 404 and error.code == code_pb2.UNIMPLEMENTED
        assert f"takes traces only (/v1/traces), not {signal}" in error.message
    assert post(intake.http_url, b"", PROTOBUF, path="/v2/traces")[0] == 404
    status, headers, _ = post(intake.http_url, b"", {}, method="GET")
    assert status == 405 and headers["Allow"] == "POST"


def test_a_full_intake_answers_429_with_retry_after(store: Store) -> None:
    with Intake(
        store, IntakeConfig(port=0, http_port=0, batch_bytes=100, max_pending_bytes=100)
    ) as full:
        data = request(*(span(fresh_span_id()) for _ in range(20)))
        status, headers, answer = post(full.http_url, data, PROTOBUF)
        assert status == 429 and headers["Retry-After"] == "1"
        assert "buffer full" in status_of(answer, headers).message
        assert full.stats().requests_refused == 1
    assert count(store) == 0


def test_a_failing_store_answers_503_with_retry_after(store: Store) -> None:
    """The store fails (its table is gone, in a database of this test's own)."""
    schema = SchemaOptions.for_store(store, database="http_broken")
    with Intake(store, IntakeConfig(port=0, http_port=0, schema=schema)) as broken:
        store.command("DROP TABLE http_broken.otel_traces")
        status, headers, answer = post(broken.http_url, fresh(), PROTOBUF)
        assert status == 503 and headers["Retry-After"] == "1", answer
        error = status_of(answer, headers)
        assert error.code == code_pb2.UNAVAILABLE and "otel_traces" in error.message
        assert broken.stats().requests_refused == 1


def test_one_connection_carries_many_requests_and_chunked_bodies(
    intake: Intake, store: Store
) -> None:
    """Keep-alive, as SDK exporters reuse their connection; chunked bodies are read too."""
    parts = urlsplit(intake.http_url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        for _ in range(5):
            connection.request("POST", "/v1/traces", body=fresh(), headers=PROTOBUF)
            response = connection.getresponse()
            assert response.status == 200
            response.read()
        data = fresh()
        chunks = iter([data[:10], data[10:]])
        connection.request("POST", "/v1/traces", body=chunks, headers=PROTOBUF)
        response = connection.getresponse()
        assert response.status == 200, response.read()
        response.read()
    finally:
        connection.close()
    assert count(store) == 6


def test_a_connection_flood_gets_503_not_a_thread_each(store: Store) -> None:
    """Connections beyond the cap are answered 503 (Retry-After) at once and closed; once
    the idle ones go, requests are stored again."""
    config = IntakeConfig(port=0, http_port=0, http_max_connections=4)
    with Intake(store, config) as capped:
        idle = [socket.create_connection(("127.0.0.1", capped.http_port)) for _ in range(4)]
        try:
            time.sleep(0.2)  # the server has taken the four (a thread each)
            # The fifth is answered at once, before it sends anything, and closed (a sender
            # already writing its body may see the reset instead: retryable either way).
            with socket.create_connection(("127.0.0.1", capped.http_port), timeout=10) as fifth:
                answer = b"".join(iter(lambda: fifth.recv(4096), b""))
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"Retry-After: 1" in answer and b"too many open connections" in answer
        finally:
            for connection in idle:
                connection.close()
        deadline = time.monotonic() + 10
        while _status_or_reset(capped.http_url) != 200:
            assert time.monotonic() < deadline, "the cap was never released"
            time.sleep(0.1)
    assert count(store) == 1


def _status_or_reset(url: str) -> int | None:
    """A request's status, or None when the connection was cut while it was sent: until
    the idle connections' threads have ended, the cap still answers 503 at once and closes,
    which a sender still writing its body sees as a reset (a loaded machine: once in a
    fresh-clone run)."""
    try:
        return post(url, fresh(), PROTOBUF)[0]
    except (BrokenPipeError, ConnectionResetError):
        return None


def test_a_sender_vanishing_mid_body_leaves_no_traceback(
    intake: Intake, store: Store, capfd: pytest.CaptureFixture[str]
) -> None:
    """Reset in the middle of its body (a killed exporter): nothing stored, nothing printed."""
    with socket.create_connection(("127.0.0.1", intake.http_port)) as sender:
        sender.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: 100000\r\n\r\n" + fresh()[:10]
        )
        time.sleep(0.2)
        sender.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert post(intake.http_url, fresh(), PROTOBUF)[0] == 200  # still serving
    time.sleep(0.2)
    assert "Traceback" not in capfd.readouterr().err
    assert count(store) == 1

"""The intake's OTLP/HTTP receiver: real senders in, rows in a real chDB store out.

The same rows whichever way a request comes (gRPC, HTTP protobuf, HTTP JSON, gzip'd or
not), OTLP/JSON as the specification spells it, and every bad body answered the way
the OTLP/HTTP specification says, with nothing stored.
"""

from __future__ import annotations

import gzip
import http.client
import itertools
import json
import socket
import struct
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store.base import Store
from harness.fault_load_http import encode
from tests.analyzer.otlp_requests import (
    python_rows,
    request,
    running_intake,
    span,
    stored_rows,
    tricky_request,
)

pytestmark = pytest.mark.e2e

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
TRACE_ID = "5b8efff798038103d269b633813fc60c"
SPAN_ID = "eee19b7ec3c1b174"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, Intake]]:
    yield from running_intake(tmp_path_factory.mktemp("intake-http"), http_port=0)


@pytest.fixture
def store(running: tuple[Store, Intake]) -> Store:
    running[0].command("TRUNCATE TABLE otel_traces")
    return running[0]


@pytest.fixture
def intake(running: tuple[Store, Intake], store: Store) -> Intake:
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


def count(store: Store) -> int:
    return int(store.query("SELECT count() AS n FROM otel_traces")["n"][0])


def test_the_sdk_http_exporter_arrives_gzipped_and_acknowledged_means_stored(
    intake: Intake, store: Store
) -> None:
    """The Python SDK's own OTLP/HTTP exporter (protobuf, gzip), as services use it."""
    provider = TracerProvider(resource=Resource.create({"service.name": "http-sdk"}))
    exporter = OTLPSpanExporter(endpoint=intake.http_url, compression=Compression.Gzip)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("tests.intake_http")
    for number in range(5):
        with tracer.start_as_current_span(f"pkg.Svc/M{number}", kind=SpanKind.CLIENT) as current:
            current.set_attribute("rpc.system", "grpc")
            current.add_event("outboundMessageSent", {"message-size": 10 * number})
    provider.shutdown()
    # SimpleSpanProcessor waits for each answer: a 200 means the rows are there now.
    rows = store.query(
        "SELECT SpanName, ServiceName, SpanKind, length(`Events.Name`) AS events "
        "FROM otel_traces ORDER BY SpanName"
    )
    assert rows["SpanName"].tolist() == [f"pkg.Svc/M{n}" for n in range(5)]
    assert set(rows["ServiceName"]) == {"http-sdk"} and set(rows["SpanKind"]) == {"Client"}
    assert rows["events"].tolist() == [1] * 5
    assert intake.stats().spans_accepted == 5


@pytest.mark.parametrize(
    ("json_body", "gzipped"), [(False, False), (False, True), (True, False), (True, True)]
)
def test_every_encoding_stores_the_rows_grpc_would(
    intake: Intake, store: Store, json_body: bool, gzipped: bool
) -> None:
    """Every value type and edge (``tricky_request``): the same rows as the Python mapping,
    which the gRPC path is checked against in test_intake."""
    message = ExportTraceServiceRequest.FromString(tricky_request())
    message.resource_spans[0].resource.attributes[0].value.string_value = f"{json_body}-{gzipped}"
    data = message.SerializeToString()  # not the bytes of another case: that is a resend
    body, headers = encode(data, json_body)  # protobuf comes gzip'd from ``encode``
    if json_body and gzipped:
        body, headers = gzip.compress(body), {**headers, "Content-Encoding": "gzip"}
    if not json_body and not gzipped:
        body, headers = data, PROTOBUF
    status, answer_headers, answer = post(intake.http_url, body, headers)
    assert status == 200, answer
    assert answer_headers["Content-Type"] == headers["Content-Type"]
    assert stored_rows(store) == python_rows(data)


def test_otlp_json_as_the_specification_spells_it(intake: Intake, store: Store) -> None:
    """Written by hand after opentelemetry-proto's examples/trace.json: hex ids, int64 as
    strings (and as numbers), enums as integers and as names, camelCase names, an
    unknown field (ignored, as receivers must)."""
    document = {
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "json-service"}}]},
            "scopeSpans": [{
                "scope": {"name": "my.library", "version": "1.0.0"},
                "spans": [{
                    "traceId": TRACE_ID.upper(), "spanId": SPAN_ID,
                    "parentSpanId": "eee19b7ec3c1b173", "name": "pkg.Echo/Say",
                    "kind": 2, "startTimeUnixNano": "1544712660000000000",
                    "endTimeUnixNano": 1544712661000000000,
                    "attributes": [
                        {"key": "rpc.system", "value": {"stringValue": "grpc"}},
                        {"key": "my.count", "value": {"intValue": "9007199254740993"}},
                        {"key": "my.ratio", "value": {"doubleValue": 0.5}},
                        {"key": "my.list", "value": {"arrayValue": {"values": [
                            {"stringValue": "a"}, {"boolValue": True}]}}},
                    ],
                    "events": [{"timeUnixNano": "1544712660300000000",
                                "name": "inboundMessageRead",
                                "attributes": [{"key": "message-size",
                                                "value": {"intValue": 42}}]}],
                    "status": {"code": "STATUS_CODE_ERROR", "message": "boom"},
                    "futureField": {"ignored": True},
                }, {
                    "traceId": TRACE_ID, "spanId": "00000000000000aa", "name": "pkg.Echo/Say",
                    "kind": "SPAN_KIND_CLIENT", "startTimeUnixNano": "1544712659900000000",
                    "endTimeUnixNano": "1544712661100000000",
                }],
            }],
        }]
    }  # fmt: skip
    status, _, answer = post(intake.http_url, json.dumps(document).encode(), JSON)
    assert (status, json.loads(answer)) == (200, {}), answer
    frame = store.query(
        "SELECT TraceId, SpanId, ParentSpanId, SpanKind, ServiceName, ScopeName, "
        "toUnixTimestamp64Nano(Timestamp) AS start, Duration, StatusCode, StatusMessage, "
        "SpanAttributes['my.count'] AS big, SpanAttributes['my.list'] AS list, "
        "`Events.Name`[1] AS event, `Events.Attributes`[1]['message-size'] AS size "
        "FROM otel_traces ORDER BY SpanKind"
    )
    client, server = frame.to_dict(orient="records")
    assert (server["TraceId"], server["SpanId"]) == (TRACE_ID, SPAN_ID)
    assert server["ParentSpanId"] == "eee19b7ec3c1b173"
    assert (server["SpanKind"], client["SpanKind"]) == ("Server", "Client")
    assert (server["ServiceName"], server["ScopeName"]) == ("json-service", "my.library")
    assert (server["start"], server["Duration"]) == (1544712660000000000, 1_000_000_000)
    assert (server["StatusCode"], server["StatusMessage"]) == ("Error", "boom")
    assert server["big"] == "9007199254740993"  # not rounded through a float
    assert server["list"] == '["a",true]'
    assert (server["event"], server["size"]) == ("inboundMessageRead", "42")
    assert client["Duration"] == 1_200_000_000


def test_a_span_with_a_wrong_id_is_rejected_alone(intake: Intake, store: Store) -> None:
    """As on gRPC: partial success names the rejected span, the others are stored."""
    good = {"traceId": TRACE_ID, "spanId": SPAN_ID, "name": "ok",
            "startTimeUnixNano": "1", "endTimeUnixNano": "2"}  # fmt: skip
    short = {**good, "traceId": "abcd", "spanId": "00000000000000bb"}  # 2 bytes, not 16
    document = {"resourceSpans": [{"scopeSpans": [{"spans": [good, short]}]}]}
    status, _, answer = post(intake.http_url, json.dumps(document).encode(), JSON)
    assert status == 200
    partial = json.loads(answer)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and partial["errorMessage"]
    assert count(store) == 1
    # The same in protobuf: the answer is an ExportTraceServiceResponse.
    store.command("TRUNCATE TABLE otel_traces")
    data = request(span(next(_numbers)), span(next(_numbers), trace_id=b"\x01\x02"))
    status, _, answer = post(intake.http_url, data, PROTOBUF)
    assert status == 200
    assert ExportTraceServiceResponse.FromString(answer).partial_success.rejected_spans == 1
    assert count(store) == 1


BOMB = gzip.compress(b"\0" * (65 << 20))  # 65 MiB of zeros, 64 KiB on the wire


@pytest.mark.parametrize(
    ("body", "headers", "status", "code", "says"),
    [
        (tricky_request()[:-7], PROTOBUF, 400, code_pb2.INVALID_ARGUMENT, "cannot decode"),
        (b'{"resourceSpans": [', JSON, 400, code_pb2.INVALID_ARGUMENT, "invalid JSON"),
        (b"[1, 2]", JSON, 400, code_pb2.INVALID_ARGUMENT, "must be an object"),
        (b'{"a": "\xff"}', JSON, 400, code_pb2.INVALID_ARGUMENT, "UTF-8"),
        (b"[" * 100_000, JSON, 400, code_pb2.INVALID_ARGUMENT, ""),
        (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": "not-hex!", "spanId": SPAN_ID}]}]}]}).encode(),
         JSON, 400, code_pb2.INVALID_ARGUMENT, "traceId is not hex"),
        (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
            {"traceId": TRACE_ID, "spanId": SPAN_ID, "startTimeUnixNano": "soon"}]}]}]}
         ).encode(), JSON, 400, code_pb2.INVALID_ARGUMENT, "startTimeUnixNano"),
        (b"hello", {"Content-Type": "text/plain"}, 415, code_pb2.INVALID_ARGUMENT, "text/plain"),
        (b"x", {**PROTOBUF, "Content-Encoding": "br"}, 415, code_pb2.INVALID_ARGUMENT, "'br'"),
        (b"not gzip", {**PROTOBUF, "Content-Encoding": "gzip"}, 400, code_pb2.INVALID_ARGUMENT,
         "bad gzip"),
        (gzip.compress(tricky_request())[:-20], {**PROTOBUF, "Content-Encoding": "gzip"}, 400,
         code_pb2.INVALID_ARGUMENT, "truncated"),
        (BOMB, {**PROTOBUF, "Content-Encoding": "gzip"}, 413, code_pb2.RESOURCE_EXHAUSTED,
         "inflates to more than"),
    ],
    ids=["truncated-protobuf", "invalid-json", "json-array", "json-not-utf8", "json-too-deep",
         "json-bad-hex", "json-bad-int64", "wrong-content-type", "unknown-encoding", "bad-gzip",
         "truncated-gzip", "gzip-bomb"],
)  # fmt: skip
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
        data = request(*(span(next(_numbers)) for _ in range(20)))
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

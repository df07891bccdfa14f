"""OTLP/HTTP senders for the fault suite: the same ledger rules as the gRPC ones.

An answer is the intake's own when its ``google.rpc.Status`` message starts with
``grpc-overhead intake:``. 200 acknowledges (spans a partial success rejected are the
poison ones); 400 and 413 refuse for good; 429 and 503 refuse for now, so the sender
retries the same bytes, as SDK exporters do after ``Retry-After``; anything else (its
own timeout, a connection cut by a kill -9) leaves the outcome unknown.
"""

from __future__ import annotations

import base64
import gzip
import http.client
import json
import random
import threading
from urllib.parse import urlsplit

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

INTAKE_REFUSAL = "grpc-overhead intake:"
RETRYABLE_STATUSES = (429, 502, 503, 504)


def encode(data: bytes, json_body: bool) -> tuple[bytes, dict[str, str]]:
    """The request body and headers: gzip'd protobuf, or OTLP/JSON (hex ids)."""
    if not json_body:
        return gzip.compress(data), {
            "Content-Type": "application/x-protobuf",
            "Content-Encoding": "gzip",
        }
    document = json_format.MessageToDict(ExportTraceServiceRequest.FromString(data))
    for resource in document.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                for item in (span, *span.get("links", [])):
                    for name in ("traceId", "spanId", "parentSpanId"):
                        if name in item:  # json_format writes base64; OTLP/JSON wants hex
                            item[name] = _base64_to_hex(item[name])
    return json.dumps(document).encode(), {"Content-Type": "application/json"}


def _base64_to_hex(text: str) -> str:
    return base64.b64decode(text).hex()


def post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int, str]:
    """(HTTP status, the Status message of an error answer or '')."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        connection.request("POST", parts.path, body=body, headers=headers)
        response = connection.getresponse()
        payload = response.read()
        if response.status == 200:
            return 200, ""
        kind = response.getheader("Content-Type", "")
        return response.status, _status_message(payload, kind)
    finally:
        connection.close()


def _status_message(payload: bytes, kind: str) -> str:
    try:
        if kind.startswith("application/json"):
            return str(json.loads(payload).get("message", ""))
        return status_pb2.Status.FromString(payload).message
    except (ValueError, AttributeError):
        return ""


def deliver(
    url: str,
    data: bytes,
    json_body: bool,
    attempts: int,
    deadline_s: float,
    record_attempt,
    stop: threading.Event,
    rng: random.Random,
    authorization: str = "",
) -> str:
    """Send with retries; returns acknowledged, refused or unknown."""
    body, headers = encode(data, json_body)
    if authorization:
        headers = {**headers, "Authorization": authorization}
    last = "unknown"
    for attempt in range(attempts):
        try:
            status, message = post(url, body, headers, deadline_s)
        except (OSError, http.client.HTTPException):  # its own timeout, a cut connection
            record_attempt("http-no-answer")
            last = "unknown"
        else:
            record_attempt(f"http-{status}")
            if status == 200:
                return "acknowledged"
            ours = message.startswith(INTAKE_REFUSAL)
            if status in (400, 401, 413):
                return "refused" if ours else "unknown"
            last = "refused" if ours and status in RETRYABLE_STATUSES else "unknown"
            if status not in RETRYABLE_STATUSES:
                return last
        if stop.is_set():
            return last
        stop.wait(min(2.0, 0.1 * 2**attempt) * (0.5 + rng.random()))
    return last


#: Bodies the intake must refuse whole: truncated protobuf, broken JSON, a gzip bomb.
GARBAGE: tuple[tuple[bytes, dict[str, str]], ...] = (
    (b"\x0a\xff\xff\xff\x0f", {"Content-Type": "application/x-protobuf"}),
    (b'{"resourceSpans": [', {"Content-Type": "application/json"}),
    (
        gzip.compress(b"\0" * (80 << 20)),
        {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
    ),
)


def send_garbage(url: str, number: int, record_attempt) -> None:
    body, headers = GARBAGE[number % len(GARBAGE)]
    try:
        status, _ = post(url, body, headers, 10)
        record_attempt(f"garbage-http-{status}")
    except (OSError, http.client.HTTPException):
        record_attempt("garbage-http-no-answer")

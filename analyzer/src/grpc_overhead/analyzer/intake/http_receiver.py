"""The OTLP/HTTP trace receiver: ``POST /v1/traces``, beside the gRPC one, same rules.

What the Java agent, the Node SDK and .NET send by default (``http/protobuf`` on
4318). Answers follow the OTLP/HTTP specification:

* 200 with an ``ExportTraceServiceResponse`` (``partialSuccess`` when some spans were
  individually invalid), encoded like the request (protobuf or JSON);
* 400 with a ``google.rpc.Status`` for a body that cannot be decoded (truncated
  protobuf, invalid JSON, broken gzip): not retryable, nothing stored;
* 413 over the size limit (declared, or reached while inflating a gzip body: a gzip
  bomb inflates only up to the limit);
* 429 when the intake's memory bound is reached, 503 when the store fails or does
  not answer in time, both with ``Retry-After``: the sender retries, nothing stored;
* 401 (with ``WWW-Authenticate``) without valid credentials where the intake asks for
  them (``security``): the body is not read, nothing stored;
* 415 for another content type or encoding, 404 for other paths (``/v1/metrics``
  and ``/v1/logs`` included: the gRPC intake answers UNIMPLEMENTED there), 405 for
  another method.

Decoding happens where the gRPC receiver's does (the exporter, in a batch); JSON is
first turned into the same protobuf bytes (``otlp_json``). "Acknowledged means stored"
holds as on gRPC: the 200 is sent after the batch holding the request is committed.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.rpc import code_pb2, status_pb2

from grpc_overhead.analyzer.errors import brief
from grpc_overhead.analyzer.intake.otlp_json import request_from_json, response_json
from grpc_overhead.analyzer.intake.processor import BufferFull, Refused
from grpc_overhead.analyzer.intake.receiver import (
    Malformed,
    TraceReceiver,
    response_message,
)
from grpc_overhead.analyzer.intake.security import CHALLENGE, UNAUTHENTICATED, Credentials
from grpc_overhead.analyzer.tls import handshake, peer_closed

log = logging.getLogger(__name__)

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
#: Seconds a refused sender is asked to wait before retrying.
RETRY_AFTER_S = 1
#: Longest silence while reading a request: a sender that stalls mid-body is dropped.
READ_TIMEOUT_S = 30.0
#: Open connections at most (SDK exporters keep one each); beyond, an immediate 503.
MAX_CONNECTIONS = 256
_OTHER_SIGNALS = {"/v1/metrics": "metrics", "/v1/logs": "logs", "/v1/profiles": "profiles"}


class OtlpHttpReceiver:
    """Serves ``receiver`` over OTLP/HTTP on ``host:port`` (0: a free port), in threads;
    over TLS with ``ssl_context``, to senders ``credentials`` allow when given."""

    def __init__(
        self,
        receiver: TraceReceiver,
        host: str,
        port: int,
        *,
        max_message_bytes: int = 64 << 20,
        workers: int = 32,
        max_connections: int = MAX_CONNECTIONS,
        ssl_context: ssl.SSLContext | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        handler = type(
            "OtlpHttpHandler",
            (_Handler,),
            {
                "receiver": receiver,
                "max_message_bytes": max_message_bytes,
                "credentials": credentials,
            },
        )
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), handler)
        if ssl_context is not None:  # the handshake in the connection's thread, not accept's
            self._server.socket = ssl_context.wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server.daemon_threads = True
        self._server.connections = threading.BoundedSemaphore(max_connections)
        self._server.working = threading.BoundedSemaphore(workers)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> OtlpHttpReceiver:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="intake-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


class _Server(ThreadingHTTPServer):
    """A thread per connection, as many as ``connections`` allows, and as many requests
    read and stored at once as ``working`` allows (the gRPC receiver's worker count).

    A hostile or runaway sender opening connections gets an immediate 503 beyond the cap
    instead of a thread each; bodies (up to ``max_message_bytes`` each) are read by
    ``working`` threads at most, so memory stays bounded as on gRPC.
    """

    connections: threading.BoundedSemaphore
    working: threading.BoundedSemaphore

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.acquire(blocking=False):
            # (over TLS no answer: a handshake here would hold up every other sender)
            with contextlib.suppress(OSError):
                if not isinstance(request, ssl.SSLSocket):
                    request.sendall(_TOO_MANY_CONNECTIONS)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.connections.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            if isinstance(request, ssl.SSLSocket) and not handshake(request):
                self.shutdown_request(request)
                return
            super().process_request_thread(request, client_address)
        finally:
            self.connections.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A sender that vanished mid-request (reset, broken pipe): a line in the log at
        debug level, never a traceback on serve's terminal."""
        log.debug("OTLP/HTTP connection from %s failed", client_address, exc_info=True)


class _Server6(_Server):
    address_family = socket.AF_INET6


_TOO_MANY_CONNECTIONS = (
    b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: text/plain\r\n"
    b"Connection: close\r\nContent-Length: 48\r\n\r\n"
    b"grpc-overhead intake: too many open connections\n"
)


class _Answer(Exception):
    """An error answer: HTTP status, gRPC code for the Status body, message."""

    def __init__(self, status: int, code: int, message: str, retry_after: bool = False) -> None:
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: SDK exporters reuse their connection
    server_version = "grpc-overhead-intake"
    timeout = READ_TIMEOUT_S
    receiver: TraceReceiver
    max_message_bytes: int
    credentials: Credentials | None

    def do_POST(self) -> None:
        json_wanted = _media_type(self.headers.get("Content-Type", "")) == JSON
        self._body_read = False
        try:
            if self.credentials is not None and not self.credentials.allows(
                self.headers.get("Authorization")
            ):
                self._error(
                    _Answer(401, code_pb2.UNAUTHENTICATED, UNAUTHENTICATED),
                    json_wanted,
                    {"WWW-Authenticate": CHALLENGE},
                )
                return
            path = self.path.split("?", 1)[0]
            if path != TRACES_PATH:
                raise self._not_here(path)
            with self.server.working:  # type: ignore[attr-defined]
                body = self._body()
                outcome = self.receiver.take(body, None, self._still_connected)
        except _Answer as answer:
            self._error(answer, json_wanted)
            return
        except Malformed as error:
            self._error(_Answer(400, code_pb2.INVALID_ARGUMENT, str(error)), json_wanted)
            return
        except BufferFull as refusal:
            self._error(_refused(429, refusal), json_wanted)
            return
        except Refused as refusal:
            self._error(_refused(503, refusal), json_wanted)
            return
        message = response_message(outcome)
        if json_wanted:
            self._send(200, JSON, response_json(message))
        else:
            self._send(200, PROTOBUF, message.SerializeToString())

    def do_GET(self) -> None:
        self._method_not_allowed()

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _method_not_allowed(self) -> None:
        self.close_connection = True
        answer = _Answer(
            405, code_pb2.UNIMPLEMENTED, f"{self.command} not allowed: POST {TRACES_PATH}"
        )
        self._error(answer, False, {"Allow": "POST"})

    def _not_here(self, path: str) -> _Answer:
        signal = _OTHER_SIGNALS.get(path)
        if signal is not None:
            text = (
                f"this intake takes traces only ({TRACES_PATH}), not {signal}; "
                f"stop sending them (OTEL_{signal.upper()}_EXPORTER=none) or send them elsewhere"
            )
            return _Answer(404, code_pb2.UNIMPLEMENTED, text)
        return _Answer(404, code_pb2.NOT_FOUND, f"no such path {path!r}: POST {TRACES_PATH}")

    def _body(self) -> bytes:
        """The request body, inflated, within ``max_message_bytes``, in protobuf form."""
        media = _media_type(self.headers.get("Content-Type", ""))
        if media not in (PROTOBUF, JSON):
            raise _Answer(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported content type {media or '(none)'!r}: send {PROTOBUF} or {JSON}",
            )
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", ""):
            raise _Answer(
                415,
                code_pb2.INVALID_ARGUMENT,
                f"unsupported content encoding {encoding!r}: send gzip or none",
            )
        raw = self._read()
        if encoding == "gzip":
            raw = self._inflate(raw)
        if media == JSON:
            try:
                return request_from_json(raw)
            except Malformed:
                self.receiver.refuse_malformed()
                raise
        return raw

    def _read(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        declared = self.headers.get("Content-Length")
        if declared is None:
            self.close_connection = True
            raise _Answer(411, code_pb2.INVALID_ARGUMENT, "Content-Length required")
        try:
            length = int(declared)
        except ValueError:
            self.close_connection = True
            raise _Answer(
                400, code_pb2.INVALID_ARGUMENT, f"bad Content-Length {declared!r}"
            ) from None
        if length < 0 or length > self.max_message_bytes:
            self.close_connection = True  # the body is not read: the connection is spent
            raise self._too_large(length)
        data = self.rfile.read(length)
        self._body_read = True
        if len(data) < length:
            self.close_connection = True
            raise _Answer(400, code_pb2.INVALID_ARGUMENT, "the body ended before Content-Length")
        return data

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024).strip()
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                self.close_connection = True
                raise _Answer(400, code_pb2.INVALID_ARGUMENT, "malformed chunked body") from None
            if size == 0:
                while self.rfile.readline(1024).strip():  # trailers
                    pass
                self._body_read = True
                return b"".join(parts)
            total += size
            if total > self.max_message_bytes:
                self.close_connection = True
                raise self._too_large(total)
            parts.append(self.rfile.read(size))
            self.rfile.readline(1024)  # the chunk's CRLF

    def _inflate(self, raw: bytes) -> bytes:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            data = inflater.decompress(raw, self.max_message_bytes + 1)
        except zlib.error as error:
            self.receiver.refuse_malformed()
            raise _Answer(400, code_pb2.INVALID_ARGUMENT, f"bad gzip body: {error}") from None
        if len(data) > self.max_message_bytes:
            raise self._too_large(len(data), inflated=True)
        if not inflater.eof:
            self.receiver.refuse_malformed()
            raise _Answer(400, code_pb2.INVALID_ARGUMENT, "bad gzip body: truncated")
        return data

    def _too_large(self, size: int, inflated: bool = False) -> _Answer:
        what = "inflates to more than" if inflated else f"has {size} bytes, more than"
        return _Answer(
            413,
            code_pb2.RESOURCE_EXHAUSTED,
            f"the request {what} the limit of {self.max_message_bytes} bytes: send smaller "
            "batches (the SDK's max export batch size)",
        )

    def _still_connected(self) -> bool:
        """False once the sender hung up (readable with nothing to read), as gRPC's is_active."""
        return not peer_closed(self.connection)

    def _error(
        self, answer: _Answer, json_wanted: bool, headers: dict[str, str] | None = None
    ) -> None:
        if not getattr(self, "_body_read", False):
            self.close_connection = True  # the body was not read: the connection is spent
        status = status_pb2.Status(code=answer.code, message=f"grpc-overhead intake: {answer}")
        extra = dict(headers or {})
        if answer.retry_after:
            extra["Retry-After"] = str(RETRY_AFTER_S)
        if json_wanted:
            self._send(answer.status, JSON, response_json(status), extra)
        else:
            self._send(answer.status, PROTOBUF, status.SerializeToString(), extra)

    def _send(
        self, status: int, media: str, body: bytes, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the sender left; a retry of a stored request is recognised
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a receiver logs nothing per request (the stats count them)."""


def _refused(status: int, refusal: Refused) -> _Answer:
    return _Answer(status, code_pb2.UNAVAILABLE, brief(refusal), retry_after=True)


def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()

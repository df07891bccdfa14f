"""The socket side of the HTTP interface: a threaded HTTP/1.1 server in front of ``Answerer``.

Credentials come the ways ClickHouse takes them: basic auth, the
``X-ClickHouse-User``/``X-ClickHouse-Key`` headers, or ``user``/``password``
URL parameters; over TLS with ``tls`` (``analyzer.tls``: the handshake in the
connection's thread). A client that hangs up while its query runs gets the query
killed in the engine (``abandoned``: the socket is polled beside the query),
as ClickHouse's ``cancel_http_readonly_queries_on_client_close`` does.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import ssl
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.http_interface.answers import (
    MAX_QUERY_BYTES,
    Answer,
    Answerer,
    Request,
)
from grpc_overhead.analyzer.tls import Tls, handshake, peer_closed

DEFAULT_HTTP_PORT = 8123
DEFAULT_HTTP_HOST = "127.0.0.1"


class HttpInterface:
    """Serves ``answerer`` on ``host:port`` (0: a free port) in a background thread."""

    def __init__(
        self,
        answerer: Answerer,
        host: str = DEFAULT_HTTP_HOST,
        port: int = 0,
        *,
        tls: Tls | None = None,
    ) -> None:
        handler = type("Handler", (_Handler,), {"answerer": answerer})
        try:
            self._server = _Server((host, port), handler)
        except OSError as exc:
            raise BadInput(
                f"cannot listen on {host}:{port} for the ClickHouse HTTP interface: "
                f"{exc.strerror or exc}"
            ) from exc
        self.tls = tls
        if tls is not None:
            self._server.socket = tls.ssl_context(client_auth=False).wrap_socket(
                self._server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = str(self._server.server_address[0])
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1"
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def start(self) -> HttpInterface:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="clickhouse-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    def process_request_thread(self, request, client_address):  # type: ignore[no-untyped-def]
        if isinstance(request, ssl.SSLSocket) and not handshake(request):
            self.shutdown_request(request)
            return
        super().process_request_thread(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    answerer: Answerer
    protocol_version = "HTTP/1.1"
    server_version = "grpc-overhead"

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle(send_body=False)

    def _handle(self, *, send_body: bool = True) -> None:
        parts = urlsplit(self.path)
        parameters = dict(parse_qsl(parts.query, keep_blank_values=True))
        headers = {name.lower(): value for name, value in self.headers.items()}
        try:
            body = self._body(headers)
        except _BadBody as error:
            self._send(self.answerer.refusal(error.name, str(error), error.status), send_body)
            self.close_connection = True
            return
        user, password = _credentials(headers, parameters)
        request = Request(
            self.command if self.command != "HEAD" else "GET",
            parts.path,
            parameters,
            headers,
            body,
            user,
            password,
            source=str(self.client_address[0]),
        )
        answer = self.answerer.answer(request, abandoned=self._client_gone)
        self._send(answer, send_body)

    def _body(self, headers: dict[str, str]) -> bytes:
        if self.command != "POST":
            return b""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            data = self._chunked()
        else:
            try:
                length = int(headers.get("content-length", "0") or 0)
            except ValueError:
                raise _BadBody(400, "BAD_ARGUMENTS", "bad Content-Length") from None
            if length < 0:  # read(-1) would wait for the client to close its end
                raise _BadBody(400, "BAD_ARGUMENTS", f"bad Content-Length {length}")
            if length > MAX_QUERY_BYTES:
                raise _too_large()
            data = self.rfile.read(length)
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            return _decompressed(data, encoding)
        if encoding not in ("identity", ""):
            raise _BadBody(
                415,
                "UNKNOWN_COMPRESSION_METHOD",
                f"Content-Encoding {encoding} is not supported (gzip, deflate)",
            )
        return data

    def _chunked(self) -> bytes:
        data = bytearray()
        while True:
            line = self.rfile.readline(64).strip()
            try:
                size = int(line.split(b";")[0], 16)
            except ValueError:
                raise _BadBody(400, "BAD_ARGUMENTS", "bad chunk in a chunked body") from None
            if size == 0:
                self.rfile.readline(64)
                return bytes(data)
            if size < 0 or len(data) + size > MAX_QUERY_BYTES:  # before reading, not after
                raise _too_large()
            data += self.rfile.read(size)
            self.rfile.readline(64)

    def _client_gone(self) -> bool:
        """True once the client closed its end (a readable socket with nothing to read)."""
        return peer_closed(self.connection)

    def _send(self, answer: Answer, send_body: bool) -> None:
        with contextlib.suppress(OSError):  # the client may have gone: nothing to tell it
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            if send_body:
                self.wfile.write(answer.body)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol-level refusals (a PUT, a malformed request line, a URL too long) in
        ClickHouse's shape, not http.server's HTML page."""
        name = "NOT_IMPLEMENTED" if code == 501 else "BAD_ARGUMENTS"
        text = (message or "bad request") + ": send queries with GET or POST /?query=..."
        self.close_connection = True
        self._send(self.answerer.refusal(name, text, code), getattr(self, "command", "") != "HEAD")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: one line per request would drown serve's own output."""


class _BadBody(Exception):
    """A body that cannot be read: HTTP status and ClickHouse error name of the answer."""

    def __init__(self, status: int, name: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.name = name


def _too_large() -> _BadBody:
    return _BadBody(413, "QUERY_IS_TOO_LARGE", f"the query is over {MAX_QUERY_BYTES} bytes")


def _decompressed(data: bytes, encoding: str) -> bytes:
    """The body inflated, never beyond ``MAX_QUERY_BYTES``: a 1 MB gzip of spaces inflates
    to 1 GB, which a whole ``zlib.decompress`` would hold in memory before any check."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else 0)
    try:
        data = inflater.decompress(data, MAX_QUERY_BYTES + 1)
    except zlib.error as exc:
        raise _BadBody(
            400, "CANNOT_DECOMPRESS", f"cannot decompress the {encoding} body: {exc}"
        ) from exc
    if len(data) > MAX_QUERY_BYTES:
        raise _too_large()
    if not inflater.eof:
        raise _BadBody(400, "CANNOT_DECOMPRESS", f"the {encoding} body is truncated")
    return data


def _credentials(
    headers: dict[str, str], parameters: dict[str, str]
) -> tuple[str | None, str | None]:
    """(user, password) from basic auth, X-ClickHouse-User/Key, or URL parameters."""
    authorization = headers.get("authorization", "")
    if authorization.lower().startswith("basic "):
        try:
            decoded = base64.b64decode(authorization[6:].strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return "", ""  # present but unreadable: fails the check
        user, _, password = decoded.partition(":")
        return user, password
    if "x-clickhouse-user" in headers or "x-clickhouse-key" in headers:
        return headers.get("x-clickhouse-user"), headers.get("x-clickhouse-key", "")
    if "user" in parameters or "password" in parameters:
        return parameters.get("user"), parameters.get("password", "")
    return None, None

"""Who may send spans: the intake's TLS and its credentials, on both receivers.

TLS (``Tls``): a certificate chain and its key in PEM files and, for mutual TLS, the
CA that senders' client certificates must chain to. The gRPC receiver takes it as
``grpc.ssl_server_credentials``, the HTTP receiver as an ``ssl.SSLContext``; a
plaintext sender on a TLS port fails its handshake and sends nothing.

Credentials (``Credentials``): a file of secrets, one per line (blank lines and lines
starting with ``#`` aside). A line ``user:password`` is a basic-auth pair, what the
collector's ``basicauth`` client extension sends; any other line is a bearer token,
what its ``bearertokenauth`` extension sends, and an SDK with
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>`` (bearer tokens have no
``:``). The file is read at start and again when it changes (looked at once a second
at most), so a token is revoked by deleting its line, without a restart; a file that
cannot be read then (an editor replacing it) leaves the last set in force, with a
warning. A request without a valid ``Authorization`` is answered UNAUTHENTICATED
(gRPC) or 401 (HTTP) and nothing of it is stored. Secrets are compared in constant
time and never appear in a log line or an error message.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from grpc_overhead.analyzer.errors import BadInput

log = logging.getLogger(__name__)

#: How often the credentials file is looked at for changes (seconds).
RELOAD_INTERVAL_S = 1.0
#: What a refused sender is told (never which part was wrong, never a secret).
UNAUTHENTICATED = (
    "missing or invalid credentials: send 'Authorization: Bearer <token>' (or basic auth) "
    "with a token from serve's --auth-token-file"
)
#: The HTTP challenge that goes with a 401.
CHALLENGE = 'Bearer realm="grpc-overhead", Basic realm="grpc-overhead"'


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise BadInput(f"cannot read the {what} {path}: {error.strerror or error}") from None


@dataclass(frozen=True)
class Tls:
    """A server certificate chain and key (PEM), and the CA of client certificates for
    mutual TLS (None: any client, no certificate asked)."""

    certificate: bytes
    private_key: bytes
    client_ca: bytes | None = None
    certificate_path: str = ""
    private_key_path: str = ""
    client_ca_path: str = ""

    @classmethod
    def from_files(cls, certificate: str, private_key: str, client_ca: str | None = None) -> Tls:
        """Read and check the files: a pair that does not match, a file that is no PEM
        or cannot be read is a ``BadInput`` naming the file, before anything listens."""
        tls = cls(
            _read(Path(certificate), "TLS certificate"),
            _read(Path(private_key), "TLS key"),
            _read(Path(client_ca), "client CA") if client_ca else None,
            certificate,
            private_key,
            client_ca or "",
        )
        tls.ssl_context()  # checks the pair and the CA as Python's ssl reads them
        return tls

    def grpc_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.private_key, self.certificate)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )

    def ssl_context(self) -> ssl.SSLContext:
        """A server context: TLS 1.2 at least; with a client CA, a client certificate
        signed by it is required."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.certificate_path, self.private_key_path)
        except ssl.SSLError as error:
            raise BadInput(
                f"the TLS certificate {self.certificate_path} and key {self.private_key_path} "
                f"cannot be used together: {error.reason or error}"
            ) from None
        except OSError as error:
            raise BadInput(f"cannot read the TLS certificate or key: {error.strerror}") from None
        if self.client_ca_path:
            try:
                context.load_verify_locations(self.client_ca_path)
            except (ssl.SSLError, OSError) as error:
                reason = getattr(error, "reason", None) or getattr(error, "strerror", None)
                raise BadInput(
                    f"the client CA {self.client_ca_path} cannot be used: {reason or error}"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context


class Credentials:
    """The secrets a request's ``Authorization`` must carry one of (module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._tokens, self._pairs = self._parse(_read(self.path, "credentials file"))
        if not self._tokens and not self._pairs:
            raise BadInput(
                f"the credentials file {self.path} holds no token: one secret per line "
                "(a bearer token, or user:password for basic auth)"
            )
        self._seen = self._stamp()
        self._checked = time.monotonic()
        #: Requests refused for their credentials since start.
        self.refused = 0

    def allows(self, authorization: str | None) -> bool:
        """Whether ``authorization`` (the header's value) carries a secret of the file."""
        self._refresh()
        presented, candidates = self._presented(authorization)
        allowed = presented is not None and any(
            hmac.compare_digest(presented, candidate) for candidate in candidates
        )
        if not allowed:
            with self._lock:
                self.refused += 1
        return allowed

    def _presented(self, authorization: str | None) -> tuple[bytes | None, frozenset[bytes]]:
        scheme, _, value = (authorization or "").strip().partition(" ")
        value = value.strip()
        if not value:
            return None, frozenset()
        if scheme.lower() == "bearer":
            return value.encode("utf-8", "surrogateescape"), self._tokens
        if scheme.lower() == "basic":
            try:
                return base64.b64decode(value, validate=True), self._pairs
            except (binascii.Error, ValueError):
                return None, frozenset()
        return None, frozenset()

    @staticmethod
    def _parse(text: bytes) -> tuple[frozenset[bytes], frozenset[bytes]]:
        tokens, pairs = set(), set()
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line.startswith(b"#"):
                continue
            (pairs if b":" in line else tokens).add(line)
        return frozenset(tokens), frozenset(pairs)

    def _stamp(self) -> tuple[int, int] | None:
        try:
            found = self.path.stat()
        except OSError:
            return None
        return found.st_mtime_ns, found.st_size

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < RELOAD_INTERVAL_S:
            return
        with self._lock:
            if now - self._checked < RELOAD_INTERVAL_S:
                return
            self._checked = now
            stamp = self._stamp()
            if stamp == self._seen:
                return
            try:
                text = self.path.read_bytes()
            except OSError as error:
                log.warning(
                    "grpc-overhead intake: cannot read the credentials file %s (%s): the "
                    "tokens read before stay in force",
                    self.path,
                    error.strerror,
                )
                self._seen = stamp
                return
            self._tokens, self._pairs = self._parse(text)
            self._seen = stamp


class Authenticating(grpc.ServerInterceptor):
    """Refuses every gRPC call whose ``authorization`` metadata ``credentials`` do not
    allow, with UNAUTHENTICATED, before its handler runs."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

        def refuse(request: bytes, context: grpc.ServicerContext) -> bytes:
            context.abort(
                grpc.StatusCode.UNAUTHENTICATED, f"grpc-overhead intake: {UNAUTHENTICATED}"
            )
            return b""

        self._refusal = grpc.unary_unary_rpc_method_handler(refuse)

    def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        metadata = handler_call_details.invocation_metadata or ()
        authorization = next((str(value) for key, value in metadata if key == "authorization"),
                             None)  # fmt: skip
        if self.credentials.allows(authorization):
            return continuation(handler_call_details)
        return self._refusal

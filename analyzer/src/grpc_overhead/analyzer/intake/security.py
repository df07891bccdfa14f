"""Who may send spans: the intake's credentials, on both receivers (its TLS: ``analyzer.tls``).

Credentials (``Credentials``): a file of secrets, one per line (blank lines and lines
starting with ``#`` aside). A line ``user:password`` is a basic-auth pair, what the
collector's ``basicauth`` client extension sends; any other line is a bearer token,
what its ``bearertokenauth`` extension sends, and an SDK with
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<token>`` (bearer tokens have no
``:``). The file is read at start and again when it changes (looked at once a second
at most), so a token is revoked by deleting its line, without a restart. A file that
cannot be read (an editor replacing it) leaves the last set in force for
``MISSING_GRACE_S``, with a warning; after that nothing is accepted until it is back
(deleting the file revokes every token). A request without a valid ``Authorization``
is answered UNAUTHENTICATED (gRPC) or 401 (HTTP) and nothing of it is stored. Secrets
are compared in constant time (length included) and never appear in a log line or an
error message.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import threading
import time
from pathlib import Path

import grpc

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.tls import same_secret

log = logging.getLogger(__name__)

#: How often the credentials file is looked at for changes (seconds).
RELOAD_INTERVAL_S = 1.0
#: How long the last tokens stay in force while the file cannot be read (seconds).
MISSING_GRACE_S = 10.0
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


class Credentials:
    """The secrets a request's ``Authorization`` must carry one of (module docstring)."""

    def __init__(
        self, path: str | os.PathLike[str], *, missing_grace_s: float = MISSING_GRACE_S
    ) -> None:
        self.path = Path(path)
        self.missing_grace_s = missing_grace_s
        self._lock = threading.Lock()
        self._seen = self._stamp()  # before reading: an edit in between is read next time
        self._missing_since: float | None = None
        self._tokens, self._pairs = self._parse(_read(self.path, "credentials file"))
        if not self._tokens and not self._pairs:
            raise BadInput(
                f"the credentials file {self.path} holds no token: one secret per line "
                "(a bearer token, or user:password for basic auth)"
            )
        self._checked = time.monotonic()
        #: Requests refused for their credentials since start.
        self.refused = 0

    def allows(self, authorization: str | None) -> bool:
        """Whether ``authorization`` (the header's value) carries a secret of the file."""
        self._refresh()
        presented, candidates = self._presented(authorization)
        allowed = presented is not None and any(
            same_secret(presented, candidate) for candidate in candidates
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

    def _stamp(self) -> tuple[int, ...] | None:
        try:
            found = self.path.stat()
        except OSError:
            return None
        return found.st_ino, found.st_mtime_ns, found.st_ctime_ns, found.st_size

    def _refresh(self) -> None:
        now = time.monotonic()
        if now - self._checked < RELOAD_INTERVAL_S:
            return
        with self._lock:
            if now - self._checked < RELOAD_INTERVAL_S:
                return
            self._checked = now
            stamp = self._stamp()
            if stamp is not None and stamp == self._seen:
                return
            try:
                text = self.path.read_bytes()
            except OSError as error:
                self._unreadable(now, error.strerror or str(error))
                return
            self._missing_since = None
            self._tokens, self._pairs = self._parse(text)
            self._seen = stamp

    def _unreadable(self, now: float, reason: str) -> None:
        """The last tokens stay for ``missing_grace_s``; then none (fail closed)."""
        if self._missing_since is None:
            self._missing_since = now
            log.warning(
                "grpc-overhead intake: cannot read the credentials file %s (%s): the "
                "tokens read before stay in force for %g s",
                self.path,
                reason,
                self.missing_grace_s,
            )
        elif now - self._missing_since >= self.missing_grace_s and (self._tokens or self._pairs):
            log.warning(
                "grpc-overhead intake: the credentials file %s is still unreadable (%s): "
                "refusing every sender until it is back",
                self.path,
                reason,
            )
            self._tokens, self._pairs = frozenset(), frozenset()
        self._seen = None


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
        authorization = next(
            (str(value) for key, value in metadata if key == "authorization"), None
        )
        if self.credentials.allows(authorization):
            return continuation(handler_call_details)
        return self._refusal

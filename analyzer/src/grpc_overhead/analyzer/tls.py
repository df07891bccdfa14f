"""TLS for serve's listeners (the intake's two receivers, the ClickHouse HTTP interface).

``Tls``: a certificate chain and its key in PEM files and, for mutual TLS, the CA that
clients' certificates must chain to. gRPC takes it as ``grpc.ssl_server_credentials``,
the HTTP servers as an ``ssl.SSLContext`` whose handshake runs in the connection's own
thread (``handshake``), so a plaintext or stalled client holds up nobody else; a
plaintext client on a TLS port fails its handshake and sends nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import select
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from grpc_overhead.analyzer.errors import BadInput

log = logging.getLogger(__name__)

#: Longest TLS handshake: a plaintext or stalled client on a TLS port is dropped.
HANDSHAKE_TIMEOUT_S = 10.0


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
    private_key: bytes = field(repr=False)
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

    def ssl_context(self, *, client_auth: bool = True) -> ssl.SSLContext:
        """A server context: TLS 1.2 at least; with a client CA (and ``client_auth``), a
        client certificate signed by it is required. Mutual TLS is for OTLP senders: the
        HTTP interface and the app take ``client_auth=False`` (their readers, Grafana and
        browsers authenticate with passwords)."""
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
        if self.client_ca_path and client_auth:
            try:
                context.load_verify_locations(self.client_ca_path)
            except (ssl.SSLError, OSError) as error:
                reason = getattr(error, "reason", None) or getattr(error, "strerror", None)
                raise BadInput(
                    f"the client CA {self.client_ca_path} cannot be used: {reason or error}"
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def pinned_context(certificate: str) -> ssl.SSLContext:
    """A client context that trusts exactly the first certificate of ``certificate``
    (PEM: serve's own, the leaf of its chain) as the anchor, whatever name the URL holds:
    how serve's own readers, and the app asking itself, reach a serve whose certificate
    file they were told. Only the leaf: the CAs after it in a chain file would vouch for
    any server they signed (OSError / ssl.SSLError: no certificate there)."""
    with open(certificate, encoding="ascii", errors="replace") as handle:
        text = handle.read()
    end = "-----END CERTIFICATE-----"
    start = text.find("-----BEGIN CERTIFICATE-----")
    if start < 0 or end not in text[start:]:
        raise ssl.SSLError(f"no PEM certificate in {certificate}")
    leaf = text[start : text.index(end, start) + len(end)]
    context = ssl.create_default_context(cadata=leaf)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    context.check_hostname = False
    return context


def same_secret(given: bytes, expected: bytes) -> bool:
    """Constant time, length included (``compare_digest`` returns early on a length
    mismatch, which would tell a guesser the secret's length)."""
    return hmac.compare_digest(hashlib.sha256(given).digest(), hashlib.sha256(expected).digest())


def peer_closed(connection: socket.socket) -> bool:
    """True once the peer closed its end (readable with nothing to read), under TLS too:
    an SSLSocket refuses ``recv`` flags, so the TCP stream underneath is peeked. Never
    waits: a socket with a timeout would otherwise wait it out before peeking."""
    try:
        poller = select.poll()  # not select: it refuses descriptors above 1023
        poller.register(connection, select.POLLIN | select.POLLHUP | select.POLLERR)
        if not poller.poll(0):
            return False
        return socket.socket.recv(connection, 1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, TimeoutError):
        return False
    except OSError:
        return True


def handshake(connection: ssl.SSLSocket) -> bool:
    """The server side's TLS handshake, bounded: False for a client that speaks plaintext,
    offers no valid client certificate (mutual TLS) or stalls (logged at debug level)."""
    try:
        connection.settimeout(HANDSHAKE_TIMEOUT_S)
        connection.do_handshake()
        return True
    except (ssl.SSLError, OSError) as error:
        log.debug("TLS handshake failed: %s", error)
        return False

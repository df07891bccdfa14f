"""The intake over TLS with credentials: real senders (the OpenTelemetry SDK's exporters
configured by the standard variables, raw gRPC and HTTP clients), a real intake and store.

Valid credentials store; missing, wrong and revoked ones are answered UNAUTHENTICATED /
401 and store nothing; a plaintext sender on a TLS port sends nothing; mutual TLS takes
only certificates of its CA. No secret is echoed in an answer.
"""

from __future__ import annotations

import base64
import http.client
import itertools
import os
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.intake import Credentials, Intake, IntakeConfig, Tls
from grpc_overhead.analyzer.intake.security import RELOAD_INTERVAL_S
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.certificates import Authority, Issued
from tests.analyzer.otlp_requests import EXPORT, request, running_intake, span

pytestmark = pytest.mark.e2e

TOKEN = "s3cret-token.A_1"
#: Every request its own span: the intake stores a span once (a retry is not stored again).
NUMBERS = itertools.count(1)
PAIR = ("collector", "pass:word")  # a password may hold ':' (split at the first)


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return Authority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def server_certificate(authority: Authority) -> Issued:
    return authority.issue("intake", server=True)


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("secrets") / "tokens"
    path.write_text(f"# the intake's senders\n{TOKEN}\n\n{PAIR[0]}:{PAIR[1]}\n")
    return path


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, server_certificate: Issued, token_file: Path
) -> Iterator[tuple[Store, Intake]]:
    tls = Tls.from_files(str(server_certificate.certificate), str(server_certificate.key))
    yield from running_intake(
        tmp_path_factory.mktemp("intake-tls"),
        http_port=0,
        tls=tls,
        credentials=Credentials(token_file),
    )


@pytest.fixture
def intake(running: tuple[Store, Intake]) -> Intake:
    running[0].command("TRUNCATE TABLE otel_traces")
    return running[1]


def _stored(store: Store) -> int:
    return int(store.query("SELECT count() AS n FROM otel_traces")["n"].iloc[0])


def _grpc_export(intake: Intake, root: Path | None, metadata: tuple = ()) -> grpc.StatusCode:
    target = f"127.0.0.1:{intake.port}"
    if root is None:
        channel = grpc.insecure_channel(target)
    else:
        credentials = grpc.ssl_channel_credentials(root_certificates=root.read_bytes())
        channel = grpc.secure_channel(target, credentials)
    with channel:
        call = channel.unary_unary(EXPORT)
        try:
            call(request(span(next(NUMBERS))), metadata=metadata, timeout=10)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def _https_post(intake: Intake, root: Path, headers: dict[str, str]) -> tuple[int, dict, bytes]:
    context = ssl.create_default_context(cafile=str(root))
    connection = http.client.HTTPSConnection(
        "127.0.0.1", intake.http_port, context=context, timeout=10
    )
    try:
        media = {"Content-Type": "application/x-protobuf"}
        body = request(span(next(NUMBERS)))
        connection.request("POST", "/v1/traces", body=body, headers=media | headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_the_sdk_exporters_send_over_tls_with_a_token_from_the_standard_variables(
    running: tuple[Store, Intake], intake: Intake, authority: Authority
) -> None:
    """OTEL_EXPORTER_OTLP_CERTIFICATE and OTEL_EXPORTER_OTLP_HEADERS, as a service sets
    them, for the SDK's gRPC and HTTP exporters: both batches stored."""
    script = textwrap.dedent("""
        import sys
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as G
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as H
        for exporter in (G(endpoint=sys.argv[1]), H(endpoint=sys.argv[2])):
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            with provider.get_tracer("t").start_as_current_span("over-tls"):
                pass
            provider.shutdown()
    """)
    # requests (the SDK's HTTP exporter) verifies against REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE
    # where set, whatever OTEL_EXPORTER_OTLP_CERTIFICATE says (the README says so too)
    bundles = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
    environment = {
        **{key: value for key, value in os.environ.items() if key not in bundles},
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(authority.certificate),
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{TOKEN}",
    }
    done = subprocess.run(
        [sys.executable, "-c", script, f"https://127.0.0.1:{intake.port}", intake.http_url],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert intake.http_url.startswith("https://")
    assert _stored(running[0]) == 2, done.stderr


def test_without_valid_credentials_nothing_is_stored(
    running: tuple[Store, Intake], intake: Intake, authority: Authority
) -> None:
    root = authority.certificate
    refused_before = intake.stats().requests_unauthenticated
    for metadata in (
        (),
        (("authorization", "Bearer wrong-token"),),
        (("authorization", TOKEN),),  # no scheme
        (("authorization", f"Bearer {TOKEN}x"),),
        (("authorization", _basic(PAIR[0], "wrong")),),
        (("authorization", _basic("someone-else", PAIR[1])),),
        (("authorization", "Basic !!not-base64!!"),),
    ):
        assert _grpc_export(intake, root, metadata) == grpc.StatusCode.UNAUTHENTICATED
    for headers in ({}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "Digest x"}):
        status, answer, body = _https_post(intake, root, headers)
        assert status == 401
        assert "Bearer" in answer["WWW-Authenticate"]
        assert b"--auth-token-file" in body and b"wrong-token" not in body
    assert _stored(running[0]) == 0
    assert intake.stats().requests_unauthenticated - refused_before == 10
    # the same senders with credentials
    assert _grpc_export(intake, root, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
    assert _grpc_export(intake, root, (("authorization", _basic(*PAIR)),)) == grpc.StatusCode.OK
    assert _https_post(intake, root, {"Authorization": f"bearer {TOKEN}"})[0] == 200
    assert _https_post(intake, root, {"Authorization": _basic(*PAIR)})[0] == 200
    assert _stored(running[0]) == 4


def test_a_plaintext_sender_on_the_tls_ports_sends_nothing(
    running: tuple[Store, Intake], intake: Intake
) -> None:
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    assert _grpc_export(intake, None, metadata) == grpc.StatusCode.UNAVAILABLE
    connection = http.client.HTTPConnection("127.0.0.1", intake.http_port, timeout=10)
    with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
        connection.request(
            "POST",
            "/v1/traces",
            body=request(span(next(NUMBERS))),
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        connection.getresponse().read()
    connection.close()
    assert _stored(running[0]) == 0


def test_a_token_deleted_from_the_file_is_refused_without_a_restart(
    running: tuple[Store, Intake], intake: Intake, authority: Authority, token_file: Path
) -> None:
    original = token_file.read_text()
    fresh = "rotated-token-2"
    try:
        token_file.write_text(f"{fresh}\n{PAIR[0]}:{PAIR[1]}\n")
        time.sleep(RELOAD_INTERVAL_S + 0.2)
        old = (("authorization", f"Bearer {TOKEN}"),)
        assert _grpc_export(intake, authority.certificate, old) == grpc.StatusCode.UNAUTHENTICATED
        new = (("authorization", f"Bearer {fresh}"),)
        assert _grpc_export(intake, authority.certificate, new) == grpc.StatusCode.OK
        # an unreadable file (an editor replacing it) leaves the last tokens in force for a
        # grace period
        token_file.unlink()
        time.sleep(RELOAD_INTERVAL_S + 0.2)
        assert _grpc_export(intake, authority.certificate, new) == grpc.StatusCode.OK
    finally:
        token_file.write_text(original)
        time.sleep(RELOAD_INTERVAL_S + 0.2)
    assert _stored(running[0]) == 2


def test_mutual_tls_takes_only_certificates_of_its_authority(
    tmp_path: Path, running: tuple[Store, Intake], authority: Authority, server_certificate: Issued
) -> None:
    """A second intake on the same store (chDB: one store per process), without tokens."""
    store = running[0]
    store.command("TRUNCATE TABLE otel_traces")
    client = authority.issue("sender", server=False)
    rogue = Authority(tmp_path / "rogue", "rogue-ca").issue("rogue-sender", server=False)
    tls = Tls.from_files(
        str(server_certificate.certificate), str(server_certificate.key), str(authority.certificate)
    )
    with Intake(store, IntakeConfig(port=0, http_port=0, flush_interval=0.02, tls=tls)) as intake:

        def export(issued: Issued | None, intake: Intake = intake) -> grpc.StatusCode:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=authority.certificate.read_bytes(),
                private_key=issued.key.read_bytes() if issued else None,
                certificate_chain=issued.certificate.read_bytes() if issued else None,
            )
            with grpc.secure_channel(f"127.0.0.1:{intake.port}", credentials) as channel:
                try:
                    channel.unary_unary(EXPORT)(request(span(next(NUMBERS))), timeout=10)
                except grpc.RpcError as error:
                    return error.code()
            return grpc.StatusCode.OK

        assert export(None) == grpc.StatusCode.UNAVAILABLE
        assert export(rogue) == grpc.StatusCode.UNAVAILABLE
        assert export(client) == grpc.StatusCode.OK
        context = ssl.create_default_context(cafile=str(authority.certificate))
        context.load_cert_chain(str(client.certificate), str(client.key))
        connection = http.client.HTTPSConnection(
            "127.0.0.1", intake.http_port, context=context, timeout=10
        )
        connection.request(
            "POST",
            "/v1/traces",
            body=request(span(next(NUMBERS))),
            headers={"Content-Type": "application/x-protobuf"},
        )
        assert connection.getresponse().status == 200
        connection.close()
        assert _stored(store) == 2


def test_bad_tls_files_and_empty_credentials_are_clear_errors(
    tmp_path: Path, authority: Authority, server_certificate: Issued
) -> None:
    other = authority.issue("other", server=True)
    with pytest.raises(BadInput, match="cannot be used together"):
        Tls.from_files(str(server_certificate.certificate), str(other.key))
    with pytest.raises(BadInput, match=r"cannot read the TLS key .*missing\.key"):
        Tls.from_files(str(server_certificate.certificate), str(tmp_path / "missing.key"))
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    with pytest.raises(BadInput, match="cannot be used"):
        Tls.from_files(str(not_pem), str(server_certificate.key))
    with pytest.raises(BadInput, match="client CA"):
        Tls.from_files(
            str(server_certificate.certificate), str(server_certificate.key), str(not_pem)
        )
    empty = tmp_path / "tokens"
    empty.write_text("# nothing yet\n\n")
    with pytest.raises(BadInput, match="holds no token"):
        Credentials(empty)
    with pytest.raises(BadInput, match="cannot read the credentials file"):
        Credentials(tmp_path / "absent")


def test_a_credentials_file_deleted_for_good_revokes_every_token(tmp_path: Path) -> None:
    """Within the grace an editor's replace keeps the tokens; beyond it nothing is accepted
    until the file is back (fail closed), then its tokens are."""
    path = tmp_path / "tokens"
    path.write_text("first\n")
    credentials = Credentials(path, missing_grace_s=1.5)
    assert credentials.allows("Bearer first")
    path.unlink()
    time.sleep(RELOAD_INTERVAL_S + 0.1)
    assert credentials.allows("Bearer first")  # the grace
    time.sleep(1.6)
    credentials.allows("Bearer first")  # looks again: now beyond the grace
    time.sleep(RELOAD_INTERVAL_S + 0.1)
    assert not credentials.allows("Bearer first")
    path.write_text("second\n")
    time.sleep(RELOAD_INTERVAL_S + 0.1)
    assert credentials.allows("Bearer second") and not credentials.allows("Bearer first")


def test_a_same_length_rotation_in_the_same_tick_is_seen(tmp_path: Path) -> None:
    """The change stamp has the inode and ctime too: a same-size rewrite (an atomic rename of
    a new file) is read even when the mtime and size repeat."""
    path = tmp_path / "tokens"
    path.write_text("token-aaaa\n")
    credentials = Credentials(path)
    stamp = path.stat().st_mtime_ns
    replacement = tmp_path / "tokens.new"
    replacement.write_text("token-bbbb\n")
    os.utime(replacement, ns=(stamp, stamp))
    os.replace(replacement, path)
    time.sleep(RELOAD_INTERVAL_S + 0.1)
    assert credentials.allows("Bearer token-bbbb") and not credentials.allows("Bearer token-aaaa")


def test_a_peer_that_closed_is_seen_under_tls(
    tmp_path: Path, server_certificate: Issued, authority: Authority
) -> None:
    """The HTTP servers' hang-up check peeks the TCP stream under TLS (an SSLSocket refuses
    recv flags): open is open, closed is closed."""
    import socket as socket_module

    from grpc_overhead.analyzer.tls import handshake, peer_closed

    tls = Tls.from_files(str(server_certificate.certificate), str(server_certificate.key))
    listener = tls.ssl_context().wrap_socket(
        socket_module.create_server(("127.0.0.1", 0)),
        server_side=True,
        do_handshake_on_connect=False,
    )
    with listener:
        raw = socket_module.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        shaken = threading.Thread(target=handshake, args=(accepted,))
        shaken.start()  # the server's side of the handshake, as the HTTP servers run it
        client = ssl.create_default_context(cafile=str(authority.certificate)).wrap_socket(
            raw, server_hostname="localhost"
        )
        shaken.join(10)
        assert not peer_closed(accepted)
        client.close()
        time.sleep(0.2)
        assert peer_closed(accepted)
        accepted.close()

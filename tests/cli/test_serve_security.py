"""``serve`` with TLS, tokens and passwords from files (the exposure rule beyond loopback:
``test_serve_exposure.py``).

Real serve processes: the SDK's exporter sends over TLS with a token from the standard
variables, readers (report) go through serve's HTTPS interface pinned to serve's own
certificate, curl reads with basic auth, the app asks for the team's password, Grafana's
datasource file reads over HTTPS. No secret is ever printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpc_overhead.processes import offline_env
from harness.browser import RunningApp, start_command, start_serve_http
from tests.cli.team_secrets import PASSWORD, TOKEN, secrets_fixture  # noqa: F401
from tests.cli.test_commands_through_serve import command

pytestmark = pytest.mark.e2e


def _tls_flags(secrets: dict[str, Path]) -> list[str]:
    return [
        "--tls-cert",
        str(secrets["cert"]),
        "--tls-key",
        str(secrets["key"]),
        "--auth-token-file",
        str(secrets["tokens"]),
    ]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, secrets: dict[str, Path]
) -> Iterator[tuple[Path, RunningApp]]:
    store = tmp_path_factory.mktemp("served") / "store"
    serve = start_serve_http(
        store,
        offline_env(),
        *_tls_flags(secrets),
        "--http-password-file",
        str(secrets["http_password"]),
    )
    yield store, serve
    assert serve.stop() == 0, serve.text()
    assert TOKEN not in serve.text() and PASSWORD not in serve.text()


def _intake(serve: RunningApp) -> str:
    found = re.search(r"^intake listening on (\S+) \(TLS and tokens\)$", serve.text(), re.M)
    assert found, serve.text()
    return found.group(1)


def test_an_sdk_sends_over_tls_with_its_token_and_report_reads_through_https(
    served: tuple[Path, RunningApp], secrets: dict[str, Path]
) -> None:
    store, serve = served
    assert serve.url.startswith("https://"), serve.text()
    script = textwrap.dedent("""
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.trace import SpanKind
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
        tracer = provider.get_tracer("team")
        for _ in range(3):
            with tracer.start_as_current_span("predict.Predictor/Predict", kind=SpanKind.SERVER,
                    attributes={"rpc.system": "grpc", "rpc.service": "predict.Predictor",
                                "rpc.method": "Predict"}):
                pass
        provider.shutdown()
    """)
    # The SDK's own export timeout (10 s), as a user has it: offline_env's 0.5 s is for
    # exports that must fail fast, and a TLS handshake on a loaded machine exceeds it.
    environment = {
        **offline_env(exporter_timeout_s=None),
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"https://{_intake(serve)}",
        "OTEL_EXPORTER_OTLP_CERTIFICATE": str(secrets["ca"]),
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{TOKEN}",
    }
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0 and "Failed" not in done.stderr, done.stderr
    # Readers go through serve's HTTPS interface, trusting serve's own certificate.
    reader = {**offline_env(), "GRPC_OVERHEAD_HTTP_PASSWORD": PASSWORD}
    query = "SELECT count() FROM otel_traces"
    answer = command("sql", "--store", str(store), query, "--format", "csv", env=reader)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.strip().splitlines()[-1] == "3", answer.stdout
    # Without the password a reader is refused, with what to do.
    refused = command("sql", "--store", str(store), query, env=offline_env())
    assert refused.returncode != 0 and "password" in refused.stderr.lower(), refused.stderr
    assert "Traceback" not in refused.stderr


def test_curl_reads_the_https_interface_with_basic_auth_and_not_without(
    served: tuple[Path, RunningApp], secrets: dict[str, Path]
) -> None:
    _, serve = served
    base = ["curl", "-sS", "--cacert", str(secrets["ca"])]
    ok = subprocess.run(
        [*base, "-u", f"default:{PASSWORD}", f"{serve.url}/?query=SELECT%201"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert ok.stdout == "1\n", ok.stderr
    keyed = subprocess.run(
        [
            *base,
            "-H",
            "X-ClickHouse-User: default",
            "-H",
            f"X-ClickHouse-Key: {PASSWORD}",
            f"{serve.url}/?query=SELECT%202",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert keyed.stdout == "2\n", keyed.stderr
    denied = subprocess.run(
        [*base, "-w", "%{http_code}", "-o", "/dev/null", f"{serve.url}/?query=SELECT%201"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert denied.stdout == "401"
    plain = subprocess.run(
        ["curl", "-sS", serve.url.replace("https://", "http://") + "/ping"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert plain.returncode != 0  # a plaintext client gets no answer from a TLS port


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--tls-cert", "{cert}"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "{cert}", "--tls-key", "{missing}"], "cannot read the TLS key"),
        (["--tls-cert", "{cert}", "--tls-key", "{cert}"], "cannot be used together"),
        (["--auth-token-file", "{missing}"], "cannot read the credentials file"),
        (["--http-password-file", "{missing}"], "cannot read --http-password-file"),
        (["--tls-client-ca", "{ca}"], "--tls-client-ca needs --tls-cert"),
    ],
)
def test_bad_security_files_are_one_clear_line(
    tmp_path: Path, secrets: dict[str, Path], flags: list[str], said: str
) -> None:
    values = {"cert": secrets["cert"], "ca": secrets["ca"], "missing": tmp_path / "nope"}
    args = [flag.format(**values) for flag in flags]
    done = command(
        "serve", "--store", str(tmp_path / "store"), "--no-app", "--otlp-port", "0", *args
    )
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_password_on_the_command_line_is_deprecated_with_a_warning(tmp_path: Path) -> None:
    serve = start_serve_http(tmp_path / "store", offline_env(), "--http-password", PASSWORD)
    try:
        text = serve.text()
        assert "--http-password on the command line is deprecated" in text
        assert "--http-password-file" in text and PASSWORD not in text
    finally:
        assert serve.stop() == 0


@pytest.mark.browser
def test_the_app_over_tls_asks_for_the_teams_password_before_any_page(
    tmp_path: Path, secrets: dict[str, Path]
) -> None:
    from harness.browser import EXCEPTION, chromium, wait_loaded

    app_password = tmp_path / "app-password"
    app_password.write_text("team-app-pass\n")
    serve = start_command(
        [
            "serve",
            "--store",
            str(tmp_path / "store"),
            "--otlp-port",
            "0",
            "--app-port",
            "0",
            "--no-http",
            *_tls_flags(secrets),
            "--app-password-file",
            str(app_password),
        ],
        offline_env(),
    )
    try:
        assert serve.url.startswith("https://"), serve.text()
        with chromium(ignore_https_errors=True) as browser:
            page = browser.new_page()
            page.goto(f"{serve.url}/overview", wait_until="domcontentloaded")
            wait_loaded(page)
            assert page.get_by_text("Log in").count() == 1
            assert page.locator('[data-testid="stMetric"]').count() == 0  # no page ran
            # The lockout is the address's, not the session's: another tab waits it out too,
            # refused without a check even with the right password.
            guesser = browser.new_page()
            guesser.goto(f"{serve.url}/overview", wait_until="domcontentloaded")
            wait_loaded(guesser)
            field = page.locator("input[type=password]")
            for _ in range(6):  # five are free, the sixth locks this address out for 5 s
                field.fill("not-the-password")
                page.get_by_role("button", name="Log in").click()
                page.wait_for_timeout(200)
                wait_loaded(page)  # each run waits a second: the next click is another run
                page.get_by_text("Wrong password").wait_for(timeout=30_000)
                assert page.locator('[data-testid="stMetric"]').count() == 0
            guesser.locator("input[type=password]").fill("team-app-pass")
            guesser.get_by_role("button", name="Log in").click()
            guesser.get_by_text("Too many wrong passwords from").wait_for(timeout=30_000)
            assert guesser.locator('[data-testid="stMetric"]').count() == 0
            guesser.close()
            page.wait_for_timeout(5500)
            field.fill("team-app-pass")
            page.get_by_role("button", name="Log in").click()
            page.get_by_text("Wrong password").wait_for(state="detached", timeout=30_000)
            wait_loaded(page)
            assert page.locator("input[type=password]").count() == 0
            assert page.locator(EXCEPTION).count() == 0
            # another tab is another session: logged out (nothing shared through cookies)
            fresh = browser.new_page()
            fresh.goto(f"{serve.url}/findings", wait_until="domcontentloaded")
            wait_loaded(fresh)
            assert fresh.locator("input[type=password]").count() == 1
        assert "team-app-pass" not in serve.text()
    finally:
        assert serve.stop() == 0


def _grafana_expanded(path: Path, environ: dict[str, str]) -> dict:
    """The provisioning file as Grafana reads it: ``$VAR``/``${VAR}`` from its environment,
    ``$__file{PATH}`` replaced by the file's content."""
    import yaml

    text = path.read_text()
    text = re.sub(
        r"\$__file\{([^}]+)\}", lambda found: json.dumps(Path(found.group(1)).read_text()), text
    )
    text = re.sub(
        r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda found: environ.get(found.group(1), ""), text
    )
    return yaml.safe_load(text)


def test_clickhouse_connect_and_the_grafana_datasource_file_read_over_https(
    served: tuple[Path, RunningApp], secrets: dict[str, Path], tmp_path: Path
) -> None:
    """clickhouse-connect with the CA and the password; the serve datasource file's settings,
    expanded as Grafana does, are what it takes to read (without the password: refused)."""
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import DatabaseError

    from harness.browser import REPO

    _, serve = served
    port = int(serve.url.rsplit(":", 1)[1])
    source_file = REPO / "dashboards/provisioning/datasources/grpc-overhead-serve.yaml"
    ca_copy = tmp_path / "grafana-ca.pem"
    ca_copy.write_text(secrets["ca"].read_text())
    text = source_file.read_text().replace("/etc/grafana/grpc-overhead-ca.pem", str(ca_copy))
    (tmp_path / "serve.yaml").write_text(text)
    environ = {"GRPC_OVERHEAD_SERVE_HOST": "localhost", "GRPC_OVERHEAD_HTTP_PASSWORD": PASSWORD}
    (source,) = _grafana_expanded(tmp_path / "serve.yaml", environ)["datasources"]
    settings, secure = source["jsonData"], source["secureJsonData"]
    assert settings["protocol"] == "http" and settings["secure"] is True
    assert settings["tlsAuthWithCACert"] is True and settings["host"] == "localhost"
    (tmp_path / "ca-from-grafana.pem").write_text(secure["tlsCACert"])
    client = clickhouse_connect.get_client(
        host=settings["host"],
        port=port,
        username=settings["username"],
        password=secure["password"],
        secure=settings["secure"],
        ca_cert=str(tmp_path / "ca-from-grafana.pem"),
    )
    try:
        assert client.query("SELECT 41 + 1").result_rows == [(42,)]
    finally:
        client.close()
    with pytest.raises(DatabaseError):
        clickhouse_connect.get_client(
            host="localhost", port=port, secure=True, ca_cert=str(secrets["ca"]), password="wrong"
        )


def test_mutual_tls_is_for_senders_readers_still_read_with_their_password(
    tmp_path: Path, secrets: dict[str, Path]
) -> None:
    """--tls-client-ca asks OTLP senders for a client certificate; serve's readers (sql
    through the HTTPS interface) and curl authenticate with the password, no certificate."""
    serve = start_serve_http(
        tmp_path / "store",
        offline_env(),
        *_tls_flags(secrets),
        "--tls-client-ca",
        str(secrets["ca"]),
        "--http-password-file",
        str(secrets["http_password"]),
    )
    try:
        reader = {**offline_env(), "GRPC_OVERHEAD_HTTP_PASSWORD": PASSWORD}
        answer = command(
            "sql", "--store", str(tmp_path / "store"), "SELECT 7", "--format", "csv", env=reader
        )
        assert answer.returncode == 0 and answer.stdout.strip().endswith("7"), answer.stderr
        curl = subprocess.run(
            [
                "curl",
                "-sS",
                "--cacert",
                str(secrets["ca"]),
                "-u",
                f"default:{PASSWORD}",
                f"{serve.url}/?query=SELECT%208",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert curl.stdout == "8\n", curl.stderr
        import grpc

        from tests.analyzer.otlp_requests import EXPORT, request, span

        credentials = grpc.ssl_channel_credentials(root_certificates=secrets["ca"].read_bytes())
        token = (("authorization", f"Bearer {TOKEN}"),)
        with (
            grpc.secure_channel(_intake(serve), credentials) as channel,
            pytest.raises(grpc.RpcError) as refused,
        ):
            channel.unary_unary(EXPORT)(request(span(1)), timeout=10, metadata=token)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # no client certificate
    finally:
        assert serve.stop() == 0, serve.text()

"""``serve`` and ``app`` beyond loopback: a bind without TLS and authentication refuses with
one line, ``--insecure`` warns at start, and TLS with tokens starts without a warning (in a
network namespace of the test's own, on a veth address, 10.254.0.1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpc_overhead.processes import offline_env, stop_process
from tests.cli.team_secrets import TOKEN, secrets_fixture  # noqa: F401
from tests.cli.test_commands_through_serve import command

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--host", "0.0.0.0", "--no-app", "--no-http"],
            "the intake on --host 0.0.0.0 needs --tls-cert/--tls-key and --auth-token-file",
        ),
        (
            ["--no-app", "--http-host", "0.0.0.0"],
            "the HTTP interface on --http-host 0.0.0.0 needs --tls-cert/--tls-key and "
            "--http-password-file",
        ),
        (
            ["--host", "::", "--no-http"],
            "the app on --host :: needs --tls-cert/--tls-key and --app-password-file",
        ),
    ],
)
def test_a_non_loopback_bind_without_tls_and_auth_refuses_in_one_line(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    done = command("serve", "--store", str(tmp_path / "store"), "--otlp-port", "0", *flags)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and "--insecure" in lines[0], done.stderr
    assert not (tmp_path / "store").exists()  # refused before anything was created


def _in_namespace(*inner: str) -> list[str]:
    """A command run in a network namespace of its own with a veth address, 10.254.0.1."""
    setup = (
        "ip link set lo up && ip link add v0 type veth peer name v1 && "
        "ip addr add 10.254.0.1/24 dev v0 && ip link set v0 up && ip link set v1 up && "
        'exec "$@"'
    )
    return ["unshare", "--net", "sh", "-c", setup, "sh", *inner]


def test_insecure_listens_beyond_loopback_and_warns_at_start(
    tmp_path: Path, secrets: dict[str, Path]
) -> None:
    args = [
        "serve",
        "--store",
        str(tmp_path / "store"),
        "--otlp-port",
        "0",
        "--host",
        "10.254.0.1",
        "--no-app",
        "--no-http",
        "--insecure",
    ]
    process = subprocess.Popen(
        _in_namespace(sys.executable, "-m", "grpc_overhead", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=offline_env(),
        stdin=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if line.startswith("intake listening on"):
                break
        text = "".join(lines)
        assert "warning: --insecure: listening beyond loopback" in text, text
        assert "intake listening on 10.254.0.1:" in text, text
    finally:
        stop_process(process, 60.0)  # SIGTERM, then SIGKILL: a loaded machine stops slowly


def test_tls_and_tokens_beyond_loopback_start_without_a_warning(
    tmp_path: Path, secrets: dict[str, Path]
) -> None:
    """The intake on a veth address with TLS and tokens: no refusal, no warning; a sender in
    the same namespace stores with its token."""
    sender = textwrap.dedent(f"""
        import subprocess, sys, time, os
        serve = subprocess.Popen([sys.executable, "-m", "grpc_overhead", "serve", "--store",
            {str(tmp_path / "store")!r}, "--otlp-port", "4327", "--host", "10.254.0.1",
            "--no-app", "--no-http", "--tls-cert", {str(secrets["cert"])!r}, "--tls-key",
            {str(secrets["key"])!r}, "--auth-token-file", {str(secrets["tokens"])!r}],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in serve.stdout:
            print(line, end="", flush=True)
            if line.startswith("intake listening"):
                break
        import grpc
        from tests.analyzer.otlp_requests import EXPORT, request, span
        roots = open({str(secrets["ca"])!r}, "rb").read()
        credentials = grpc.ssl_channel_credentials(root_certificates=roots)
        options = (("grpc.ssl_target_name_override", "localhost"),)
        with grpc.secure_channel("10.254.0.1:4327", credentials, options) as channel:
            call = channel.unary_unary(EXPORT)
            call(request(span(1)), metadata=(("authorization", "Bearer {TOKEN}"),), timeout=30)
            try:
                call(request(span(2)), timeout=30)
            except grpc.RpcError as error:
                print("without token:", error.code().name, flush=True)
        serve.terminate()
        try:
            print(serve.communicate(timeout=120)[0], flush=True)
        except subprocess.TimeoutExpired:
            serve.kill()
            print(serve.communicate()[0], "serve did not stop within 120 s", flush=True)
    """)
    environment = {**offline_env(), "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        _in_namespace(sys.executable, "-c", sender),
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    assert "intake listening on 10.254.0.1:4327 (TLS and tokens)" in text
    assert "warning" not in text.lower() and "refusing" not in text
    assert "without token: UNAUTHENTICATED" in text
    assert "1 spans stored" in text and "1 unauthenticated" in text, text
    assert TOKEN not in text.replace(f"Bearer {TOKEN}", "")


def test_the_app_command_beyond_loopback_needs_tls_and_a_password(tmp_path: Path) -> None:
    done = command(
        "app", "--store", str(tmp_path), "--host", "0.0.0.0", "--port", "0", "--no-browser"
    )
    assert done.returncode == 2
    assert "the app on --host 0.0.0.0 needs --tls-cert/--tls-key and --password-file" in done.stderr
    assert "--insecure" in done.stderr and "Traceback" not in done.stderr

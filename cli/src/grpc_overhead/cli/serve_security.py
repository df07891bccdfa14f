"""``serve``'s TLS, secrets and exposure rule: safe to run beyond loopback.

    --tls-cert FILE --tls-key FILE [--tls-client-ca FILE]   TLS on the intake (OTLP gRPC
                                                            and HTTP), the ClickHouse
                                                            HTTP interface and the app;
                                                            mutual TLS for OTLP senders
                                                            with a client CA
    --auth-token-file FILE     the secrets OTLP senders must present (intake.security)
    --http-password-file FILE  the ClickHouse HTTP interface's password
    --app-password-file FILE   the team's password the app asks for (app.login)
    --app-oidc-file FILE       or a login through the team's identity provider (app.oidc)
    --insecure                 bind a non-loopback address without TLS and authentication

Secrets come from files or the environment (``GRPC_OVERHEAD_HTTP_PASSWORD``), never
from the command line, where every user of the host reads them in ``ps``:
``--http-password`` still works but is deprecated with a warning. No secret is ever
printed.

The rule: a listener bound to an address other than loopback (127.0.0.0/8, ::1,
localhost) is reachable from other hosts, so it needs TLS and authentication: the
intake (``--host``) TLS and ``--auth-token-file``; the HTTP interface (``--http-host``)
TLS and a password; the app (``--host``) TLS and a login (``--app-password-file`` or
``--app-oidc-file``). Anything less
refuses to start with a one-line reason, unless ``--insecure`` says so (then a warning
at every start).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.intake import Credentials
from grpc_overhead.analyzer.tls import Tls
from grpc_overhead.app.oidc import OidcLogin
from grpc_overhead.instrumentation import environment

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    tls = parser.add_argument_group("TLS and authentication (docs/team.md)")
    tls.add_argument(
        "--tls-cert",
        metavar="FILE",
        help="PEM certificate chain: TLS on the intake, the HTTP interface and the app",
    )
    tls.add_argument("--tls-key", metavar="FILE", help="PEM private key of --tls-cert")
    tls.add_argument(
        "--tls-client-ca",
        metavar="FILE",
        help="PEM CA: OTLP senders must present a client certificate it signed (mutual TLS)",
    )
    tls.add_argument(
        "--auth-token-file",
        metavar="FILE",
        help="secrets OTLP senders must present, one per line: a bearer token, "
        "or user:password for basic auth; reread when it changes",
    )
    tls.add_argument(
        "--app-password-file",
        metavar="FILE",
        help="file holding the team's password the app asks for",
    )
    tls.add_argument(
        "--app-oidc-file",
        metavar="FILE",
        help="the app's login through an OpenID Connect identity provider: "
        "Streamlit's [auth] secrets (docs/team.md)",
    )
    tls.add_argument(
        "--insecure",
        action="store_true",
        help="listen on a non-loopback address without TLS and authentication "
        "(warned at every start)",
    )


@dataclass(frozen=True)
class Security:
    """What the flags ask for, files read and checked."""

    tls: Tls | None = None
    credentials: Credentials | None = None
    http_password: str | None = field(default=None, repr=False)
    app_password: str | None = field(default=None, repr=False)
    app_oidc: OidcLogin | None = None


def security_from_args(args: argparse.Namespace) -> Security:
    """Read the TLS files, the credentials and the HTTP password; a ``BadInput`` naming
    the file (never its content) where one is missing, unreadable or unusable."""
    tls = tls_from_args(args)
    credentials = Credentials(args.auth_token_file) if args.auth_token_file else None
    password, oidc = app_login(args.app_password_file, args.app_oidc_file, tls, "--app-")
    return Security(tls, credentials, http_password(args), password, oidc)


def tls_from_args(args: argparse.Namespace) -> Tls | None:
    """``--tls-cert``/``--tls-key`` (and ``--tls-client-ca`` where the command has it)."""
    client_ca = getattr(args, "tls_client_ca", None)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise BadInput("--tls-cert and --tls-key go together: give both, or neither")
    if client_ca and not args.tls_cert:
        raise BadInput("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS is TLS)")
    return Tls.from_files(args.tls_cert, args.tls_key, client_ca) if args.tls_cert else None


def app_login(
    password_path: str | None, oidc_path: str | None, tls: Tls | None, prefix: str
) -> tuple[str | None, OidcLogin | None]:
    """The app's login: a shared password, or an identity provider's (checked: its
    discovery document read once), not both. ``prefix``: the flags' (``--app-`` for
    serve's ``--app-password-file``, ``--`` for the app command's)."""
    if password_path and oidc_path:
        raise BadInput(
            f"give {prefix}password-file or {prefix}oidc-file, not both: one login for the app"
        )
    password = password_file(password_path, f"{prefix}password-file")
    if not oidc_path:
        return password, None
    oidc = OidcLogin.from_file(oidc_path, f"{prefix}oidc-file")
    oidc.check_https(tls is not None)
    oidc.check_providers()
    return None, oidc


def password_file(path: str | None, flag: str) -> str | None:
    """The password a file holds (its first line; None without a file)."""
    if not path:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise BadInput(f"cannot read {flag} {path}: {reason}") from None
    password = text.splitlines()[0] if text else ""
    if not password:
        raise BadInput(f"{flag} {path} is empty")
    return password


def http_password(args: argparse.Namespace) -> str | None:
    """The HTTP interface's password: ``--http-password-file``, else the environment, else
    the deprecated ``--http-password`` (warned); None: none asked."""
    if args.http_password_file:
        return password_file(args.http_password_file, "--http-password-file")
    if args.http_password is not None:
        print(
            "grpc-overhead serve: warning: --http-password on the command line is deprecated: "
            "every user of this host reads it in ps; use --http-password-file FILE or "
            f"${environment.HTTP_PASSWORD}",
            file=sys.stderr,
        )
        return args.http_password or None
    return os.environ.get(environment.HTTP_PASSWORD) or None


def is_loopback(host: str) -> bool:
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def exposure(args: argparse.Namespace, security: Security, *, http: bool) -> list[str]:
    """What would be reachable from other hosts without TLS and authentication (empty:
    nothing). ``http``: the HTTP interface will listen (an embedded store, no --no-http)."""
    problems = _needs(
        f"the intake on --host {args.host}",
        args.host,
        tls=security.tls,
        **{"--auth-token-file": security.credentials},
    )
    if not args.no_app:
        login = security.app_password or security.app_oidc
        problems += app_exposure(args.host, security.tls, login, "--app-")
    if http:
        problems += _needs(
            f"the HTTP interface on --http-host {args.http_host}",
            args.http_host,
            tls=security.tls,
            **{"--http-password-file": security.http_password},
        )
    return problems


def app_exposure(host: str, tls: Tls | None, login: object | None, prefix: str) -> list[str]:
    """The app's part of ``exposure`` (``grpc-overhead app`` checks it alone); ``login``:
    its password or identity provider, ``prefix`` as ``app_login``'s."""
    flag = f"{prefix}password-file or {prefix}oidc-file"
    return _needs(f"the app on --host {host}", host, tls=tls, **{flag: login})


def _needs(listener: str, host: str, *, tls: object | None, **required: object | None) -> list[str]:
    """One line saying what ``listener`` lacks beyond loopback: TLS and the flags in
    ``required`` whose value is missing; nothing on loopback."""
    if is_loopback(host):
        return []
    missing = [
        flag for flag, present in (("--tls-cert/--tls-key", tls), *required.items()) if not present
    ]
    return [f"{listener} needs {' and '.join(missing)}"] if missing else []


def refusal(problems: list[str]) -> str:
    return (
        "refusing to listen beyond loopback without TLS and authentication: "
        + "; ".join(problems)
        + " (or --insecure to do so anyway)"
    )


def warning(problems: list[str], command: str = "serve") -> str:
    return (
        f"grpc-overhead {command}: warning: --insecure: listening beyond loopback without TLS and "
        "authentication: " + "; ".join(problems) + ": anyone who reaches these ports can "
        "send spans or read them"
    )

"""A real OpenID Connect provider for the app's login tests (``tools/bin/oidc-provider``,
``make oidc-provider``: zitadel/oidc's example provider, built from peers/oidc-provider).

It runs the whole authorization code flow a team's provider runs (discovery, its own
login page, signed ID tokens, JWKS), with one confidential web client registered for the
app's redirect URI and the users a test gives it.
"""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grpc_overhead.cli.processes import stop_process

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "tools" / "bin" / "oidc-provider"
CLIENT_ID = "grpc-overhead-app"


class ProviderMissing(RuntimeError):
    """The provider is not built (``make oidc-provider``; ``make test`` builds it)."""


@dataclass(frozen=True)
class User:
    username: str
    password: str
    email: str
    email_verified: bool = True


@dataclass
class RunningProvider:
    process: subprocess.Popen[str]
    issuer: str
    client_secret: str

    @property
    def metadata_url(self) -> str:
        return f"{self.issuer}.well-known/openid-configuration"

    def stop(self) -> int:
        return stop_process(self.process, 10.0)


def start_provider(
    directory: Path, redirect_uri: str, users: Iterable[User], client_secret: str
) -> RunningProvider:
    """The provider on a free loopback port, once it listens."""
    if not BINARY.exists():
        raise ProviderMissing(f"{BINARY} is missing: run `make oidc-provider` first")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "client-secret").write_text(client_secret + "\n")
    table = {
        f"u{n}": {"ID": f"u{n}", "Username": user.username, "Password": user.password,
                  "FirstName": user.username, "LastName": "Tester", "Email": user.email,
                  "EmailVerified": user.email_verified}
        for n, user in enumerate(users)
    }  # fmt: skip
    (directory / "users.json").write_text(json.dumps(table))
    with open(directory / "provider.log", "w") as log:
        process = subprocess.Popen(
            [str(BINARY), "-listen", "127.0.0.1:0", "-client-id", CLIENT_ID,
             "-client-secret-file", str(directory / "client-secret"),
             "-redirect-uri", redirect_uri, "-users-file", str(directory / "users.json")],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
        )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    found = re.match(r"^issuer (http://\S+/)$", line.strip())
    if not found:
        stop_process(process, 5.0)
        log = (directory / "provider.log").read_text()
        raise RuntimeError(f"oidc-provider did not start: {line!r} {log}")
    return RunningProvider(process, found.group(1), client_secret)


def oidc_file(
    path: Path,
    provider: RunningProvider,
    redirect_uri: str,
    *,
    cookie_secret: str = "c0ffee" * 8,
    allowed_domains: Iterable[str] = (),
) -> Path:
    """The app's ``--oidc-file``: Streamlit's ``[auth]`` settings for ``provider``."""
    domains = json.dumps(list(allowed_domains))
    path.write_text(textwrap.dedent(f"""\
        [auth]
        redirect_uri = "{redirect_uri}"
        cookie_secret = "{cookie_secret}"
        client_id = "{CLIENT_ID}"
        client_secret = "{provider.client_secret}"
        server_metadata_url = "{provider.metadata_url}"

        [grpc_overhead]
        allowed_domains = {domains}
        """))  # fmt: skip
    return path

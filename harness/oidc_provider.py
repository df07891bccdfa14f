"""A real OpenID Connect provider for the app's login tests (``tools/bin/oidc-provider``,
``make oidc-provider``: zitadel/oidc's example provider, built from peers/oidc-provider).

It runs the whole authorization code flow a team's provider runs (discovery, its own
login page, signed ID tokens, JWKS), with one confidential web client registered for the
app's redirect URI and the users a test gives it.
"""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grpc_overhead.processes import ServiceProcess

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "tools" / "bin" / "oidc-provider"
CLIENT_ID = "grpc-overhead-app"
_ISSUER = re.compile(r"^issuer (http://\S+/)$")


class ProviderMissing(RuntimeError):
    """The provider is not built (``make oidc-provider``; ``make test`` builds it)."""


@dataclass(frozen=True)
class User:
    username: str
    password: str
    email: str
    email_verified: bool = True


@dataclass(frozen=True)
class ProviderAddress:
    """Where the app finds a provider: what its ``--oidc-file`` names."""

    issuer: str
    client_secret: str

    @property
    def metadata_url(self) -> str:
        return f"{self.issuer}.well-known/openid-configuration"


class OidcProvider(ServiceProcess):
    """The provider on a free loopback port; ``address`` once it said its issuer."""

    name = "oidc-provider"
    ready_line = "issuer "

    def __init__(
        self, directory: Path, redirect_uri: str, users: Iterable[User], client_secret: str
    ) -> None:
        if not BINARY.exists():
            raise ProviderMissing(f"{BINARY} is missing: run `make oidc-provider` first")
        super().__init__(env=os.environ)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "client-secret").write_text(client_secret + "\n")
        table = {
            f"u{n}": {
                "ID": f"u{n}",
                "Username": user.username,
                "Password": user.password,
                "FirstName": user.username,
                "LastName": "Tester",
                "Email": user.email,
                "EmailVerified": user.email_verified,
            }
            for n, user in enumerate(users)
        }
        (directory / "users.json").write_text(json.dumps(table))
        self.client_secret = client_secret
        self.peer_args = [
            "-listen",
            "127.0.0.1:0",
            "-client-id",
            CLIENT_ID,
            "-client-secret-file",
            str(directory / "client-secret"),
            "-redirect-uri",
            redirect_uri,
            "-users-file",
            str(directory / "users.json"),
        ]
        self.address: ProviderAddress | None = None

    @property
    def command(self) -> list[str]:
        return [str(BINARY), *self.peer_args]

    def _ready(self, line: str) -> bool:
        found = _ISSUER.match(line.strip())
        if found:
            self.address = ProviderAddress(found.group(1), self.client_secret)
        return found is not None

    @property
    def issuer(self) -> str:
        assert self.address is not None, "the provider is not started"
        return self.address.issuer


def oidc_file(
    path: Path,
    provider: ProviderAddress,
    redirect_uri: str,
    *,
    cookie_secret: str = "c0ffee" * 8,
    allowed_domains: Iterable[str] = (),
) -> Path:
    """The app's ``--oidc-file``: Streamlit's ``[auth]`` settings for ``provider``."""
    domains = json.dumps(list(allowed_domains))
    path.write_text(
        textwrap.dedent(f"""\
        [auth]
        redirect_uri = "{redirect_uri}"
        cookie_secret = "{cookie_secret}"
        client_id = "{CLIENT_ID}"
        client_secret = "{provider.client_secret}"
        server_metadata_url = "{provider.metadata_url}"

        [grpc_overhead]
        allowed_domains = {domains}
        """)
    )
    return path

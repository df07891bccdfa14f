"""The app's login through an identity provider (OpenID Connect), where a team has one.

Streamlit does the protocol (``st.login``: the authorization code flow with Authlib, a
signed cookie that keeps the login across reloads for 30 days); this module reads and
checks its settings before anything listens, so a typo is one line at start and not an
"Authentication error" page at a colleague's first click. The file is Streamlit's own
secrets format, passed to it as ``secrets.files``::

    [auth]
    redirect_uri = "https://analyzer.team.example:8501/oauth2callback"
    cookie_secret = "..."            # 32+ random characters: openssl rand -hex 32
    client_id = "grpc-overhead"
    client_secret = "..."
    server_metadata_url = "https://idp.team.example/.well-known/openid-configuration"

    [grpc_overhead]                  # optional: who of the provider's users may look
    allowed_emails = ["alice@team.example"]
    allowed_domains = ["team.example"]

Several providers go in ``[auth.NAME]`` tables instead (one button each). Admission by
e-mail counts only addresses the provider says it verified (``email_verified``), or an
address anyone could claim at a provider with open sign-up would let them in.
"""

from __future__ import annotations

import json
import tomllib
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpc_overhead.analyzer.errors import BadInput

#: What Streamlit needs of each provider.
PROVIDER_KEYS = ("client_id", "client_secret", "server_metadata_url")
#: Shorter cookie secrets can be guessed offline from one signed cookie.
MIN_COOKIE_SECRET = 32
#: Where Streamlit answers the provider's redirect.
CALLBACK_PATH = "/oauth2callback"
DISCOVERY_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class OidcLogin:
    """Checked OIDC settings: the file Streamlit reads, its providers, who is admitted."""

    path: Path
    #: Provider names for ``st.login(name)``; ``("",)``: the one provider of ``[auth]``.
    providers: tuple[str, ...]
    redirect_uri: str
    metadata_urls: tuple[str, ...] = field(repr=False)
    allowed_emails: frozenset[str] = frozenset()
    allowed_domains: frozenset[str] = frozenset()

    @classmethod
    def from_file(cls, path: str | Path, flag: str) -> OidcLogin:
        """The settings ``path`` holds; a ``BadInput`` naming the file and the setting
        (never a secret's value) where one is missing or unusable."""
        path = Path(path)
        try:
            settings = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or "not UTF-8 text"
            raise BadInput(f"cannot read {flag} {path}: {reason}") from None
        except tomllib.TOMLDecodeError as error:
            raise BadInput(f"{flag} {path} is not TOML: {error}") from None
        where = f"{flag} {path}"
        auth = _table(settings, "auth", where)
        redirect_uri = _text(auth, "redirect_uri", f"{where} [auth]")
        if not redirect_uri.split("?")[0].endswith(CALLBACK_PATH):
            raise BadInput(
                f"{where}: [auth] redirect_uri must end with {CALLBACK_PATH} "
                "(where the app answers the provider)"
            )
        if len(_text(auth, "cookie_secret", f"{where} [auth]")) < MIN_COOKIE_SECRET:
            raise BadInput(
                f"{where}: [auth] cookie_secret is shorter than {MIN_COOKIE_SECRET} "
                "characters; make one with: openssl rand -hex 32"
            )
        named = {name: value for name, value in auth.items() if isinstance(value, dict)}
        if named:
            providers = tuple(sorted(named))
            sections = [(named[name], f"{where} [auth.{name}]") for name in providers]
        else:
            providers, sections = ("",), [(auth, f"{where} [auth]")]
        urls = tuple(_provider(section, label) for section, label in sections)
        access = settings.get("grpc_overhead", {})
        if not isinstance(access, dict):
            raise BadInput(f"{where}: [grpc_overhead] must be a table")
        emails = _names(access, "allowed_emails", where)
        domains = _names(access, "allowed_domains", where, leading="@")  # "@team.example"
        return cls(path, providers, redirect_uri, urls, emails, domains)

    @property
    def restricted(self) -> bool:
        return bool(self.allowed_emails or self.allowed_domains)

    def admits(self, claims: Mapping[str, Any]) -> bool:
        """Whether the user the provider vouched for (its ID token's claims) may look."""
        if not self.restricted:
            return True
        email = str(claims.get("email") or "").strip().lower()
        if not email or claims.get("email_verified") is not True:
            return False
        domain = email.rpartition("@")[2]
        return email in self.allowed_emails or domain in self.allowed_domains

    def check_https(self, tls: bool) -> None:
        """An app serving HTTPS answers no ``http://`` redirect: refuse the mismatch."""
        if tls and self.redirect_uri.startswith("http://"):
            raise BadInput(
                f"{self.path}: [auth] redirect_uri is http:// but the app serves "
                "HTTPS (--tls-cert): make it https://"
            )

    def check_providers(self, timeout_s: float = DISCOVERY_TIMEOUT_S) -> None:
        """Read each provider's discovery document once: a wrong URL or a provider that is
        down is said at start, in one line, not at a colleague's first login."""
        for url in self.metadata_urls:
            try:
                with urllib.request.urlopen(url, timeout=timeout_s) as answer:
                    document = json.loads(answer.read(1 << 20))
            except (urllib.error.URLError, OSError, ValueError) as error:
                reason = getattr(error, "reason", None) or error
                raise BadInput(
                    f"cannot read the identity provider's discovery document "
                    f"{url} ({self.path}): {reason}"
                ) from None
            missing = [
                key
                for key in ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
                if not isinstance(document, dict) or key not in document
            ]
            if missing:
                raise BadInput(
                    f"{url} ({self.path}) is no OpenID Connect discovery document: "
                    f"it lacks {', '.join(missing)}"
                )


def _table(settings: Mapping[str, Any], name: str, where: str) -> Mapping[str, Any]:
    value = settings.get(name)
    if not isinstance(value, dict):
        raise BadInput(f"{where} has no [{name}] table (Streamlit's OIDC settings)")
    return value


def _text(table: Mapping[str, Any], key: str, where: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value.strip():
        raise BadInput(f"{where} needs {key} (a non-empty string)")
    return value.strip()


def _provider(section: Mapping[str, Any], where: str) -> str:
    for key in PROVIDER_KEYS:
        _text(section, key, where)
    url = section["server_metadata_url"].strip()
    if not url.startswith(("https://", "http://")):
        raise BadInput(f"{where}: server_metadata_url must be an http(s) URL")
    return url


def _names(table: Mapping[str, Any], key: str, where: str, leading: str = "") -> frozenset[str]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise BadInput(f"{where}: [grpc_overhead] {key} must be a list of strings")
    return frozenset(item.strip().lower().lstrip(leading) for item in value if item.strip())

"""The team's secrets the serve security tests share: a certificate authority and a
server certificate from it, a token file and an HTTP password file (module fixture
``secrets``; use it with ``from tests.cli.team_secrets import secrets_fixture  # noqa: F401``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.analyzer.certificates import Authority, Issued

TOKEN = "team-token-7f3a9c"
PASSWORD = "http-pass-51d2"


@pytest.fixture(scope="module", name="secrets")
def secrets_fixture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("team")
    authority = Authority(directory)
    server: Issued = authority.issue("serve", server=True)
    (directory / "tokens").write_text(TOKEN + "\n")
    (directory / "http-password").write_text(PASSWORD + "\n")
    return {
        "ca": authority.certificate,
        "cert": server.certificate,
        "key": server.key,
        "tokens": directory / "tokens",
        "http_password": directory / "http-password",
    }

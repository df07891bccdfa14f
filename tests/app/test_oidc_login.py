"""The app's login through a real OpenID Connect provider (``--oidc-file``).

A provider built here (harness.oidc_provider) runs the authorization code flow with its
own login page; ``grpc-overhead serve`` serves the app over HTTPS with Streamlit's
``st.login`` (``--app-oidc-file``; the app command's ``--oidc-file`` is the same). In
Chromium: no page before the login; the provider's page refuses a wrong password; a
team member lands on the pages and stays logged in across a reload; a user the provider
vouches for but the team's allow-list does not name (another domain, or an e-mail the
provider has not verified) sees who they are and no page; logging out asks again.
Without a browser: a provider that is down, a file that lacks a setting or holds a weak
cookie secret, and two logins at once are one-line errors before anything listens.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from grpc_overhead.processes import free_port, offline_env
from harness.browser import RunningApp, start_command
from harness.oidc_provider import OidcProvider, ProviderAddress, User, oidc_file
from tests.analyzer.certificates import Authority

PROVIDER_PASSWORD = "idp-pass-93c1"
CLIENT_SECRET = "client-secret-4be2"
USERS = (
    User("alice", PROVIDER_PASSWORD, "alice@team.example"),
    User("bob", PROVIDER_PASSWORD, "bob@elsewhere.example"),
    User("carol", PROVIDER_PASSWORD, "carol@team.example", email_verified=False),
)
pytestmark = pytest.mark.e2e
METRIC = '[data-testid="stMetric"]'


def _command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grpc_overhead", *args],
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A provider, a certificate for the app, the app's port and its OIDC file."""
    directory = tmp_path_factory.mktemp("oidc")
    issued = Authority(directory).issue("app", server=True)
    port = free_port()
    redirect = f"https://127.0.0.1:{port}/oauth2callback"
    with OidcProvider(directory / "provider", redirect, USERS, CLIENT_SECRET) as provider:
        yield {
            "directory": directory,
            "provider": provider,
            "port": port,
            "redirect": redirect,
            "tls": ["--tls-cert", str(issued.certificate), "--tls-key", str(issued.key)],
            "file": oidc_file(
                directory / "oidc.toml",
                provider.address,
                redirect,
                allowed_domains=["team.example"],
            ),
        }


@pytest.fixture(scope="module")
def app(setting: dict) -> Iterator[RunningApp]:
    store = setting["directory"] / "store"
    subprocess.run(
        [sys.executable, "-m", "tests.app.seeded", str(store), "40"], check=True, timeout=300
    )
    # serve, as a team runs it (the app command's flags are checked below, the same code)
    running = start_command(
        [
            "serve",
            "--store",
            str(store),
            "--otlp-port",
            "0",
            "--no-http",
            "--app-port",
            str(setting["port"]),
            *setting["tls"],
            "--app-oidc-file",
            str(setting["file"]),
        ],
        offline_env(),
    )
    yield running
    assert running.stop() == 0, running.text()
    for secret in (CLIENT_SECRET, PROVIDER_PASSWORD, "c0ffee" * 8):
        assert secret not in running.text()


def _log_in(page, provider: OidcProvider, user: str, password: str) -> None:
    """From the app's login page through the provider's own form."""
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{provider.issuer}login/**", timeout=60_000)
    page.locator("#username").fill(user)
    page.locator("#password").fill(password)
    page.get_by_role("button", name="Login").click()


@pytest.mark.browser
def test_a_team_member_logs_in_through_the_provider_and_stays_logged_in(
    app: RunningApp, setting: dict
) -> None:
    from harness.browser import EXCEPTION, chromium, wait_loaded

    provider = setting["provider"]
    with chromium(ignore_https_errors=True) as browser:
        page = browser.new_page()
        page.goto(f"{app.url}/overview", wait_until="domcontentloaded")
        wait_loaded(page)
        assert page.get_by_role("button", name="Log in").count() == 1
        assert page.locator(METRIC).count() == 0  # no page ran
        # The provider's own page refuses a wrong password; nothing reaches the app.
        _log_in(page, provider, "alice", "not-her-password")
        page.get_by_text("username or password wrong").wait_for(timeout=30_000)
        assert page.url.startswith(provider.issuer)
        page.locator("#username").fill("alice")
        page.locator("#password").fill(PROVIDER_PASSWORD)
        page.get_by_role("button", name="Login").click()
        page.wait_for_url(f"{app.url}/**", timeout=60_000)
        wait_loaded(page)
        page.get_by_text("Logged in as alice@team.example").wait_for(timeout=30_000)
        page.goto(f"{app.url}/overview", wait_until="domcontentloaded")
        wait_loaded(page)
        page.locator(METRIC).first.wait_for(timeout=60_000)
        assert page.locator(EXCEPTION).count() == 0
        # Streamlit's signed cookie keeps the login across a reload and a new tab.
        other = browser.new_page()
        other.goto(f"{app.url}/findings", wait_until="domcontentloaded")
        wait_loaded(other)
        assert other.get_by_text("Logged in as alice@team.example").count() == 1
        assert other.get_by_role("button", name="Log in").count() == 0
        # Logging out asks again.
        other.get_by_role("button", name="Log out").click()
        other.get_by_role("button", name="Log in").wait_for(timeout=60_000)
        page.goto(f"{app.url}/overview", wait_until="domcontentloaded")
        wait_loaded(page)
        assert page.get_by_role("button", name="Log in").count() == 1
        assert page.locator(METRIC).count() == 0


@pytest.mark.browser
@pytest.mark.parametrize(
    ("user", "shown"),
    [("bob", "bob@elsewhere.example"), ("carol", "carol@team.example")],
    ids=["another-domain", "unverified-email"],
)
def test_a_user_the_allow_list_does_not_admit_sees_no_page(
    app: RunningApp, setting: dict, user: str, shown: str
) -> None:
    from harness.browser import chromium, wait_loaded

    with chromium(ignore_https_errors=True) as browser:
        page = browser.new_page()
        page.goto(f"{app.url}/overview", wait_until="domcontentloaded")
        wait_loaded(page)
        _log_in(page, setting["provider"], user, PROVIDER_PASSWORD)
        page.wait_for_url(f"{app.url}/**", timeout=60_000)
        page.get_by_text(
            f"You are logged in as {shown}, whom this team's app does not admit"
        ).wait_for(timeout=60_000)
        wait_loaded(page)
        assert page.locator(METRIC).count() == 0
        page.goto(f"{app.url}/explorer", wait_until="domcontentloaded")
        wait_loaded(page)
        assert page.get_by_text("does not admit").count() == 1
        assert page.locator(METRIC).count() == 0
        page.get_by_role("button", name="Log out").click()
        page.get_by_role("button", name="Log in").wait_for(timeout=60_000)


def test_a_provider_that_is_down_is_one_line_at_start(setting: dict, tmp_path: Path) -> None:
    down = ProviderAddress(f"http://127.0.0.1:{free_port()}/", CLIENT_SECRET)
    path = oidc_file(tmp_path / "oidc.toml", down, setting["redirect"])
    done = _command(
        "app",
        "--store",
        str(tmp_path),
        "--port",
        "0",
        "--no-browser",
        *setting["tls"],
        "--oidc-file",
        str(path),
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot read the identity provider's discovery document" in lines[0]
    assert down.metadata_url in lines[0] and CLIENT_SECRET not in done.stderr


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            lambda text: text.replace('client_id = "grpc-overhead-app"\n', ""),
            "[auth] needs client_id",
        ),
        (
            lambda text: text.replace("c0ffee" * 8, "short"),
            "cookie_secret is shorter than 32 characters; make one with: openssl rand -hex 32",
        ),
        (
            lambda text: text.replace("/oauth2callback", "/callback"),
            "redirect_uri must end with /oauth2callback",
        ),
        (
            lambda text: text.replace("https://127.0.0.1", "http://127.0.0.1"),
            "redirect_uri is http:// but the app serves HTTPS",
        ),
        (lambda text: text.replace("[auth]", "[auth"), "is not TOML"),
        (lambda text: text.replace("[auth]", "[login]"), "has no [auth] table"),
        (
            lambda text: text.replace(
                'allowed_domains = ["team.example"]', 'allowed_domains = "team.example"'
            ),
            "allowed_domains must be a list of strings",
        ),
    ],
    ids=[
        "no-client-id",
        "weak-cookie-secret",
        "wrong-callback",
        "http-redirect",
        "not-toml",
        "no-auth-table",
        "domains-not-a-list",
    ],
)
def test_a_bad_oidc_file_is_one_line_naming_the_setting(
    setting: dict, tmp_path: Path, edit, said: str
) -> None:
    path = tmp_path / "oidc.toml"
    path.write_text(edit(setting["file"].read_text()))
    done = _command(
        "app",
        "--store",
        str(tmp_path),
        "--port",
        "0",
        "--no-browser",
        *setting["tls"],
        "--oidc-file",
        str(path),
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], done.stderr
    assert CLIENT_SECRET not in done.stderr and "Traceback" not in done.stderr


def test_one_login_at_a_time_and_an_oidc_login_opens_the_app_beyond_loopback(
    setting: dict, tmp_path: Path
) -> None:
    password = tmp_path / "password"
    password.write_text("team-pass\n")
    both = _command(
        "serve",
        "--store",
        str(tmp_path / "store"),
        "--otlp-port",
        "0",
        "--no-http",
        *setting["tls"],
        "--app-password-file",
        str(password),
        "--app-oidc-file",
        str(setting["file"]),
    )
    assert both.returncode == 2
    assert "give --app-password-file or --app-oidc-file, not both" in both.stderr
    # The exposure rule counts the provider's login as the app's authentication.
    from grpc_overhead.analyzer.tls import Tls
    from grpc_overhead.app.oidc import OidcLogin
    from grpc_overhead.cli.serve_security import app_exposure

    tls = Tls.from_files(setting["tls"][1], setting["tls"][3])
    oidc = OidcLogin.from_file(setting["file"], "--oidc-file")
    assert app_exposure("0.0.0.0", tls, oidc, "--") == []
    assert app_exposure("0.0.0.0", None, oidc, "--") == [
        "the app on --host 0.0.0.0 needs --tls-cert/--tls-key"
    ]
    assert app_exposure("0.0.0.0", tls, None, "--") == [
        "the app on --host 0.0.0.0 needs --password-file or --oidc-file"
    ]


def test_the_team_guides_oidc_example_is_a_file_the_app_takes(tmp_path: Path) -> None:
    import re

    from grpc_overhead.app.oidc import OidcLogin
    from harness.browser import REPO

    guide = (REPO / "docs" / "team.md").read_text()
    found = re.search(r"<!-- example: oidc -->\n\s*```toml\n(.*?)\n\s*```", guide, re.S)
    assert found, "docs/team.md lost its OIDC example"
    path = tmp_path / "oidc.toml"
    path.write_text("\n".join(line.strip() for line in found.group(1).splitlines()))
    login = OidcLogin.from_file(path, "--app-oidc-file")
    assert login.providers == ("",) and login.allowed_domains == {"team.example"}
    assert login.admits({"email": "Alice@Team.Example", "email_verified": True})
    assert not login.admits({"email": "alice@team.example", "email_verified": False})
    assert not login.admits({"email": "mallory@team.example.evil", "email_verified": True})


def test_several_providers_are_named_tables_each_checked(tmp_path: Path) -> None:
    from grpc_overhead.analyzer.errors import BadInput
    from grpc_overhead.app.oidc import OidcLogin

    common = (
        f'[auth]\nredirect_uri = "https://a.example/oauth2callback"\ncookie_secret = "{"x" * 40}"\n'
    )
    provider = (
        'client_id = "c"\nclient_secret = "s3cr3t-value"\n'
        'server_metadata_url = "https://{0}/.well-known/openid-configuration"\n'
    )
    path = tmp_path / "oidc.toml"
    path.write_text(
        common
        + "[auth.okta]\n"
        + provider.format("okta.example")
        + "[auth.google]\n"
        + provider.format("accounts.example")
    )
    login = OidcLogin.from_file(path, "--app-oidc-file")
    assert login.providers == ("google", "okta") and not login.restricted
    assert login.admits({"sub": "anyone"})  # no allow-list: the provider decides
    path.write_text(
        common + "[auth.okta]\n" + provider.format("okta.example").replace('client_id = "c"\n', "")
    )
    with pytest.raises(BadInput, match=r"\[auth.okta\] needs client_id") as refused:
        OidcLogin.from_file(path, "--app-oidc-file")
    assert "s3cr3t-value" not in str(refused.value)

"""The app's login, before any page runs (``main.py``): nothing is read from the store
until it passes.

Two kinds. With an identity provider (``oidc``): Streamlit's own ``st.login`` (one
button per provider), its signed cookie keeping the login across reloads; a user the
provider vouched for but the team's allow-list does not name sees who they are logged in
as and a way out, never a page. Without one, a shared password, asked once per browser
session: compared in constant time, a wrong one waits a second (a guesser tries one a
second per session) and is never echoed; more than five wrong ones from one address lock
it out for a while, whatever its sessions (``analyzer.throttle``).
"""

from __future__ import annotations

import time

import streamlit as st

from grpc_overhead.analyzer.throttle import FailedLogins, lockout_message
from grpc_overhead.analyzer.tls import same_secret
from grpc_overhead.app import runtime
from grpc_overhead.app.oidc import OidcLogin

#: Seconds a wrong password waits before it is answered.
WRONG_PASSWORD_DELAY_S = 1.0
_LOGGED_IN = "grpc_overhead_logged_in"


def require_login() -> None:
    """Return when this session may see the pages; else show the login and stop."""
    served = runtime.served()
    if served is not None and served.oidc is not None:
        _require_provider_login(served.oidc)
        return
    if served is None or served.password is None or st.session_state.get(_LOGGED_IN):
        return
    st.title("grpc-overhead")
    with st.form("login"):
        given = st.text_input(
            "Password", type="password", help="The team's password (serve --app-password-file)"
        )
        submitted = st.form_submit_button("Log in")
    if submitted:
        source = st.context.ip_address or "this host"
        wait = _failed_logins().locked_for(source)
        if wait > 0:
            st.error(lockout_message(source, wait).capitalize() + ".")
            st.stop()
        if same_secret(given.encode(), served.password.encode()):
            _failed_logins().succeeded(source)
            st.session_state[_LOGGED_IN] = True
            st.rerun()
        _failed_logins().failed(source)
        time.sleep(WRONG_PASSWORD_DELAY_S)
        st.error("Wrong password. Ask whoever runs serve for the team's password.")
    st.stop()


@st.cache_resource
def _failed_logins() -> FailedLogins:
    """One count for every session of this process (``throttle``): a guesser's many
    sessions share its lockout."""
    return FailedLogins()


def _require_provider_login(oidc: OidcLogin) -> None:
    user = st.user
    if not user.is_logged_in:
        st.title("grpc-overhead")
        st.write("Log in with your team's identity provider to see the calls.")
        for provider in oidc.providers:
            label = f"Log in with {provider}" if provider else "Log in"
            if st.button(label, key=f"login-{provider}", type="primary"):
                st.login(provider or None)
        st.stop()
    who = str(user.get("email") or user.get("preferred_username") or user.get("sub") or "?")
    if not oidc.admits(user.to_dict()):
        st.title("grpc-overhead")
        st.error(
            f"You are logged in as {who}, whom this team's app does not admit "
            "(its allowed e-mails and domains; a verified e-mail is needed). "
            "Ask whoever runs serve to add you, or log in as someone else."
        )
        st.button("Log out", on_click=st.logout, key="logout-refused")
        st.stop()
    with st.sidebar:
        st.caption(f"Logged in as {who}")
        st.button("Log out", on_click=st.logout, key="logout")

"""The app's shared-password login: a team without an identity provider keeps others out.

Asked for before any page runs (``main.py``), once per browser session: the password is
compared in constant time, a wrong one waits a second (a guesser tries one a second per
session) and is never echoed. Until then no page runs and nothing is read from the store.
"""

from __future__ import annotations

import time

import streamlit as st

from grpc_overhead.analyzer.tls import same_secret
from grpc_overhead.app import runtime

#: Seconds a wrong password waits before it is answered.
WRONG_PASSWORD_DELAY_S = 1.0
_LOGGED_IN = "grpc_overhead_logged_in"


def require_login() -> None:
    """Return when this session may see the pages; else show the login form and stop."""
    served = runtime.served()
    if served is None or served.password is None or st.session_state.get(_LOGGED_IN):
        return
    st.title("grpc-overhead")
    with st.form("login"):
        given = st.text_input("Password", type="password",
                              help="The team's password (serve --app-password-file)")  # fmt: skip
        submitted = st.form_submit_button("Log in")
    if submitted:
        if same_secret(given.encode(), served.password.encode()):
            st.session_state[_LOGGED_IN] = True
            st.rerun()
        time.sleep(WRONG_PASSWORD_DELAY_S)
        st.error("Wrong password. Ask whoever runs serve for the team's password.")
    st.stop()

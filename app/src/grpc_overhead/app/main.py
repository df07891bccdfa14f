"""The Streamlit script: page navigation. Each page lives in ``pages/`` and draws itself.

Run inside a process that registered its store (``grpc-overhead serve``,
``app`` or ``demo``), never with a bare ``streamlit run``: a chDB data
directory belongs to one process, so the app reads the owner's store.

Every page has its own URL (``/findings``, ``/overview``, ...), so a link to
any of them loads it. Streamlit serves its default page at ``/`` only (its
``url_path`` is not reachable), so the default page is a hidden one that
sends ``/`` on to the first page, Findings (what to change, the question users
open the app with), keeping the query parameters (a shared ``/?run=...`` link
keeps its filters).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from grpc_overhead.app import login, refresh
from grpc_overhead.app.navigation import PAGES

PAGES_DIR = Path(__file__).parent / "pages"


def main() -> None:
    st.set_page_config(page_title="grpc-overhead", page_icon=":material/speed:", layout="wide")
    login.require_login()  # before any page: nothing is read until then
    pages = [
        st.Page(str(PAGES_DIR / script), title=title, icon=icon, url_path=url)
        for script, title, icon, url in PAGES
    ]

    def home() -> None:
        st.switch_page(pages[0], query_params=st.query_params.to_dict())

    root = st.Page(home, title=PAGES[0][1], url_path="home", default=True, visibility="hidden")
    with refresh.page_run():
        st.navigation([root, *pages]).run()


main()

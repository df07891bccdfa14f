"""The Streamlit script: page navigation. Each page lives in ``pages/`` and draws itself.

Run inside a process that registered its store (``grpc-overhead serve``,
``app`` or ``demo``), never with a bare ``streamlit run``: a chDB data
directory belongs to one process, so the app reads the owner's store.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

PAGES_DIR = Path(__file__).parent / "pages"

#: (script, title, icon, url path); the first is the default page.
PAGES: tuple[tuple[str, str, str, str], ...] = (
    ("overview.py", "Overview", ":material/dashboard:", "overview"),
    ("phases.py", "Phases", ":material/stacked_bar_chart:", "phases"),
    ("payload.py", "Payload & compression", ":material/compress:", "payload"),
    ("instances.py", "Instances", ":material/dns:", "instances"),
    ("explorer.py", "Call explorer", ":material/timeline:", "explorer"),
    ("clock_offsets.py", "Clock offsets", ":material/schedule:", "clock-offsets"),
    ("experiments.py", "Experiments", ":material/science:", "experiments"),
    ("sql_console.py", "SQL", ":material/terminal:", "sql"),
)


def main() -> None:
    st.set_page_config(page_title="grpc-overhead", page_icon=":material/speed:", layout="wide")
    pages = [
        st.Page(str(PAGES_DIR / script), title=title, icon=icon, url_path=url, default=index == 0)
        for index, (script, title, icon, url) in enumerate(PAGES)
    ]
    st.navigation(pages).run()


main()

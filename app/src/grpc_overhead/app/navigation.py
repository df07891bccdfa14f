"""The app's pages: one list that the navigation (``main.py``) and links between pages read.

Kept out of ``main.py``, which Streamlit runs as a script (importing it would start the app).
"""

from __future__ import annotations

#: (script, title, icon, url path); the first is where ``/`` leads.
PAGES: tuple[tuple[str, str, str, str], ...] = (
    ("findings.py", "Findings", ":material/lightbulb:", "findings"),
    ("overview.py", "Overview", ":material/dashboard:", "overview"),
    ("phases.py", "Phases", ":material/stacked_bar_chart:", "phases"),
    ("payload.py", "Payload & compression", ":material/compress:", "payload"),
    ("instances.py", "Instances", ":material/dns:", "instances"),
    ("explorer.py", "Call explorer", ":material/timeline:", "explorer"),
    ("clock_offsets.py", "Clock offsets", ":material/schedule:", "clock-offsets"),
    ("experiments.py", "Experiments", ":material/science:", "experiments"),
    ("sql_console.py", "SQL", ":material/terminal:", "sql"),
)


def title(url_path: str) -> str:
    """The title of the page at ``url_path`` (as the navigation shows it)."""
    return next(name for _, name, _, url in PAGES if url == url_path)


def script(url_path: str) -> str:
    """The script (in ``pages/``) of the page at ``url_path``."""
    return next(name for name, _, _, url in PAGES if url == url_path)

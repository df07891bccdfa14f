"""The sidebar filters in the URL: a link shares the view, and the next page keeps it.

``write`` mirrors the sidebar into the URL's query parameters; ``restore`` puts the
last page run's back when the URL carries none, because Streamlit's navigation drops
the URL's parameters and the widgets' state when the user picks another page in the
sidebar.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import streamlit as st


def restore(params: Any) -> None:
    """The last page run's filters into ``params`` (``st.query_params``) if it has none."""
    if not any(key in params for key in FILTER_PARAMS):
        for key, value in st.session_state.get(_REMEMBERED, {}).items():
            params[key] = value


def write(
    range_key: str,
    since: datetime | None,
    until: datetime | None,
    service: str | None,
    method: str | None,
    run: str | None,
    otel: str | None,
    refresh: str | None,
) -> None:
    """Mirror the sidebar into the URL, leaving every other page's parameters alone."""
    wanted = {
        "range": None if range_key == "all" else range_key,
        "since": since.isoformat() if since and range_key == "custom" else None,
        "until": until.isoformat() if until and range_key == "custom" else None,
        "service": service,
        "method": method,
        "run": run,
        "otel": otel,
        "refresh": refresh,
    }
    params = st.query_params
    for key, value in wanted.items():
        if value is None:
            if key in params:
                del params[key]
        elif params.get(key) != value:
            params[key] = value
    st.session_state[_REMEMBERED] = {key: value for key, value in wanted.items() if value}


#: The URL parameters the sidebar filters own (``write``).
FILTER_PARAMS = ("range", "since", "until", "service", "method", "run", "otel", "refresh")
#: Session state key: the filters of the last page run, for the next page (``filters``).
_REMEMBERED = "_remembered_filters"

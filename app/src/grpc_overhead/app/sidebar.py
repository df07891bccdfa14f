"""The sidebar filters every page shares: time range, service, method, run, OpenTelemetry
service and auto-refresh, kept in the URL's query parameters (``url_filters``) so a view
can be shared as a link.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import streamlit as st

from grpc_overhead.analyzer.insights import catalog
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.app import url_filters
from grpc_overhead.app.cached import load_slowly_changing, source
from grpc_overhead.app.refresh import (
    MIN_IDLE_S,
    REFRESH_S,
    TTL_S,
    auto_refresh,
    counter_sees_every_write,
    snapshot_ns,
)

ANY = "(all)"


@dataclass(frozen=True)
class TimeRange:
    key: str  # the ``range`` query parameter
    label: str
    length: timedelta | None  # None: all time (or custom)


TIME_RANGES: tuple[TimeRange, ...] = (
    TimeRange("all", "All time", None),
    TimeRange("5m", "Last 5 minutes", timedelta(minutes=5)),
    TimeRange("15m", "Last 15 minutes", timedelta(minutes=15)),
    TimeRange("1h", "Last hour", timedelta(hours=1)),
    TimeRange("6h", "Last 6 hours", timedelta(hours=6)),
    TimeRange("24h", "Last 24 hours", timedelta(hours=24)),
    TimeRange("custom", "Custom (UTC)", None),
)
_RANGES = {time_range.key: time_range for time_range in TIME_RANGES}

#: Query parameters the sidebar owns; pages may keep their own under other names.
QUERY_KEYS = ("range", "since", "until", "service", "method", "run", "otel", "refresh")


def filters() -> CallFilters:
    """Draw the sidebar filters (once per page run) and return what they select.

    Relative ranges ("last 15 minutes") end at now rounded down to ``TTL_S``,
    so reruns within that time share cached answers.
    """
    params = st.query_params
    url_filters.restore(params)
    sidebar = st.sidebar
    sidebar.header("Filters")
    range_keys = [time_range.key for time_range in TIME_RANGES]
    wanted_range = params.get("range", "all")
    if wanted_range not in _RANGES:
        sidebar.warning(f"Unknown time range {wanted_range!r} in the URL; showing all time.")
        wanted_range = "all"
    range_key = sidebar.selectbox(
        "Time range",
        range_keys,
        index=range_keys.index(wanted_range),
        format_func=lambda key: _RANGES[key].label,
        key="filter_range",
    )
    since, until = _time_bounds(range_key, params)

    choices = load_slowly_changing(catalog.filter_choices, CallFilters(since=since, until=until))
    wanted_service, wanted_method = _split_method(params.get("service"), params.get("method"))
    service = _choice(
        "Service",
        sorted(choices["service"].unique()),
        wanted_service,
        "filter_service",
        help="The gRPC service (rpc.service).",
    )
    in_service = choices if service is None else choices[choices["service"] == service]
    method = _choice(
        "Method", sorted(in_service["method"].unique()), wanted_method, "filter_method"
    )
    runs = sorted(run for run in choices["run_id"].unique() if run)
    run = _choice("Run", runs, params.get("run"), "filter_run")
    named = {name for names in choices["otel_services"] for name in names}
    otel = _choice(
        "OpenTelemetry service",
        sorted(named),
        params.get("otel"),
        "filter_otel",
        help="OTEL_SERVICE_NAME of the client or the server of a call.",
    )

    served = source()
    when = f"every {REFRESH_S:g} s"
    if counter_sees_every_write(served):
        when = f"as soon as new spans are stored (and {when} for a range that ends now)"
    elif served.changes is not None:
        when = f"as soon as new spans are stored, and {when}"
    refresh = sidebar.toggle(
        "Auto-refresh",
        value=params.get("refresh", "1" if served.live else "0") == "1",
        key="filter_refresh",
        help=f"Rerun the page {when}; a page that took long to draw stays still for at "
        f"least {MIN_IDLE_S:g} s before it reruns.",
    )
    # Only a choice that differs from the default goes into the URL.
    refresh_param = None if refresh == served.live else ("1" if refresh else "0")
    url_filters.write(range_key, since, until, service, method, run, otel, refresh_param)
    if refresh:
        auto_refresh(served, moving_range=_RANGES[range_key].length is not None)
    chosen = CallFilters(
        since=since, until=until, service=service, method=method, run_id=run, otel_service=otel
    )
    # While spans may arrive (this process's intake, or a store another process writes: read
    # through serve, a ClickHouse server), one snapshot per page run and half-arrived calls
    # held back; a store this process owns without an intake has no half in flight.
    if served.live or not served.store.backend.owns_data:
        return chosen.snapshot(snapshot_ns(served))
    return chosen.at_rest()


def _split_method(service: str | None, method: str | None) -> tuple[str | None, str | None]:
    """A ``method`` parameter written as ``report`` prints it (``pkg.Service/Method``, also
    with gRPC's leading ``/``) names its service too, unless ``service`` is set."""
    if not method or "/" not in method:
        return service, method
    named_service, _, named_method = method.strip().lstrip("/").rpartition("/")
    return service or named_service or None, named_method or None


def _time_bounds(range_key: str, params: Any) -> tuple[datetime | None, datetime | None]:
    time_range = _RANGES[range_key]
    if time_range.length is not None:
        now = datetime.now(UTC)
        rounded = now.replace(microsecond=0) - timedelta(seconds=now.second % int(max(TTL_S, 1)))
        return rounded - time_range.length, None
    if range_key != "custom":
        return None, None
    since = _parse_moment(
        st.sidebar.text_input("From (UTC, ISO 8601)", params.get("since", ""), key="filter_since"),
        "From",
    )
    until = _parse_moment(
        st.sidebar.text_input("To (UTC, ISO 8601)", params.get("until", ""), key="filter_until"),
        "To",
    )
    if since and until and until <= since:
        st.sidebar.error("'To' must be after 'From'; showing from 'From' on.")
        until = None
    return since, until


def _parse_moment(text: str, label: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        st.sidebar.error(f"{label}: {text!r} is not a date and time like 2026-11-21T14:05:00.")
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _choice(
    label: str, options: list[str], wanted: str | None, key: str, help: str | None = None
) -> str | None:
    """A selectbox with an "(all)" entry; a value from the URL that no call has is kept
    (shown, and matching nothing) rather than silently dropped."""
    values = [ANY, *[option for option in options if option]]
    if wanted and wanted not in values:
        values.append(wanted)
    index = values.index(wanted) if wanted in values else 0
    selected = st.sidebar.selectbox(label, values, index=index, key=key, help=help)
    return None if selected == ANY else selected

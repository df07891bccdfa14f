"""What every page shares: the store, the sidebar filters, cached analyzer calls, empty states.

Pages stay thin: they read ``filters()``, call analyzer functions through
``load`` (cached for ``TTL_S`` seconds, so a refresh within the freshness
target never runs the same query twice) and draw. The sidebar keeps its
state in the URL's query parameters, so a view can be shared as a link.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from grpc_overhead.analyzer.calls import CallFilters
from grpc_overhead.analyzer.errors import AnalyzerError, QueryError, StoreUnavailable
from grpc_overhead.analyzer.insights import catalog, sources
from grpc_overhead.app import runtime, url_filters
from grpc_overhead.app.refresh import (
    MIN_IDLE_S,
    REFRESH_S,
    TTL_S,
    auto_refresh,
    counter_sees_every_write,
    snapshot_ns,
)

#: Inside ``serve``, an answer about the calls up to a snapshot (``refresh.snapshot_ns``)
#: changes only by writes the intake's counter does not see (a ClickHouse server's other
#: writers; on serve's own chDB store, retention dropping old minutes): reused this long,
#: so a page rerun by its timer with nothing new does not redo every query.
SNAPSHOT_TTL_S = 5.0
#: Filter choices change slowly; listing them is not worth redoing on every rerun.
CHOICES_TTL_S = 15.0
#: A store nobody writes to (``grpc-overhead app``) gives the same answers all day.
STATIC_TTL_S = 600.0

ANY = "(all)"

#: ``st.dataframe(height=...)`` of every table with a bounded set of rows (phases, methods,
#: instances, algorithms): all of them, never Streamlit's default of ten and a scrollbar
#: (which hid the Phases table's last row, unattributed, "shown, never hidden"). Lists
#: the user sizes (the explorer's calls, the SQL page's rows) keep the default and scroll.
ALL_ROWS = "content"


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


def source() -> runtime.Served:
    """The store this process serves; stops the page with what to do when there is none."""
    served = runtime.served()
    if served is None:
        st.error(
            "No store is attached to this app. Start it with `grpc-overhead serve --store DIR` "
            "(intake + app) or `grpc-overhead app --store DIR` (existing data)."
        )
        st.stop()
    return served


def load(function: Callable[..., pd.DataFrame], *args: Any, **kwargs: Any) -> pd.DataFrame:
    """``function(store, *args, options=..., **kwargs)``, cached for ``TTL_S`` seconds.

    ``function`` must be a module-level analyzer function; arguments must be
    hashable or picklable (``CallFilters`` is). An analyzer error stops the
    page with its message instead of a traceback.
    """
    return _load(function.__module__, function.__qualname__, args, kwargs, TTL_S)


def load_slow(function: Callable[..., pd.DataFrame], *args: Any, **kwargs: Any) -> pd.DataFrame:
    """``load`` for answers that change slowly (filter choices), cached ``CHOICES_TTL_S``."""
    return _load(function.__module__, function.__qualname__, args, kwargs, CHOICES_TTL_S)


def _load(module: str, name: str, args: tuple, kwargs: dict, ttl: float) -> pd.DataFrame:
    served = source()  # a clear message, not an exception, when no store is attached
    cached = _cached_short if ttl == TTL_S else _cached_long
    if not served.live:
        cached = _cached_static
    elif ttl == TTL_S and served.changes is not None and _as_of_a_snapshot(args, kwargs):
        cached = _cached_snapshot
    try:
        return cached(module, name, args, tuple(sorted(kwargs.items())), runtime.generation())
    except StoreUnavailable as error:
        st.error(f"The store is unavailable: {error}. Check that it is running, then reload.")
    except QueryError as error:
        st.error(f"A query failed: {error}")
    except AnalyzerError as error:
        st.error(str(error))
    st.stop()


def _call(module: str, name: str, args: tuple, kwargs: tuple) -> pd.DataFrame:
    served = runtime.served()
    if served is None:
        raise StoreUnavailable("no store is attached to this app")
    function = importlib.import_module(module)
    for part in name.split("."):
        function = getattr(function, part)
    keywords = dict(kwargs)
    if OWNER in keywords:  # a user's query: killed once the session that asked is gone
        keywords["abandoned"] = _session_gone(keywords.pop(OWNER))
    return function(served.store, *args, options=served.options, **keywords)


#: ``load`` keyword naming the browser session a user's query runs for (``session_id``).
OWNER = "owner_session"


def session_id() -> str:
    """This browser session's id (part of a user query's cache key, see ``OWNER``)."""
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    context = get_script_run_ctx()
    return context.session_id if context is not None else ""


def _session_gone(owner: str) -> Callable[[], bool]:
    """True once the browser session ``owner`` disconnected (tab closed, page left)."""
    from streamlit.runtime import Runtime

    def gone() -> bool:
        return bool(owner) and Runtime.exists() and not Runtime.instance().is_active_session(owner)

    return gone


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=512)
def _cached_short(
    module: str, name: str, args: tuple, kwargs: tuple, generation: int
) -> pd.DataFrame:
    return _call(module, name, args, kwargs)


def _as_of_a_snapshot(args: tuple, kwargs: dict) -> bool:
    """Whether the answer is of the calls up to a snapshot (``refresh.snapshot_ns``): it
    changes only by writes the intake's counter does not see (``SNAPSHOT_TTL_S``)."""
    return any(
        isinstance(value, CallFilters) and value.as_of_ns is not None
        for value in (*args, *kwargs.values())
    )


@st.cache_data(ttl=SNAPSHOT_TTL_S, show_spinner=False, max_entries=512)
def _cached_snapshot(
    module: str, name: str, args: tuple, kwargs: tuple, generation: int
) -> pd.DataFrame:
    return _call(module, name, args, kwargs)


@st.cache_data(ttl=CHOICES_TTL_S, show_spinner=False, max_entries=64)
def _cached_long(
    module: str, name: str, args: tuple, kwargs: tuple, generation: int
) -> pd.DataFrame:
    return _call(module, name, args, kwargs)


@st.cache_data(ttl=STATIC_TTL_S, show_spinner=False, max_entries=512)
def _cached_static(
    module: str, name: str, args: tuple, kwargs: tuple, generation: int
) -> pd.DataFrame:
    return _call(module, name, args, kwargs)


def clear_caches() -> None:
    """Forget every cached answer (tests that reuse one store between cases)."""
    _cached_short.clear()
    _cached_snapshot.clear()
    _cached_long.clear()
    _cached_static.clear()


# -- the sidebar ------------------------------------------------------------------------------


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

    choices = load_slow(catalog.filter_choices, CallFilters(since=since, until=until))
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


# -- empty states --------------------------------------------------------------------------------

SEND_DATA = (
    "Send spans to the intake: run `grpc-overhead demo`, or run your services under "
    "`opentelemetry-instrument` with grpc-overhead-instrumentation installed: with no endpoint "
    "configured they send to localhost:4317 (OTLP/gRPC) or localhost:4318 (OTLP/HTTP: the Java "
    "agent, Node, .NET), which a plain `grpc-overhead serve` takes itself when no collector "
    "holds them. Otherwise point an OpenTelemetry Collector's `otlp` exporter (or any SDK "
    "exporter) at the intake addresses `grpc-overhead serve` prints "
    '(see the README\'s "Instrument your own service").'
)


def note_unavailable_phases(filters: CallFilters, mix: pd.DataFrame | None = None) -> None:
    """Say which phases the selected calls cannot have because of who traced them: gRPC's
    own tracing (A72), semconv message events and plain spans record fewer moments than
    our instrumentation. Silent when every call is ours on both sides. ``mix``: the
    calls per source (``sources.source_mix``'s columns) where the page has it already."""
    if mix is None:
        mix = load(sources.source_mix, filters)
    missing = sources.unavailable_phases(mix)
    for row in missing.itertuples(index=False):
        st.info(
            f"{row.calls:,} calls here are traced by {row.client_source} (client) and "
            f"{row.server_source} (server): their events do not mark the moments of "
            f"{row.unavailable_phases}, so those phases are empty for them (the call "
            "explorer says why, phase by phase)."
        )


def require_calls(filters: CallFilters) -> None:
    """Stop the page with a helpful empty state when no call matches ``filters``."""
    found = load(catalog.presence, filters)
    if int(found["stored"].iloc[0]) == 0:
        st.info(f"No calls stored yet. {SEND_DATA}")
        st.stop()
    if int(found["matching"].iloc[0]) == 0:
        st.info(
            "No calls match the filters. Widen the time range or set service, method, "
            "run or OpenTelemetry service back to (all) in the sidebar."
        )
        st.stop()


def one_side_caption(sides: pd.Series) -> None:
    """Say which calls were seen from one side only (one side attached, or a server half
    dropped by tail-aware sampling), and what that leaves out, instead of showing their
    missing phases as if they were zero. ``sides``: a row with ``insights.rows.sides``'
    counts (``server_only_calls``, ``client_only_calls``, ``client_only_sampled_calls``)."""
    server_only, client_only = int(sides["server_only_calls"]), int(sides["client_only_calls"])
    client_only_sampled = int(sides.get("client_only_sampled_calls", 0))
    parts = []
    if server_only:
        parts.append(
            f"**Server side only: {server_only:,} calls** (their callers are not instrumented): "
            "server phases and the count are measured; total and the network phases need the "
            "client's half and are left out for them."
        )
    if client_only - client_only_sampled:
        parts.append(
            f"**Client side only: {client_only - client_only_sampled:,} calls** (their server "
            "is not instrumented): client phases and total are measured; the server's phases "
            "and the one-way network phases are left out for them."
        )
    if client_only_sampled:
        parts.append(
            f"**Client side only by sampling: {client_only_sampled:,} calls** (slow for the "
            "client alone, their server dropped its half under tail-aware sampling): client "
            "phases and total are measured, counted on the server's instance; the server's "
            "phases and the one-way network phases are left out for them."
        )
    if parts:
        st.caption(" ".join(parts))

"""Analyzer calls, cached: the one way pages read the store.

Pages call analyzer functions through ``load`` (cached for ``TTL_S`` seconds, so a
refresh within the freshness target never runs the same query twice; longer where the
data cannot change or changes slowly) and get DataFrames; an analyzer error stops the
page with its message, never a traceback. Every cache key carries the registered
store's generation (``runtime.generation``), so answers for one store are never shown
for another.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pandas as pd
import streamlit as st

from grpc_overhead.analyzer.errors import AnalyzerError, QueryError, StoreUnavailable
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.app import runtime
from grpc_overhead.app.refresh import TTL_S

#: Inside ``serve``, an answer about the calls up to a snapshot (``refresh.snapshot_ns``)
#: changes only by writes the intake's counter does not see (a ClickHouse server's other
#: writers; on serve's own chDB store, retention dropping old minutes): reused this long,
#: so a page rerun by its timer with nothing new does not redo every query.
SNAPSHOT_TTL_S = 5.0
#: Filter choices change slowly; listing them is not worth redoing on every rerun.
CHOICES_TTL_S = 15.0
#: A store nobody writes to (``grpc-overhead app``) gives the same answers all day.
STATIC_TTL_S = 600.0


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


def load_slowly_changing(
    function: Callable[..., pd.DataFrame], *args: Any, **kwargs: Any
) -> pd.DataFrame:
    """``load`` for answers that change slowly (filter choices, the store's size on disk),
    cached ``CHOICES_TTL_S``: not worth redoing on every rerun."""
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

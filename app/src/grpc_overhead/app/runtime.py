"""The one store this process's app reads, registered before Streamlit starts.

A chDB data directory can be opened by one process only, so the app never
opens the store itself when it runs inside ``serve``/``demo``/``app``: the
owner registers its open store here and every Streamlit session reads that
same object (Streamlit runs the page scripts in threads of this process).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from grpc_overhead.analyzer.calls import CallsOptions
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store.base import Store, table_exists


@dataclass(frozen=True)
class Served:
    """What the app reads: the store, where its tables are, optional links out."""

    store: Store
    options: CallsOptions = field(default_factory=CallsOptions)
    #: Base URL of a Jaeger UI (``…/trace/<trace id>`` links in the call explorer).
    jaeger_url: str = ""
    #: True when this process also runs the intake (live data, auto-refresh useful).
    live: bool = False


_lock = threading.Lock()
_served: Served | None = None
_generation = 0


def register(served: Served) -> None:
    """Make ``served`` the app's data source for this process (replaces any previous one)."""
    global _served, _generation
    with _lock:
        _served = served
        _generation += 1


def unregister() -> None:
    global _served, _generation
    with _lock:
        _served = None
        _generation += 1


def generation() -> int:
    """Changes with every ``register``: part of every cache key, so answers cached for
    one store are never shown for another."""
    with _lock:
        return _generation


def served() -> Served | None:
    """The registered source, or None when nothing was registered (the app says how to fix it)."""
    with _lock:
        return _served


def prepare(store: Store, options: CallsOptions) -> str:
    """Make ``store`` ready for the pages, as ``report`` does: '' when ready, else why not.

    The calls' tables and views (idempotent) and settled minutes, where this
    process may write them; a store read through ``serve`` is prepared by serve.
    """
    if not table_exists(store, options.traces_table, options.database):
        return f"{store.description}: no {options.traces_table} table"
    if store.backend.writable:
        create_call_tables(store, options)
    if store.backend.owns_data:  # no other process settles it
        settle(store, options)
    return ""

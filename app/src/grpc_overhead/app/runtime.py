"""The one store this process's app reads, registered before Streamlit starts.

A chDB data directory can be opened by one process only, so the app never
opens the store itself when it runs inside ``serve``/``demo``/``app``: the
owner registers its open store here and every Streamlit session reads that
same object (Streamlit runs the page scripts in threads of this process).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.app.oidc import OidcLogin


@dataclass(frozen=True)
class Served:
    """What the app reads: the store, where its tables are, optional links out."""

    store: Store
    options: CallsOptions = field(default_factory=CallsOptions)
    #: Base URL of a Jaeger UI (``…/trace/<trace id>`` links in the call explorer).
    jaeger_url: str = ""
    #: True when the data may change while the app runs: this process runs the intake
    #: (``serve``), or ``app`` and the ``streamlit run`` entry read a store another process
    #: writes (through serve's HTTP interface, a ClickHouse server). Auto-refresh is on by default
    #: and answers are cached seconds, not ``cached.STATIC_TTL_S``.
    live: bool = False
    #: A counter that moves whenever the intake has stored a batch (None: nobody says):
    #: auto-refresh reruns a page on it at once instead of on its timer alone.
    changes: Callable[[], int] | None = None
    #: The team's shared password the app asks for before any page (None: no login).
    password: str | None = field(default=None, repr=False)
    #: The identity provider's login instead (``oidc``; None: none).
    oidc: OidcLogin | None = None


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


#: Up to this many call halves not rolled up yet, the app rolls them up before it
#: serves (a few seconds at most: pages then read settled minutes from the start, as
#: they always did); beyond, beside it (``BackgroundSettle``).
FOREGROUND_SETTLE_HALVES = 100_000


class BackgroundSettle:
    """Settled minutes rolled up beside the app, not before it.

    A store nobody settled (imported, generated, or written by a serve that never
    ran long enough) takes a minute per million calls to roll up on two cores; the
    app answers meanwhile, its pages computing the unsettled minutes raw (the same
    values, more slowly) and getting faster once the roll-up lands. ``stop`` ends
    it between rounds, so quitting the app does not wait for a whole store.
    """

    def __init__(
        self, store: Store, options: CallsOptions, report: Callable[[str], None] | None = None
    ) -> None:
        self.store, self.options, self.report = store, options, report
        self.stop_event = threading.Event()
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="settle", daemon=True)

    def start(self) -> BackgroundSettle:
        if self.store.backend.owns_data:  # no other process settles it
            self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        # Its own session: on the store's connection, every page query would queue
        # behind each round of the roll-up (the first Overview then waited for all of it).
        session = self.store.session()
        try:
            minutes = settle(session, self.options, stop=self.stop_event)
        except Exception as error:  # reported by the caller; pages read raw meanwhile
            self.error = error
            return
        finally:
            self.store.close_session(session)
        if self.report is not None and not self.stop_event.is_set():
            self.report(
                f"settled minutes rolled up ({minutes} new) in {time.monotonic() - started:.1f} s"
            )

    def stop(self, timeout_s: float = 300.0) -> None:
        """Stop between rounds and wait for the round in progress."""
        self.stop_event.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

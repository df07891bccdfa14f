"""Auto-refresh: a page reruns as soon as the intake has stored something new, and on a
timer otherwise; and the moment a page run reads the store as of.

Inside ``serve`` the app shares its process with the intake, which counts the batches it
has stored (``Served.changes``). The ticker reads that counter every ``POLL_S`` (a lock
and an integer: nothing is asked of the store) and reruns the page once the page has
been still for ``MIN_IDLE_S``. On a store serve owns (chDB: its intake is the only writer
of calls; settling and retention change no answer worth a rerun) nothing else reruns a
page showing a fixed time range: a tab left open with nothing arriving costs nothing
(it cost 0.7 of a core on the Overview, rerun every 1.5 s). Relative ranges ("last 15
minutes") move on, and a ClickHouse server has other writers (the collector's clickhouse
exporter): there the timer reruns the page every ``REFRESH_S`` as well, as before.
Before, a call stored just after a rerun waited up to a whole tick, then for the
snapshot's next whole second (it was rounded down to ``TTL_S`` so reruns shared cached
answers): about 1 s of the freshness median that bought nothing.

The snapshot is now the store's moment taken after the latest batch, kept while the
counter stays put: reruns with nothing new still share cached answers, and the first
rerun after a batch includes it. A snapshot kept for ever would hold a one-sided call
back for ever (it is shown once its half is ``hold_back_ns`` older than the snapshot,
``options.SHOWN_FILTER``): once that grace has passed since the snapshot, pages read as
of the snapshot plus the grace instead (no half arrived in between, so they see the same
halves, every one of them decided), and the ticker reruns the page then once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import streamlit as st

from grpc_overhead.analyzer import snapshot
from grpc_overhead.analyzer.errors import AnalyzerError
from grpc_overhead.analyzer.options import hold_back_ns
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.app import runtime

#: Seconds an analyzer answer is reused (and, without a change counter, the snapshot's
#: step). A call shown late by this is one the page asked about before it was stored.
TTL_S = 1.0
#: Seconds between reruns when nothing new was stored (or nobody says so).
REFRESH_S = 1.0
#: Seconds between looks at the intake's counter: the longest a stored call waits for
#: its rerun on a page that has been still. Each look is a run of the ticker fragment:
#: ~7 ms of CPU since the app stopped Streamlit's full garbage collection after every
#: script run (``app_server._configure``), ~65 ms before (0.3 of a core for a tab left open
#: with nothing arriving, 0.1 after). Looking every 0.2 s did not make calls appear
#: sooner: a call's halves from two processes land in two batches, and the sooner the
#: first is seen, the more often its rerun (which cannot show the call yet) is still
#: going when the second lands (median 2.5 -> 3.3 s on the direct path, 2.7 -> 2.5
#: through the collector, side by side, 6 probes each).
POLL_S = 0.5
#: Seconds a page stays still after its run before auto-refresh reruns it: a page whose
#: run takes longer than ``REFRESH_S`` (Phases under load: 12-17 s) would otherwise be
#: rerun the moment it finished, for ever, and never be readable or "loaded".
MIN_IDLE_S = 0.5

_RUN_MARKS = "_page_run_marks"


@contextlib.contextmanager
def page_run() -> Iterator[None]:
    """Mark a whole page run's start and end (``main.py`` wraps the navigation in it), so
    auto-refresh knows whether a run is going on and how long the page has been still.

    The marks are a plain dict kept in the session state: after ``st.stop()`` (every empty
    state) any ``st.`` call raises the stop again, so writing ``st.session_state`` in the
    ``finally`` never happened, the end of such a run was never marked, and a page opened
    before the first spans arrived never refreshed to show them."""
    marks = page_run_marks()
    marks["started"] = time.monotonic()
    try:
        yield
    finally:  # st.stop() and reruns end a run too; no st. call here (see above)
        marks["ended"] = time.monotonic()


def page_run_marks() -> dict[str, float | int | None]:
    """This session's ``{"started": ..., "ended": ..., "changes": ..., "grace_ends": ...}``
    (monotonic seconds; the intake's counter the page run's snapshot includes, None when it
    may miss some; the Unix ns at which a call the snapshot holds back is decided, None
    when none can be)."""
    return st.session_state.setdefault(_RUN_MARKS, {})


def refresh_due(
    started: float | None,
    ended: float | None,
    now: float,
    *,
    changed: bool = False,
    timer: bool = True,
) -> bool:
    """Whether a tick of the auto-refresh ticker at ``now`` reruns the page: only after a
    page run ended (never inside one: the ticker runs as part of every page run too) and
    ``MIN_IDLE_S`` after it; then at once when something new was stored (``changed``),
    else, with ``timer``, once ``REFRESH_S`` has passed since the run started. Ticks that
    fell during a long run are queued by Streamlit and arrive just after it ends: they wait."""
    if started is None or ended is None or ended < started:
        return False
    if now - ended < MIN_IDLE_S:
        return False
    return changed or (timer and now - started >= REFRESH_S)


def snapshot_missed(marks: dict[str, float | int | None], changes: int | None, now_ns: int) -> bool:
    """Whether the page run's snapshot (``marks``) misses what a rerun would show: a batch
    the intake has stored since (``changes``, its counter now; None without one), or a
    one-sided call it held back that is decided now (``grace_ends``)."""
    if changes is not None and changes != marks.get("changes"):
        return True
    grace_ends = marks.get("grace_ends")
    return grace_ends is not None and now_ns >= grace_ends


def counter_sees_every_write(served: runtime.Served) -> bool:
    """Whether ``Served.changes`` moves with every write a page would show: the intake's
    counter on a store this process owns (see the module)."""
    return served.changes is not None and served.store.backend.owns_data


def auto_refresh(served: runtime.Served, *, moving_range: bool) -> None:
    """The sidebar's ticker: a fragment that reruns the whole page when it is due.
    ``moving_range``: the page shows a range relative to now, which moves on by itself."""
    changes = served.changes
    timer = moving_range or not counter_sees_every_write(served)

    @st.fragment(run_every=POLL_S if changes is not None else REFRESH_S)
    def ticker() -> None:
        marks = page_run_marks()
        counted = changes() if changes is not None else None
        changed = snapshot_missed(marks, counted, time.time_ns())
        started, ended = marks.get("started"), marks.get("ended")
        if refresh_due(started, ended, time.monotonic(), changed=changed, timer=timer):
            st.rerun(scope="app")

    with st.sidebar:
        ticker()


_snapshots_lock = threading.Lock()
#: Per registered store (``runtime.generation``): the counter and the snapshot taken after it.
_snapshots: dict[int, tuple[int, int]] = {}


def snapshot_ns(served: runtime.Served) -> int:
    """The moment every query of this page run reads arrivals up to (``CallFilters.as_of_ns``)
    while spans may arrive: the store's snapshot (``analyzer.snapshot``: now, or before an
    INSERT still committing). With the intake's counter on a store it alone writes, the one
    taken after its latest batch (see the module); elsewhere, rounded down to ``TTL_S`` so
    reruns within ``TTL_S`` share cached answers (and, with a counter, never before the one
    taken after its latest batch)."""
    marks = page_run_marks()
    marks["changes"], marks["grace_ends"] = None, None
    step_ns = int(max(TTL_S, 1) * 1_000_000_000)
    if served.changes is None:
        return _taken(served.store)[0] // step_ns * step_ns
    changes, generation = served.changes(), runtime.generation()
    with _snapshots_lock:
        known = _snapshots.get(generation)
    if not counter_sees_every_write(served):
        # A server's other writers may always be inserting, unseen by the counter: their
        # rows wait for the timer (as before), not for a rerun at every tick.
        marks["changes"] = changes
        moment = _taken(served.store)[0]
        if known is not None and known[0] == changes:
            return max(known[1], moment // step_ns * step_ns)
        with _snapshots_lock:
            _snapshots[generation] = (changes, moment)
        return moment
    if known is not None and known[0] == changes:
        marks["changes"] = changes
        return _past_the_grace(known[1], marks)
    moment, complete = _taken(served.store)
    if not complete:  # a batch still committing: the ticker reruns until it is in
        return moment
    with _snapshots_lock:  # nothing was committing: every batch counted so far is in it
        _snapshots[generation] = (changes, moment)
    marks["changes"] = changes
    return _past_the_grace(moment, marks)


def _past_the_grace(moment: int, marks: dict[str, float | int | None]) -> int:
    """``moment`` (a snapshot with nothing stored after it), or ``moment`` plus the hold-back
    grace once that has passed: the same halves, every one-sided call among them decided.
    The clock is this process's: a store serve alone writes is its embedded engine, in this
    process."""
    decided = moment + hold_back_ns()
    if time.time_ns() >= decided:
        return decided
    marks["grace_ends"] = decided
    return moment


def _taken(store: Store) -> tuple[int, bool]:
    """The store's snapshot, and whether it is "now" (no INSERT was still committing)."""
    try:
        taken = snapshot.read(store)
    except AnalyzerError:  # the page's own queries will say what is wrong
        return time.time_ns(), False
    return taken.moment_ns, taken.moment_ns == taken.now_ns

"""Auto-refresh lets every page settle: a rerun only after the page has been still.

The rule (``refresh.refresh_due``) against Streamlit's behaviour: a ``run_every``
fragment's timer keeps ticking while a page runs; the ticks are queued and run
as soon as the page's run ends. The old ticker reran the app on such a tick,
so a page whose run took longer than the period (Phases under load: 12-17 s)
was rerun the moment it finished and never stood still for a reader or a
browser waiting for it to load.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from grpc_overhead.app import refresh

pytestmark = pytest.mark.unit

START = 1000.0


def test_never_inside_a_page_run():
    # The ticker also runs as part of every page run: that must not rerun the page.
    assert not refresh.refresh_due(START, None, START + 60)
    assert not refresh.refresh_due(START + 10, START + 5, START + 60)


def test_a_tick_queued_during_a_long_run_waits_for_the_next_one():
    ended = START + 14.0  # a 14 s run: four ticks fell inside it, one arrives at its end
    assert not refresh.refresh_due(START, ended, ended + 0.01)
    assert not refresh.refresh_due(START, ended, ended + refresh.MIN_IDLE_S - 0.01)
    assert refresh.refresh_due(START, ended, ended + refresh.MIN_IDLE_S)


def test_a_quick_page_still_refreshes_every_period():
    ended = START + 0.4
    assert refresh.refresh_due(START, ended, START + refresh.REFRESH_S)
    assert refresh.MIN_IDLE_S < refresh.REFRESH_S


def test_before_any_run_ended_nothing_is_due():
    assert not refresh.refresh_due(None, None, START)


def test_a_stored_batch_reruns_a_still_page_without_waiting_for_the_timer():
    ended = START + 0.1
    soon = ended + refresh.MIN_IDLE_S
    assert soon - START < refresh.REFRESH_S  # the timer alone would wait
    assert not refresh.refresh_due(START, ended, soon)
    assert refresh.refresh_due(START, ended, soon, changed=True)
    assert refresh.POLL_S < refresh.REFRESH_S  # the counter is looked at more often


def test_a_stored_batch_never_interrupts_a_run_or_a_page_just_drawn():
    assert not refresh.refresh_due(START, None, START + 60, changed=True)
    ended = START + 14.0
    assert not refresh.refresh_due(START, ended, ended + refresh.MIN_IDLE_S - 0.01, changed=True)


def test_without_the_timer_only_a_stored_batch_reruns_the_page():
    ended = START + 0.4
    assert not refresh.refresh_due(START, ended, START + 60, timer=False)
    assert refresh.refresh_due(START, ended, START + 60, changed=True, timer=False)


def test_a_batch_stored_since_the_snapshot_is_missed():
    marks = {"changes": 3, "grace_ends": None}
    assert not refresh.snapshot_missed(marks, 3, 0)
    assert refresh.snapshot_missed(marks, 4, 0)
    assert refresh.snapshot_missed({"changes": None}, 3, 0)  # it may have missed some
    assert not refresh.snapshot_missed({}, None, 0)  # no counter: the timer's job


def test_a_call_held_back_by_the_snapshot_is_missed_once_its_grace_ends():
    """Nothing arrives after a call's only half: the page's snapshot, kept while the counter
    stays put, would hold it back for ever; the ticker reruns the page once it is decided."""
    marks = {"changes": 3, "grace_ends": 10_000}
    assert not refresh.snapshot_missed(marks, 3, 9_999)
    assert refresh.snapshot_missed(marks, 3, 10_000)


def test_a_look_of_the_ticker_does_not_collect_the_whole_heap():
    """Streamlit collects every generation after each script run, the ticker's fragment
    runs too: in serve's process (the intake's and the engine's objects) that was ~65 ms
    with the GIL held at every look, stalling the intake beside it. The app turns it off
    (Python's own thresholds still collect). In a process of its own: the options are
    global to the interpreter."""
    probe = (
        "from streamlit import config\n"
        "from grpc_overhead.app import app_server\n"
        "app_server._configure('127.0.0.1', 8501)\n"
        "print(config.get_option('runner.postScriptGC'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "False"

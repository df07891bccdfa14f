"""The experiment's wait for a round's spans, on a real chDB store that calls reach slowly.

An intake catching up on a busy machine stores a round's last calls after the others: the
wait must last while the count grows, and end with what is there once it stops growing.
"""

from __future__ import annotations

import threading
import time

import pytest

from grpc_overhead.analyzer.calls import CallsOptions, create_calls
from grpc_overhead.analyzer.schema import create_schema
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.cli.experiment_run import RoundOutcome, wait_rounds_stored, wait_stored

pytestmark = pytest.mark.unit

RUN = "wait-run"


def _store_calls(store, first: int, count: int, *, server: bool = True) -> None:
    """``count`` calls of the run with their client half (and server half if ``server``)."""
    server_start = "1700000000000000500" if server else "0"
    rows = ", ".join(
        f"('trace-{n}', 'client-{n}', '{RUN}', 1700000000000000000, {server_start})"
        for n in range(first, first + count)
    )
    store.command(
        "INSERT INTO grpc_calls (TraceId, ClientSpanId, run_id, client_start_ns, "
        f"server_start_ns) VALUES {rows}"
    )


def _arriving(store, batches: int, size: int, pause_s: float) -> threading.Thread:
    def arrive() -> None:
        for batch in range(batches):
            time.sleep(pause_s)
            _store_calls(store, batch * size, size)

    thread = threading.Thread(target=arrive, daemon=True)
    thread.start()
    return thread


def test_the_wait_lasts_while_calls_still_arrive(tmp_path) -> None:
    """Six batches 0.4 s apart take 2.4 s, four times the quiet window: a fixed deadline
    of 0.6 s would have returned the first batch or two."""
    with open_store(tmp_path / "store") as store:
        create_schema(store)
        options = CallsOptions()
        create_calls(store, options)
        arriving = _arriving(store, batches=6, size=10, pause_s=0.4)
        stored = wait_stored(store, RUN, 60, 60, options, quiet_s=1.5)
        arriving.join()
    assert stored == 60


def test_a_count_that_stopped_growing_ends_the_wait_with_what_is_there(tmp_path) -> None:
    """20 calls expected, 12 came, and of those 4 without their server half: the wait
    ends (the quiet window) and says 12, the calls the store has."""
    with open_store(tmp_path / "store") as store:
        create_schema(store)
        options = CallsOptions()
        create_calls(store, options)
        _store_calls(store, 0, 8)
        _store_calls(store, 8, 4, server=False)
        assert wait_stored(store, RUN, 20, 20, options, quiet_s=0.5) == 12
        # Every client half there but not every server half: the wait still ends.
        _store_calls(store, 12, 8, server=False)
        assert wait_stored(store, RUN, 20, 20, options, quiet_s=0.5) == 20


def test_the_longest_wait_ends_a_trickle(tmp_path) -> None:
    """A count that keeps growing forever (one call every 0.2 s) still ends the wait at
    ``longest_s``, short of the calls asked for."""
    with open_store(tmp_path / "store") as store:
        create_schema(store)
        options = CallsOptions()
        create_calls(store, options)
        arriving = _arriving(store, batches=12, size=1, pause_s=0.2)
        stored = wait_stored(store, RUN, 1000, 1000, options, quiet_s=2.0, longest_s=1.0)
        arriving.join()
    assert 0 <= stored < 12


def test_calls_the_load_could_not_trace_are_not_waited_for(tmp_path) -> None:
    """The load generator said 3 of its 12 calls' spans never left it: the wait ends as
    soon as the other 9 are stored. (Three more arriving 2 s later would be counted by a
    wait for all 12, which returns only after its quiet window.)"""
    spans = {"exported": 9, "failed": 2, "unsent": 1}
    summary = {"calls": 12, "errors": 0, "rps": 100.0, "spans": spans}
    outcome = RoundOutcome(0, summary, 0, 0)
    assert outcome.untraced_calls == 3 and outcome.to_json()["untraced_calls"] == 3
    with open_store(tmp_path / "store") as store:
        create_schema(store)
        options = CallsOptions()
        create_calls(store, options)
        _store_calls(store, 0, 9)
        late = threading.Timer(2.0, _store_calls, (store, 9, 3))
        late.start()
        try:
            assert wait_rounds_stored(store, RUN, [outcome], options) == 9
        finally:
            late.join()

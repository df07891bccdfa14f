"""A snapshot stops before the span inserts still running (``store.in_flight``): a report
read while a batch commits counts it in none of its tables, and counts it once it is in.

A real chDB store and serve's real HTTP interface on it; the insert is held open by the
test (``storing_spans`` around it), which is what the intake does around each batch.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.error
import urllib.request

import pytest

from grpc_overhead.analyzer import snapshot
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.report import build_report, to_json
from grpc_overhead.analyzer.rollup import store_clock_ns
from grpc_overhead.analyzer.store.base import SNAPSHOT_PATH, Store
from tests.analyzer.conftest import HTTP_PASSWORD, HTTP_USER
from tests.analyzer.seed import (  # noqa: F401
    MS,
    Truth,
    insert_spans,
    module_store_fixture,
    store_fixture,
    synthetic_call,
)

pytestmark = pytest.mark.e2e


def _calls(store: Store, as_of_ns: int) -> tuple[int, int, int]:
    """A report's header, its status codes and its sides, as of a snapshot."""
    body = to_json(build_report(store, CallFilters(as_of_ns=as_of_ns)))
    return (
        body["calls"],
        sum(code["calls"] for code in body["status_codes"]),
        body["sides"]["two_sided"],
    )


@pytest.mark.parametrize("through", ["embedded", "http"])
def test_a_snapshot_taken_while_spans_are_stored_leaves_them_out(store, reader, through):
    now = store_clock_ns(store)
    insert_spans(store, synthetic_call(Truth(start=now - 20 * MS)))
    source = store if through == "embedded" else reader
    idle = snapshot.read(source)
    assert idle.moment_ns == idle.now_ns  # nothing being stored: now
    assert _calls(store, idle.moment_ns) == (1, 1, 1)

    with store.storing_spans():
        # Stored, stamped and visible, but the statement has not returned yet (as with an
        # INSERT still committing): a snapshot now must not count it.
        insert_spans(store, synthetic_call(Truth(start=now - 10 * MS)))
        during = snapshot.read(source)
        assert during.moment_ns < during.now_ns
        assert _calls(store, during.moment_ns) == (1, 1, 1)

    after = snapshot.read(source)
    assert after.moment_ns == after.now_ns >= during.now_ns
    assert _calls(store, after.moment_ns) == (2, 2, 2)


def test_the_oldest_insert_still_running_bounds_the_snapshot(store):
    """Two batches at once (the intake's workers): the snapshot waits for the older one,
    even when the newer returned first."""
    first_in, release_first, first_done = threading.Event(), threading.Event(), threading.Event()

    def older() -> None:
        with store.storing_spans():
            first_in.set()
            release_first.wait(30)
        first_done.set()

    worker = threading.Thread(target=older)
    worker.start()
    try:
        assert first_in.wait(30)
        bound = snapshot.read(store).moment_ns
        with store.storing_spans():
            pass
        assert snapshot.read(store).moment_ns == bound  # still the older one's start
    finally:
        release_first.set()
        worker.join(30)
    assert first_done.is_set()
    taken = snapshot.read(store)
    assert taken.moment_ns == taken.now_ns > bound


def test_the_snapshot_handle_asks_for_the_interface_credentials(store, reader):
    """serve's own handle answers only whom the interface answers, in JSON."""
    url = reader.url + SNAPSHOT_PATH
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url, data=b""), timeout=30)
    assert refused.value.code in (401, 403)
    assert b"REQUIRED_PASSWORD" in refused.value.read()
    token = base64.b64encode(f"{HTTP_USER}:{HTTP_PASSWORD}".encode()).decode()
    asked = urllib.request.Request(url, data=b"", headers={"Authorization": f"Basic {token}"})
    with urllib.request.urlopen(asked, timeout=30) as answer:
        assert answer.headers["Content-Type"].startswith("application/json")
        found = json.loads(answer.read())
    assert set(found) == {"moment_ns", "now_ns"}
    assert found["moment_ns"] == found["now_ns"] > 0

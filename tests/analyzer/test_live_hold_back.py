"""Calls, never halves (issue 21): a half whose peer may still arrive is held back until it
does or the grace period passes, then counts once, as one-sided; ``report`` says which
half is missing (``sides``) and every one of its tables follows its filters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grpc_overhead.analyzer.insights import overview
from grpc_overhead.analyzer.insights.clock_offsets import window_calls
from grpc_overhead.analyzer.options import HOLD_BACK_NS, CallFilters
from grpc_overhead.analyzer.report import build_report, render_table, to_json
from grpc_overhead.analyzer.rollup import settle, store_clock_ns
from tests.analyzer.seed import (  # noqa: F401
    BASE_NS,
    MS,
    Truth,
    insert_spans,
    module_store_fixture,
    store_fixture,
    synthetic_call,
)

pytestmark = pytest.mark.e2e


def _count(store, sql: str) -> int:
    return int(store.query(sql)["n"].iloc[0])


def test_a_half_waits_for_its_peer_then_counts_once(store):
    """Spans of now (a live export): the server half alone is not a call yet; after the
    grace period it is a server-only call; when its client half comes, one two-sided call."""
    now = store_clock_ns(store)
    lone_client, lone_server = synthetic_call(Truth(start=now - 50 * MS))
    insert_spans(store, [*synthetic_call(Truth(start=now - 40 * MS)), lone_server])
    arrived = store_clock_ns(store)

    at_arrival = to_json(build_report(store, CallFilters(as_of_ns=arrived)))
    assert at_arrival["calls"] == 1  # the complete call only
    assert at_arrival["sides"] == {
        "two_sided": 1,
        "server_only": 0,
        "client_only": 0,
        "client_only_sampled": 0,
        "missing": None,
    }
    assert sum(code["calls"] for code in at_arrival["status_codes"]) == 1
    # Nor does the view users' SQL reads show the half.
    assert _count(store, "SELECT count() AS n FROM grpc_call_phases") == 1

    # The same store read as it stands once the grace period has passed: one-sided, once.
    later = to_json(build_report(store, CallFilters(as_of_ns=arrived + HOLD_BACK_NS + 1)))
    assert later["calls"] == 2
    assert later["sides"] == {
        "two_sided": 1,
        "server_only": 1,
        "client_only": 0,
        "client_only_sampled": 0,
        "missing": "client",
    }
    assert sum(code["calls"] for code in later["status_codes"]) == 2

    # The peer arrives after all: still one call, now with both halves.
    insert_spans(store, [lone_client])
    done = to_json(build_report(store, CallFilters(as_of_ns=store_clock_ns(store))))
    assert done["calls"] == 2
    assert done["sides"]["two_sided"] == 2
    assert _count(store, "SELECT count() AS n FROM grpc_call_phases") == 2


def test_a_snapshot_does_not_see_halves_that_arrived_after_it(store):
    """A report's tables read one snapshot: calls stored after it are not in any of them."""
    now = store_clock_ns(store)
    insert_spans(store, synthetic_call(Truth(start=now)))
    snapshot = store_clock_ns(store)
    insert_spans(store, synthetic_call(Truth(start=now + MS)))
    body = to_json(build_report(store, CallFilters(as_of_ns=snapshot)))
    assert body["calls"] == 1
    assert sum(code["calls"] for code in body["status_codes"]) == 1
    assert body["methods"][0]["sides"]["two_sided"] == 1
    assert sum(offset["calls"] for offset in body["clock_offsets"]) == 1


def seed_sides(store) -> None:
    """Stored history (long ended: nothing held back): Predict has 2 two-sided calls, 3 from
    an uninstrumented client (server half only) and 1 to an uninstrumented server."""
    spans = []
    for index in range(6):
        client, server = synthetic_call(replace(Truth(), start=BASE_NS + index * 10 * MS))
        spans += [client, server] if index < 2 else [server] if index < 5 else [client]
    insert_spans(store, spans)


def test_report_says_which_half_is_missing(store):
    seed_sides(store)
    report = build_report(store)
    body = to_json(report)
    [method] = body["methods"]
    expected = {
        "two_sided": 2,
        "server_only": 3,
        "client_only": 1,
        "client_only_sampled": 0,
        "missing": "client and server",
    }
    assert method["sides"] == expected
    assert body["sides"] == expected
    assert body["calls"] == 6 == sum(code["calls"] for code in body["status_codes"])
    table = render_table(report, width=200)
    assert "3 server side only (client half missing" in table
    assert "1 client side only (server half missing" in table


def test_server_only_calls_say_the_client_half_is_missing(store):
    """An uninstrumented client (ghz): every call has its server half only."""
    insert_spans(store, [synthetic_call(Truth(start=BASE_NS + i * MS))[1] for i in range(4)])
    body = to_json(build_report(store))
    assert body["sides"] == {
        "two_sided": 0,
        "server_only": 4,
        "client_only": 0,
        "client_only_sampled": 0,
        "missing": "client",
    }
    assert "client half missing" in render_table(build_report(store), width=200)


def test_clock_offsets_follow_the_run_filter(store):
    """Two runs across two hosts: the offsets table under --run counts that run's calls
    (settled minutes included: the offset rollup is per host pair, not per run)."""
    spans = []
    for index in range(8):
        truth = Truth(start=BASE_NS + index * MS)
        run_id = "run-a" if index < 3 else "run-b"
        spans += synthetic_call(truth, client_host="host-a", server_host="host-b", run_id=run_id)
    insert_spans(store, spans)
    settle(store)
    for run_id, calls in (("run-a", 3), ("run-b", 5)):
        body = to_json(build_report(store, CallFilters(run_id=run_id)))
        assert body["calls"] == calls
        assert [
            (o["client_host"], o["server_host"], o["calls"]) for o in body["clock_offsets"]
        ] == [("host-a", "host-b", calls)]
    everything = to_json(build_report(store))
    assert [o["calls"] for o in everything["clock_offsets"]] == [8]


def test_one_sided_calls_make_no_clock_pair(store):
    """The Clock offsets page's pairs are of two clocks: a call with one half has no pair
    (no pseudo pair ``host-a -> service:``)."""
    seed_sides(store)
    counts = window_calls(store)
    assert set(zip(counts["client_host"], counts["server_host"], strict=True)) == {
        ("host-a", "host-a")
    }
    assert int(counts["calls"].sum()) == 2


def test_a_client_half_whose_server_dropped_its_half_is_shown_at_once(store):
    """Tail-aware sampling: a server that dropped its half names itself in its trailer, so
    the client half kept alone has no peer to wait for; a client half that says nothing
    still waits out the grace period."""
    now = store_clock_ns(store)
    alone, _ = synthetic_call(Truth(start=now - 50 * MS))
    alone.attributes["grpc_overhead.sampling.server_instance"] = "s-9"
    waiting, _ = synthetic_call(Truth(start=now - 45 * MS))
    insert_spans(store, [alone, waiting])
    arrived = store_clock_ns(store)
    at_arrival = to_json(build_report(store, CallFilters(as_of_ns=arrived)))
    assert at_arrival["calls"] == 1 and at_arrival["sides"]["client_only"] == 1
    assert at_arrival["sides"]["client_only_sampled"] == 1
    assert _count(store, "SELECT count() AS n FROM grpc_call_phases") == 1
    later_report = build_report(store, CallFilters(as_of_ns=arrived + HOLD_BACK_NS + 1))
    later = to_json(later_report)
    assert later["calls"] == 2 and later["sides"]["client_only"] == 2
    # The report tells the two apart: one server is not instrumented, the other dropped
    # its half by design.
    assert later["sides"]["client_only_sampled"] == 1
    table = render_table(later_report, width=200)
    assert "1 client side only (server half missing: the server is not instrumented" in table
    assert "1 client side only by sampling (the server dropped its half" in table
    # So do the pages (the Overview's summary and every page's sides row).
    frame = overview.summary(overview.overview(store, CallFilters(as_of_ns=arrived)))
    assert int(frame["client_only_sampled_calls"].iloc[0]) == 1
    assert int(frame["client_only_calls"].iloc[0]) == 1


def test_a_server_half_stored_after_the_snapshot_changes_no_count(store):
    """A report's queries run one after another while halves keep arriving: a server half
    stored after the snapshot (visible to the later queries, not to the earlier ones) must
    not make its call count in some of them. It once did: the server instance it brings
    passed for a tail-sampled client half's (a live report: 426 calls in its header, 431 in
    its status codes)."""
    now = store_clock_ns(store)
    client_half, server_half = synthetic_call(Truth(start=now - 30 * MS))
    insert_spans(store, [*synthetic_call(Truth(start=now - 40 * MS)), client_half])
    snapshot = store_clock_ns(store)
    before = to_json(build_report(store, CallFilters(as_of_ns=snapshot)))
    insert_spans(store, [server_half])  # arrives after the snapshot, before later queries
    after = to_json(build_report(store, CallFilters(as_of_ns=snapshot)))
    for body in (before, after):
        assert body["calls"] == 1
        assert sum(code["calls"] for code in body["status_codes"]) == 1
        assert body["sides"]["two_sided"] == 1 and body["sides"]["client_only"] == 0
    frame = overview.summary(overview.overview(store, CallFilters(as_of_ns=snapshot)))
    assert int(frame["calls"].iloc[0]) == 1
    # Once the snapshot moves past it, the call counts, with both halves.
    done = to_json(build_report(store, CallFilters(as_of_ns=store_clock_ns(store))))
    assert done["calls"] == 2 and done["sides"]["two_sided"] == 2

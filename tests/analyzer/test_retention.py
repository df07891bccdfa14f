"""Retention and the disk budget on a real chDB store (``analyzer.retention``).

Calls are placed relative to *now* (TTLs compare with the clock): two hours old, and one
minute old. A 30-minute retention must drop the old spans and calls while their settled
rollups (kept a day) still answer for their minutes, and every page must still answer; a
budget must drop the oldest data first and leave the newest whole.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest

from grpc_overhead.analyzer import call_rollup, rollup
from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights import explorer, instances, overview, payload, phases
from grpc_overhead.analyzer.insights import rows as insight_rows
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.retention import (
    Retention,
    apply_retention,
    keep_within_budget,
    parse_duration,
    store_bytes,
    timed_tables,
)
from tests.analyzer import seed
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e

MINUTE_NS = 60 * 10**9
OPTIONS = CallsOptions()


def _calls(store, count: int, started_ns: int, spread_ns: int = MINUTE_NS, **kwargs) -> None:
    spans = []
    for index in range(count):
        truth = replace(seed.Truth(), start=started_ns + index * (spread_ns // count))
        spans += seed.synthetic_call(truth, **kwargs)
    seed.insert_spans(store, spans)


def _count(store, sql: str) -> int:
    return int(store.query(sql)["n"].iloc[0])


@pytest.mark.unit
@pytest.mark.parametrize(
    "text, seconds",
    [
        ("30m", 1800),
        ("12h", 43_200),
        ("7d", 604_800),
        ("2w", 1_209_600),
        ("90s", 90),
        (" 1.5h ", 5400),
    ],
)
def test_durations_read(text, seconds):
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.unit
@pytest.mark.parametrize("text", ["", "7", "7x", "-5m", "m", "5 years", "1e12w", "99999999w"])
def test_a_bad_duration_says_how_to_write_one(text):
    with pytest.raises(BadInput, match=r"duration|longer than"):
        parse_duration(text)


@pytest.mark.unit
@pytest.mark.parametrize(
    "asked, said",
    [
        ({"raw": timedelta(minutes=1)}, "too short"),
        ({"raw": timedelta(days=7), "rollups": timedelta(days=1)}, "shorter than --retention"),
        ({"max_bytes": 0}, "above 0"),
    ],
)
def test_a_retention_that_cannot_work_says_why(asked, said):
    with pytest.raises(BadInput, match=said):
        Retention(**asked)


@pytest.fixture(name="expiring_store")
def expiring_store_fixture(store):
    """The module's store; the TTLs a test gives its tables are taken off after it."""
    yield store
    engines = store.query("SELECT name, engine_full FROM system.tables WHERE database = 'default'")
    for name, engine in zip(engines["name"], engines["engine_full"], strict=True):
        if " TTL " in engine and name in {t.name for t in timed_tables(OPTIONS)}:
            store.command(f"ALTER TABLE {OPTIONS.qualified(name)} REMOVE TTL")


def test_expired_calls_go_their_rollups_stay_and_every_page_answers(expiring_store):
    store = expiring_store
    now = time.time_ns()
    old_start = (now - 2 * 60 * MINUTE_NS) // MINUTE_NS * MINUTE_NS
    _calls(store, 20, old_start, 2 * MINUTE_NS, method="Old")
    _calls(store, 10, now - MINUTE_NS, 10 * 10**9, method="Fresh")
    rollup.create_rollups(store, OPTIONS)
    assert rollup.settle(store, OPTIONS, now_ns=now - 30 * MINUTE_NS) >= 2  # the old minutes
    settled_old = _count(store, "SELECT sum(calls) AS n FROM grpc_phase_rollup")
    assert settled_old == 20

    retention = Retention(raw=timedelta(minutes=30), rollups=timedelta(days=1))
    changed = apply_retention(store, OPTIONS, retention)
    assert {t.name for t in timed_tables(OPTIONS)} - {"grpc_runs"} <= set(changed)
    assert apply_retention(store, OPTIONS, retention) == []  # in place: nothing to do

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = {
            "spans": _count(store, "SELECT count() AS n FROM otel_traces"),
            "calls": _count(store, "SELECT count() AS n FROM grpc_calls FINAL"),
            "settled": _count(store, f"SELECT count() AS n FROM {call_rollup.SETTLED_CALLS_TABLE}"),
        }
        if left == {"spans": 20, "calls": 10, "settled": 0}:
            break
        time.sleep(1)
    assert left == {"spans": 20, "calls": 10, "settled": 0}, "the 2-hour-old data outlived 30m"
    # The rollups, kept a day, still hold the expired minutes.
    assert _count(store, "SELECT sum(calls) AS n FROM grpc_phase_rollup") == 20

    whole_range = CallFilters(since=_at(old_start - MINUTE_NS), until=_at(now + MINUTE_NS))
    report = build_report(store, whole_range)
    methods = report.breakdown.groupby("method")["calls"].max().to_dict()
    assert methods == {"Old": 20, "Fresh": 10}, methods  # old from rollups, fresh raw
    for page in (
        lambda: overview.overview(store, whole_range, "p50"),
        lambda: insight_rows.sides(store, whole_range),
        lambda: phases.tail(store, whole_range, slowest=0.1),
        lambda: payload.by_algorithm(store, whole_range),
        lambda: instances.instance_load(store, whole_range),
        lambda: explorer.find_calls(store, whole_range, limit=20),
    ):
        page()  # answers (an expired range is no error)
    assert len(explorer.find_calls(store, whole_range, limit=50)) == 10  # only raw calls left


def test_a_store_over_its_budget_drops_its_oldest_data_first(store):
    now = time.time_ns()
    hour = 60 * MINUTE_NS
    for batch in range(6):  # one part each, 3 h to 30 min old
        started = now - 3 * hour + batch * (hour // 2)
        _calls(store, 200, started, MINUTE_NS, method=f"batch{batch}")
    size = store_bytes(store, OPTIONS)
    assert keep_within_budget(store, OPTIONS, size * 2).cutoff is None  # within: untouched
    assert _count(store, "SELECT count() AS n FROM otel_traces") == 2400

    budget = int(size * 0.5)
    done = keep_within_budget(store, OPTIONS, budget)
    # (background merges may have shrunk it since: compare with the budget, not ``size``)
    assert done.cutoff is not None and done.bytes_before > budget
    assert store_bytes(store, OPTIONS) <= budget
    by_method = (
        store.query(
            "SELECT SpanAttributes['rpc.method'] AS method, count() AS n FROM otel_traces "
            "GROUP BY method"
        )
        .set_index("method")["n"]
        .to_dict()
    )
    # The newest whole (on a store this small, each part's fixed bytes count for much, so
    # more than the bytes' share of spans may go: only the order is the budget's promise).
    assert by_method.get("batch5") == 400
    assert "batch0" not in by_method  # the oldest went first
    oldest = _count(store, "SELECT min(toUnixTimestamp(Timestamp)) AS n FROM otel_traces")
    assert oldest >= int(done.cutoff.timestamp())
    old_calls = _count(
        store,
        "SELECT count() AS n FROM grpc_calls FINAL WHERE greatest(client_start_ns, "
        f"server_start_ns) < {int(done.cutoff.timestamp()) * 10**9}",
    )
    assert old_calls == 0


def _at(ns: int):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns / 1e9, UTC)

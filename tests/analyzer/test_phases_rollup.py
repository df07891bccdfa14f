"""Rollups of settled minutes give the same breakdown and offsets as computing every call raw."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from grpc_overhead.analyzer import call_rollup, rollup
from grpc_overhead.analyzer.clock_offsets import ClockOptions, pair_offsets, query_parameters
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phases import breakdown_sql, phase_breakdown
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture, store_fixture  # noqa: F401

MINUTE = 60_000 * MS
START = seed.BASE_NS // MINUTE * MINUTE  # whole minutes, so the test knows which settle


def four_minutes(store) -> None:
    """Calls spread over four minutes: two methods, two host pairs, varied processing."""
    spans = []
    for index in range(48):
        truth = replace(
            Truth(),
            start=START + index * (MINUTE // 12) + 7 * MS,
            processing=(1 + index % 5) * MS,
            server_offset=(37 if index % 2 else 0) * MS,
        )
        spans += seed.synthetic_call(
            truth,
            method="Predict" if index % 3 else "Health",
            server_host="host-b" if index % 2 else "host-a",
        )
    seed.insert_spans(store, spans)


def same(left: pd.DataFrame, right: pd.DataFrame) -> None:
    keys = ["service", "method", "phase"]
    left, right = left.set_index(keys).sort_index(), right.set_index(keys).sort_index()
    assert (left[["calls", "phase_calls"]] == right[["calls", "phase_calls"]]).all().all()
    for column in ("p50_us", "p90_us", "p99_us", "mean_us"):
        pd.testing.assert_series_equal(left[column], right[column], rtol=1e-6)


def at(ns: int) -> datetime:
    return datetime.fromtimestamp(ns / 1e9, UTC)


@pytest.mark.e2e
def test_settled_minutes_read_from_the_rollup_match_raw(store):
    four_minutes(store)
    raw, raw_offsets = phase_breakdown(store), pair_offsets(store)
    # Settle the first two minutes only: the rest stays raw, one query merges both.
    assert rollup.settle(store, now_ns=START + 2 * MINUTE, delay=timedelta(0)) == 2
    assert rollup.settled_range(store) == (0, START + 2 * MINUTE)
    same(rollup.breakdown(store), raw)
    assert rollup.settle(store, now_ns=START + 2 * MINUTE, delay=timedelta(0)) == 0
    assert rollup.settle(store, now_ns=START + 7 * MINUTE) == 0  # 5 min delay: nothing new
    assert rollup.settle(store, now_ns=START + 10 * MINUTE, delay=timedelta(0)) == 8
    same(rollup.breakdown(store), raw)
    pd.testing.assert_frame_equal(rollup.offsets(store), raw_offsets)
    # The watermark rows never show up as calls.
    assert set(rollup.breakdown(store)["method"]) == {"Predict", "Health"}


@pytest.mark.e2e
def test_filters_and_edges_inside_minutes(store):
    four_minutes(store)
    rollup.settle(store, now_ns=START + 10 * MINUTE, delay=timedelta(0))
    for filters in (
        CallFilters(since=at(START + MINUTE // 2), until=at(START + 3 * MINUTE + MINUTE // 3)),
        CallFilters(method="Health"),
        CallFilters(since=at(START + MINUTE), run_id="run-1"),
        CallFilters(until=at(START + 30 * MS)),
    ):
        settled = rollup.settled_range(store, filters)
        same(rollup.breakdown(store, filters), phase_breakdown(store, filters))
        if settled:
            assert settled[0] >= (filters.parameters()["since_ns"])
    # Other clock options: everything raw.
    assert rollup.settled_range(store, clock=ClockOptions(window=timedelta(seconds=30))) is None


@pytest.mark.e2e
def test_a_call_completed_after_its_minute_settled_is_rolled_up_again(store):
    """A server half, and a whole new call, landing in minutes already rolled up."""
    four_minutes(store)
    slow = replace(Truth(), start=START + MINUTE + 11 * MS, processing=40 * MS)
    client, server = seed.synthetic_call(slow, method="Health")
    seed.insert_spans(store, [client])  # the server half is late
    assert rollup.settle(store, now_ns=START + 10 * MINUTE, delay=timedelta(0)) == 10
    watermark = rollup.settled_until(store)

    late_call = replace(Truth(), start=START + 3 * MINUTE + 5 * MS, processing=9 * MS)
    seed.insert_spans(store, [server, *seed.synthetic_call(late_call)])
    raw, raw_offsets = phase_breakdown(store), pair_offsets(store)
    stale = rollup.breakdown(store)
    assert stale["calls"].sum() < raw["calls"].sum()  # the rollup has not seen them yet

    options = CallsOptions()
    # No margin: only what arrived after the run counts, so the test sees exactly
    # which minutes the arrival log marks: a client half's own minute; a server
    # half's minute and its neighbours (the call's minute is the client's).
    late = rollup.late_minutes(store, options, watermark, margin_ns=0)
    assert late == [START + minute * MINUTE for minute in (0, 1, 2, 3, 4)]
    assert rollup.settle(store, now_ns=START + 10 * MINUTE, delay=timedelta(0)) == 0
    same(rollup.breakdown(store), raw)
    pd.testing.assert_frame_equal(rollup.offsets(store), raw_offsets)
    # Handled: the next run finds nothing late.
    assert rollup.late_minutes(store, options, watermark, margin_ns=0) == []


@pytest.mark.e2e
def test_settle_works_in_bounded_rounds(store):
    four_minutes(store)  # 12 calls a minute, halves merged on insert: 12 rows a minute
    raw = phase_breakdown(store)
    options = CallsOptions()
    end = START + 10 * MINUTE
    minute = [START + m * MINUTE for m in range(4)]
    one_each = [(minute[0], minute[1]), (minute[1], minute[2]), (minute[2], minute[3])]
    assert rollup.plan_rounds(store, options, START, end, max_rows=12) == [
        *one_each,
        (minute[3], end),
    ]
    assert rollup.plan_rounds(store, options, START, end, max_rows=30) == [
        (START, minute[2]),
        (minute[2], end),
    ]
    assert rollup.plan_rounds(store, options, START, end, max_rows=5) == [
        *one_each,  # a minute busier than a round is a round of its own
        (minute[3], end),
    ]
    assert rollup.settle(store, now_ns=end, delay=timedelta(0), max_rows_per_round=12) == 10
    assert rollup.settled_until(store) == end
    same(rollup.breakdown(store), raw)


@pytest.mark.e2e
def test_a_round_stopped_before_its_marker_is_rolled_up_once(store):
    """A process killed between a round's INSERTs left its settled calls but no marker: the
    next settle rolls the round again, and neither its calls nor their phases count twice
    (the phases are summed from the settled calls)."""
    four_minutes(store)
    raw = phase_breakdown(store)
    options = CallsOptions()
    killed = rollup._settle_parameters(START, START + 2 * MINUTE)
    rollup.create_rollups(store, options)
    call_rollup.insert_settled_calls(store, options, killed)
    assert rollup.settled_until(store) == 0  # no marker: nothing settled yet
    assert rollup.settle(store, now_ns=START + 10 * MINUTE, delay=timedelta(0)) == 10
    same(rollup.breakdown(store), raw)
    settled = f"SELECT count() AS n FROM {options.qualified(call_rollup.SETTLED_CALLS_TABLE)}"
    assert int(store.query(settled)["n"].iloc[0]) == 48


@pytest.mark.e2e
def test_settle_on_an_empty_store_does_nothing(store):
    assert rollup.settle(store) == 0
    assert rollup.settled_until(store) == 0


@pytest.mark.unit
def test_rollup_tables_in_server_mode():
    from grpc_overhead.analyzer.options import CallsOptions
    from grpc_overhead.analyzer.schema import SchemaOptions

    options = CallsOptions.from_schema(
        SchemaOptions(
            database="otel",
            cluster="prod",
            engine="ReplicatedMergeTree",
            engine_params="'/ch/{shard}/{table}', '{replica}'",
        )
    )
    phases, added, offsets = rollup.create_rollup_tables_sql(options)
    assert "ADD COLUMN IF NOT EXISTS server_dispatch_q" in added
    assert "`otel`.`grpc_phase_rollup` ON CLUSTER `prod`" in phases
    assert "ENGINE = ReplicatedAggregatingMergeTree('/ch/{shard}/{table}', '{replica}')" in phases
    assert (
        "AggregateFunction(quantilesTDigestWeightedIf(0.5, 0.9, 0.99), Float64, UInt64, UInt8)"
        in phases
    )
    assert "ENGINE = ReplicatedMergeTree('/ch/{shard}/{table}', '{replica}')" in offsets


@pytest.mark.unit
def test_time_parameters_widen_the_row_filter_by_the_margin():
    from grpc_overhead.analyzer.options import HALF_MARGIN_NS, INT64_MAX, time_parameters

    unbounded = time_parameters(0, INT64_MAX)
    assert unbounded["scan_until_ns"] == INT64_MAX
    assert unbounded["skip_from_ns"] == unbounded["skip_until_ns"] == 0
    bounded = time_parameters(10 * MINUTE, 20 * MINUTE, (11 * MINUTE, 19 * MINUTE))
    assert bounded["scan_since_ns"] == 10 * MINUTE - HALF_MARGIN_NS
    assert bounded["scan_until_ns"] == 20 * MINUTE + HALF_MARGIN_NS
    assert (bounded["skip_from_ns"], bounded["skip_until_ns"]) == (
        11 * MINUTE + HALF_MARGIN_NS,
        19 * MINUTE - HALF_MARGIN_NS,
    )
    narrow = time_parameters(0, INT64_MAX, (MINUTE, 2 * MINUTE))  # shorter than two margins
    assert narrow["skip_from_ns"] == narrow["skip_until_ns"] == 0


@pytest.mark.e2e
def test_a_breakdown_with_nothing_settled_is_the_merged_states_to_the_bit(store):
    """Without rollups the quantiles are finished in the first aggregation (``phase_aggregates``);
    they must be exactly what merging the raw states gives, sampled calls weighted."""
    spans = []
    for index in range(60):
        truth = replace(Truth(), start=START + index * 3 * MS, processing=(1 + index % 7) * MS)
        pair = seed.synthetic_call(truth, method="Predict" if index % 3 else "Health")
        for span in pair:  # a third of the calls stand for several (tail-aware sampling)
            span.attributes["grpc_overhead.sampling.weight"] = str(1 + index % 3 * 4)
            span.attributes["grpc_overhead.sampling.reason"] = "base"
        spans += pair
    seed.insert_spans(store, spans)
    assert rollup.settle(store, now_ns=START, delay=timedelta(0)) == 0  # the tables, empty
    parameters = query_parameters(None, None, (0, 0))  # an empty settled range: all raw
    one_level = store.query(breakdown_sql(), parameters, readonly=True)
    merged = store.query(breakdown_sql(rollup=True), parameters, readonly=True)
    assert len(one_level) == 2 and one_level["calls"].sum() == 20 * 1 + 20 * 5 + 20 * 9
    pd.testing.assert_frame_equal(one_level, merged, check_exact=True)

"""Tail-aware sampling through the whole path: a known mix of calls between a real server
and channel, both sampling at the end of each call -> real collector -> serve's intake ->
chDB -> grpc_call_phases, whose ``weight`` makes the kept calls stand for all of them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pandas as pd
import pytest

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.findings.source import Reader, Source, per_method
from grpc_overhead.analyzer.grafana.dashboards import TABLE_PHASES
from grpc_overhead.analyzer.insights import instances, payload, phases
from grpc_overhead.analyzer.insights.overview import overview
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_view import create_call_tables
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.instrumentation import (
    Sampling,
    SpanPipeline,
)
from grpc_overhead.instrumentation.otlp import CallRecordOTLPExporter
from harness.ground_truth.pipeline import report, through_collector
from harness.known_mix import (
    exact_quantile,
    kinds,
    make_calls,
    mixed_pair,
    spread_trace_ids,
)
from tests.dashboards import seeded
from tests.dashboards.datasource import QueryContext
from tests.dashboards.test_dashboards import panel, run

pytestmark = pytest.mark.e2e

#: 10,000 calls: the estimate of the calls made varies with which calls each side found
#: slow (a slow call in the base counts 1, not 1 / RATE): its standard deviation is about
#: 1.2 / sqrt(CALLS), 2.1 % at 3,000 calls (a 5 % tolerance then fails one run in fifty),
#: 1.2 % here.
CALLS, RATE = 10_000, 0.1
#: Sampled: far fewer calls stored than made (warm-up, failures, the base and each side's
#: slowest 5-9 %: up to ~32 % on a steady machine; a loaded one's bursts keep more).
STORED_AT_MOST = 0.5 * CALLS


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """(the stopped store, {trace id: (kind, the client's own seconds)})."""
    store = tmp_path_factory.mktemp("tail") / "store"
    sampling = Sampling(RATE, True, tail=True)
    with through_collector(store) as port:
        endpoint = f"http://127.0.0.1:{port}"

        def pipeline() -> SpanPipeline:
            exporter = CallRecordOTLPExporter(endpoint=endpoint, insecure=True)
            return SpanPipeline(exporter=exporter, sampling=sampling, export_interval_ms=100)

        with mixed_pair(pipeline(), pipeline()) as look:
            measured = make_calls(look, kinds(CALLS), spread_trace_ids(CALLS))
    yield store, measured


def _query(store_dir: Path, sql: str) -> pd.DataFrame:
    with open_store(str(store_dir)) as store:
        return store.query(sql)


def test_every_slow_and_failed_call_is_stored_with_both_halves(stored):
    store_dir, measured = stored
    found = _query(
        store_dir,
        "SELECT trace_id, weight, sampling_reason, server_span_id != '' AS has_server,"
        " status_code FROM grpc_call_phases",
    )
    by_trace = {int(row.trace_id, 16): row for row in found.itertuples()}
    assert len(by_trace) == len(found)
    for trace_id, (kind, _) in measured.items():
        if kind == "ok":
            continue
        row = by_trace.get(trace_id)
        assert row is not None, kind
        assert row.weight == 1.0 and row.has_server, (kind, row)
        assert row.sampling_reason in ("slow", "failed", "server", "warmup"), row
        if kind == "fail":
            assert row.status_code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert len(found) < STORED_AT_MOST  # sampled: far fewer calls stored than made
    assert set(found["weight"]) <= {1.0, 1 / RATE}


def test_the_weights_estimate_every_call_count_p50_and_p99(stored):
    store_dir, measured = stored
    found = _query(
        store_dir,
        "SELECT sum(weight) AS estimated, count() AS stored,"
        " quantilesExactWeighted(0.5, 0.99)(total_us, toUInt64(round(weight))) AS q"
        " FROM grpc_call_phases",
    )
    assert float(found["estimated"].iloc[0]) == pytest.approx(CALLS, rel=0.05)
    assert int(found["stored"].iloc[0]) < STORED_AT_MOST
    seconds = [value for _, value in measured.values()]
    for estimate_us, quantile in zip(found["q"].iloc[0], (0.5, 0.99), strict=True):
        truth = exact_quantile(seconds, quantile)
        assert estimate_us / 1e6 == pytest.approx(truth, rel=0.05, abs=200e-6), quantile


def test_report_and_the_overview_estimate_every_call_from_the_kept_ones(stored):
    """What users read: ``report`` and the Overview's summary weigh each call by what it
    stands for, and still say how many calls were stored."""
    store_dir, measured = stored
    answer = report(store_dir)
    assert answer["calls"] == pytest.approx(CALLS, rel=0.05)
    assert answer["stored_calls"] < STORED_AT_MOST
    [method] = answer["methods"]
    assert method["stored_calls"] == answer["stored_calls"]
    seconds = [value for _, value in measured.values()]
    total = method["phases"]["total"]
    assert total["calls"] == pytest.approx(CALLS, rel=0.05)
    for key, quantile in (("p50_us", 0.5), ("p99_us", 0.99)):
        truth = exact_quantile(seconds, quantile)
        assert total[key] / 1e6 == pytest.approx(truth, rel=0.05, abs=200e-6), key
    failed = sum(kind == "fail" for kind, _ in measured.values())
    unavailable = [s for s in answer["status_codes"] if s["status"] == "UNAVAILABLE"]
    assert [s["calls"] for s in unavailable] == [failed]  # kept for sure: weight 1 each
    with open_store(str(store_dir)) as store:
        everything = overview(store, CallFilters().at_rest())
    summary = everything[everything["level"] == "all"].iloc[0]
    assert int(summary["calls"]) == pytest.approx(CALLS, rel=0.05)
    assert int(summary["stored_calls"]) == answer["stored_calls"]
    truth = exact_quantile(seconds, 0.5)
    assert summary["total_p50_us"] / 1e6 == pytest.approx(truth, rel=0.05, abs=200e-6)


def test_the_payload_instances_and_phases_pages_estimate_every_call(stored):
    """The other pages weigh each call too: the Payload page's figures over every call,
    the Instances page's one instance, the Phases page's histogram and its slowest 1 %
    (whose threshold, weighted, is the p99 of every call made, not of the kept ones)."""
    store_dir, measured = stored
    seconds = [value for _, value in measured.values()]
    p50, p99 = exact_quantile(seconds, 0.5), exact_quantile(seconds, 0.99)
    filters = CallFilters().at_rest()
    with open_store(str(store_dir)) as store:
        by_algorithm = payload.by_algorithm(store, filters)
        load = instances.instance_load(store, filters)
        histogram = phases.phase_histogram(store, filters, "total", 1.0, 1e6, 40)
        tail = phases.tail(store, filters).set_index("phase")
    every = by_algorithm[by_algorithm["algorithm"] == payload.ALL].iloc[0]
    assert int(every["calls"]) == pytest.approx(CALLS, rel=0.05)
    assert int(every["stored_calls"]) <= STORED_AT_MOST
    assert int(every["total_calls"]) == pytest.approx(CALLS, rel=0.05)
    for estimate_us, truth in zip(every["q"], (p50, p99), strict=True):
        assert estimate_us / 1e6 == pytest.approx(truth, rel=0.05, abs=200e-6)
    assert every["total_mean_us"] / 1e6 == pytest.approx(
        sum(seconds) / len(seconds), rel=0.05, abs=200e-6
    )
    # One instance: a client half kept alone (slow as the client saw it) is counted on the
    # instance that dropped its own half (it said so in its trailer), not on an address.
    [instance] = instances.summary(load).to_dict("records")
    assert instance["calls"] == pytest.approx(CALLS, rel=0.05)
    assert instance["p50_total_us"] / 1e6 == pytest.approx(p50, rel=0.05, abs=200e-6)
    assert instance["p99_total_us"] / 1e6 == pytest.approx(p99, rel=0.05, abs=200e-6)
    assert int(histogram["calls"].sum()) == pytest.approx(CALLS, rel=0.05)
    assert tail.loc["total", "slowest_from_us"] / 1e6 == pytest.approx(p99, rel=0.05, abs=200e-6)
    # About the slowest 1 % of the calls made: the threshold ranks client halves, the band
    # counts calls with every event (a client half kept alone, slow only for the client,
    # is in the first, not the second: more of them on a loaded machine).
    assert tail.loc["total", "slowest_calls"] == pytest.approx(0.01 * CALLS, rel=0.5)


def test_the_findings_read_every_call_made(stored):
    """The findings' per-method source weighs each call: its count, its total's quantiles
    and the slow calls (over the method's p95 of every call made: ~5 % of the calls made,
    where unweighted the kept calls' p95 would mark only the handler's slowest)."""
    store_dir, measured = stored
    seconds = [value for _, value in measured.values()]
    build = per_method(
        [
            f"{weighted.quantiles('0.5, 0.99', 'total_us')} AS q",
            f"{weighted.count_if('slow')} AS slow_calls",
        ]
    )
    with open_store(str(store_dir)) as store:
        source = Source.run(store, CallFilters().at_rest(), None, CallsOptions())
        [row] = Reader(store, source).query(build).to_dict("records")
    assert row["calls"] == pytest.approx(CALLS, rel=0.05)
    for estimate_us, quantile in zip(row["q"], (0.5, 0.99), strict=True):
        truth = exact_quantile(seconds, quantile)
        assert estimate_us / 1e6 == pytest.approx(truth, rel=0.05, abs=200e-6), quantile
    assert 0.03 * CALLS <= row["slow_calls"] <= 0.08 * CALLS


def test_the_grafana_phase_breakdown_is_the_weighted_reports(stored):
    """A Grafana panel weighs each call as ``report`` does: the same calls, p50/p90/p99 and
    mean per phase, over kept calls that stand for all of them."""
    store_dir, measured = stored
    table = panel("grpc-overhead-phases.json", "Phase breakdown (p50 / p90 / p99 / mean, µs)")
    now = datetime.now(UTC)
    context = QueryContext(now - timedelta(hours=1), now + timedelta(minutes=1))
    with open_store(str(store_dir)) as store:
        create_call_tables(store)
        breakdown = run(store, table, seeded.variables(), context)
        expected = build_report(store).breakdown
    # The same digests fed in another order (the report merges states): equal within what
    # a t-digest's merge order moves (not to the last bit as where every weight is 1), far
    # within what an unweighted figure would be off (tens of %).
    merged = breakdown.merge(expected, on=["service", "method", "phase"], suffixes=("", "_r"))
    assert len(merged) == len(breakdown) == len(expected[expected["phase"].isin(TABLE_PHASES)])
    for row in merged.itertuples(index=False):
        assert (row.calls, row.phase_calls) == (row.calls_r, row.phase_calls_r), row
        for statistic in ("p50_us", "p90_us", "p99_us", "mean_us") if row.phase_calls else ():
            ours, theirs = getattr(row, statistic), getattr(row, f"{statistic}_r")
            assert ours == pytest.approx(theirs, rel=0.02, abs=1.0), (row.phase, statistic)
    total = breakdown[breakdown["phase"] == "total"].iloc[0]
    assert int(total["calls"]) == pytest.approx(CALLS, rel=0.05)
    assert total["p99_us"] / 1e6 == pytest.approx(
        exact_quantile([value for _, value in measured.values()], 0.99), rel=0.05, abs=200e-6
    )

"""Calls and latency per server instance: shares, imbalance, buckets, known latencies."""

from __future__ import annotations

import math

import pytest

from grpc_overhead.analyzer.insights import instances
from grpc_overhead.analyzer.options import CallFilters
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture, store_fixture  # noqa: F401

SECOND = 1_000 * MS


def call(start: int, instance: str, *, processing: int = 2 * MS, method: str = "Predict"):
    client, server = seed.synthetic_call(
        Truth(start=start, processing=processing), server_host=f"host-{instance}", method=method
    )
    server.resource["service.instance.id"] = instance
    return [client, server]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("length_s", "step"),
    [(0, 1), (59, 1), (61, 2), (600, 10), (3600, 60), (86_400, 1800), (30 * 86_400, 86_400)],
)
def test_buckets_are_round_and_at_most_the_target(length_s, step):
    assert instances.bucket_seconds(0, length_s * SECOND) == step
    assert length_s / step <= instances.TARGET_BUCKETS or step % 86_400 == 0


@pytest.mark.e2e
def test_summary_shares_and_latency_per_instance(store):
    spans = []
    for index in range(6):
        spans += call(seed.BASE_NS + index * SECOND, "s-1")
    for index in range(2):
        spans += call(seed.BASE_NS + index * SECOND, "s-2", processing=7 * MS)
    client, _ = seed.synthetic_call(Truth(start=seed.BASE_NS))  # the server half never came
    seed.insert_spans(store, [*spans, client])
    load = instances.instance_load(store)
    summary = instances.summary(load).set_index("instance")
    assert summary["calls"].to_dict() == {"s-1": 6, "s-2": 2, "dialled:10.0.0.2:50051": 1}
    assert summary.loc["s-1", "share"] == pytest.approx(6 / 9)
    assert summary.loc["s-1", "load_ratio"] == pytest.approx(6 / 3)
    assert instances.imbalance(load) == pytest.approx(2.0)
    assert summary.loc["s-1", "host"] == "host-s-1"
    assert summary.loc["s-1", "calls_per_s"] == pytest.approx(6 / 5)
    slow = Truth(processing=7 * MS).expected_phases_us()
    assert summary.loc["s-2", "p50_total_us"] == summary.loc["s-2", "p99_total_us"]
    assert summary.loc["s-2", "p99_total_us"] == slow["total"]
    assert summary.loc["s-2", "p99_server_duration_us"] == slow["server_duration"]
    dialled = summary.loc["dialled:10.0.0.2:50051"]
    assert dialled["p50_total_us"] == Truth().expected_phases_us()["total"]
    assert math.isnan(dialled["p50_server_duration_us"])  # no server span: unknown, not 0


@pytest.mark.e2e
def test_timeline_fills_idle_buckets_and_measures_imbalance(store):
    spans = []
    for index in range(4):  # minute 0: s-1 only; minute 1: both, evenly
        spans += call(seed.BASE_NS + index * SECOND, "s-1")
    for index in range(2):
        spans += call(seed.BASE_NS + 60 * SECOND + index * SECOND, "s-1")
        spans += call(seed.BASE_NS + 60 * SECOND + index * SECOND, "s-2")
    seed.insert_spans(store, spans)
    timeline = instances.timeline(instances.instance_load(store, buckets=2))
    assert timeline["bucket_s"].unique().tolist() == [60]
    rows = {(row.bucket_start.minute, row.instance): row for row in timeline.itertuples()}
    assert len(rows) == 4  # 2 buckets x 2 instances, the idle one included
    assert (rows[(13, "s-1")].calls, rows[(13, "s-1")].share) == (4, 1.0)
    assert (rows[(13, "s-2")].calls, rows[(13, "s-2")].share) == (0, 0.0)
    assert math.isnan(rows[(13, "s-2")].p99_total_us)
    assert rows[(13, "s-1")].imbalance == 2.0  # 4 calls against a mean of 2
    assert rows[(14, "s-2")].share == 0.5 and rows[(14, "s-2")].imbalance == 1.0


@pytest.mark.e2e
def test_filters_apply_and_quiet_instances_fold_into_others(store):
    spans = []
    count = instances.TIMELINE_INSTANCES + 3
    for index in range(count):
        for repeat in range(index + 1):  # instance i gets i + 1 calls
            spans += call(seed.BASE_NS + repeat * MS, f"s-{index:02d}")
    spans += call(seed.BASE_NS, "s-lookup", method="Lookup")
    seed.insert_spans(store, spans)
    load = instances.instance_load(store, CallFilters(method="Predict"))
    assert "s-lookup" not in set(instances.summary(load)["instance"])
    timeline = instances.timeline(load)
    names = set(timeline["instance"])
    assert len(names) == instances.TIMELINE_INSTANCES and instances.OTHERS in names
    # The four quietest (1 + 2 + 3 + 4 calls) are summed into one line.
    assert timeline.loc[timeline["instance"] == instances.OTHERS, "calls"].sum() == 10
    assert timeline["calls"].sum() == count * (count + 1) // 2


@pytest.mark.e2e
def test_nothing_matches_gives_empty_frames(store):
    seed.insert_spans(store, call(seed.BASE_NS, "s-1"))
    load = instances.instance_load(store, CallFilters(method="Nope"))
    assert instances.summary(load).empty and instances.timeline(load).empty
    assert math.isnan(instances.imbalance(load))


def _together(store, spans) -> object:
    seed.insert_spans(store, spans)
    return instances.concurrent(instances.instance_load(store))


@pytest.mark.e2e
def test_uneven_load_among_instances_serving_together(store):
    """20 s, one call per second on s-1 and every third second on s-2 too."""
    spans = []
    for index in range(20):
        spans += call(seed.BASE_NS + index * SECOND, "s-1")
        if index % 3 == 0:
            spans += call(seed.BASE_NS + index * SECOND + 100 * MS, "s-2")
    together = _together(store, spans)
    assert len(together) == 1
    row = together.iloc[0]
    assert row["server_service"] == "prediction-service"
    assert row["dialled"] == "10.0.0.2:50051"
    assert row["instances"] == 2 and row["busiest"] == "s-1"
    # s-2 serves from 0 s to 18.1 s (1 s buckets): 19 shared buckets, in which s-1 has
    # 19 calls and s-2 its 7: 19 against a mean of 13.
    assert row["shared_buckets"] == 19 and row["calls"] == 26
    assert row["imbalance"] == pytest.approx(19 / 13)
    assert row["busiest_share"] == pytest.approx(19 / 26)


@pytest.mark.e2e
def test_instances_one_after_another_are_not_compared(store):
    """s-1 serves 0-19 s, then s-2 takes over for 20-39 s: a hand-over, not an imbalance,
    even though the whole-range ratio says 1.6 (40 calls against a mean of 25)."""
    spans = []
    for index in range(20):
        spans += call(seed.BASE_NS + index * SECOND, "s-1")
        spans += call(seed.BASE_NS + index * SECOND + 200 * MS, "s-1")
    for index in range(20, 30):
        spans += call(seed.BASE_NS + index * SECOND, "s-2")
    together = _together(store, spans)
    assert together.empty
    assert instances.imbalance(instances.instance_load(store)) == pytest.approx(40 / 25)


@pytest.mark.e2e
def test_a_client_that_dialled_one_instance_chose_it(store):
    """Two instances at the same time, but each reached through its own address (a
    scenario aimed at s-1, another at s-2, with different rates): no balancing to judge."""
    spans = []
    for index in range(20):
        for instance, count in (("s-1", 3), ("s-2", 1)):
            for repeat in range(count):
                client, server = call(seed.BASE_NS + index * SECOND + repeat * 10 * MS, instance)
                client.attributes["server.address"] = f"{instance}.internal"
                spans += [client, server]
    together = _together(store, spans)
    assert together.empty
    assert instances.imbalance(instances.instance_load(store)) == pytest.approx(1.5)


@pytest.mark.e2e
def test_a_client_half_kept_alone_counts_on_the_instance_that_dropped_its_server_half(store):
    """Tail-aware sampling keeps a call slow only for its client without the server half;
    the server named itself in its trailer. Such halves of s-2 count on s-2, in s-2's
    service: no `dialled:` pseudo-instance, no group of their own, no blank host."""
    spans = []
    for index in range(20):
        spans += call(seed.BASE_NS + index * SECOND, "s-1")
        if index % 3 == 0:
            spans += call(seed.BASE_NS + index * SECOND + 100 * MS, "s-2")
            client, _ = call(seed.BASE_NS + index * SECOND + 300 * MS, "s-2")
            client.attributes["grpc_overhead.sampling.server_instance"] = "s-2"
            spans.append(client)
    together = _together(store, spans)
    assert len(together) == 1
    row = together.iloc[0]
    assert row["server_service"] == "prediction-service" and row["instances"] == 2
    assert row["calls"] == 19 + 14  # s-2's 7 calls with both halves and its 7 alone
    summary = instances.summary(instances.instance_load(store)).set_index("instance")
    assert sorted(summary.index) == ["s-1", "s-2"]
    assert summary.loc["s-2", "calls"] == 14 and summary.loc["s-2", "host"] == "host-s-2"

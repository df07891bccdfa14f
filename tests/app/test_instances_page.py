"""The Instances page on a seeded chDB store: shares, imbalance and latency are the data's."""

from __future__ import annotations

import pytest

from tests.analyzer.seed import BASE_NS, MS, Truth, insert_spans, synthetic_call
from tests.app.charts import figures, metrics, traces
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit

SECOND = 1_000 * MS


def seed_uneven(store) -> None:
    """8 calls on s-1 (processing 2 ms), 2 on s-2 (processing 5 ms), over 50 s; method
    Predict, plus 3 Lookup calls on s-2 (so a method filter changes the answer)."""
    spans = []
    for index in range(10):
        instance = "s-1" if index < 8 else "s-2"
        processing = 2 * MS if instance == "s-1" else 5 * MS
        truth = Truth(start=BASE_NS + index * 5 * SECOND, processing=processing)
        client, server = synthetic_call(truth, server_host=f"host-{instance}")
        server.resource["service.instance.id"] = instance
        spans += [client, server]
    for index in range(3):
        client, server = synthetic_call(
            Truth(start=BASE_NS + index * SECOND), method="Lookup", server_host="host-s-2"
        )
        server.resource["service.instance.id"] = "s-2"
        spans += [client, server]
    insert_spans(store, spans)


def test_shares_imbalance_and_latency_come_from_the_calls(served_store):
    seed_uneven(served_store)
    at = run_page("instances", {"method": "Predict"})
    assert not at.exception and not at.error
    shown = metrics(at)
    assert shown["Server instances"] == "2"
    assert shown["Calls"] == "10"
    assert shown["Imbalance (max / mean)"] == "1.60"  # 8 / (10 / 2)
    assert shown["Busiest instance"] == "80.0 %"
    # s-1 served 0-35 s, then s-2 40-45 s: one after the other, nothing to balance.
    assert shown["Imbalance serving together"] == "n/a"
    assert not any("Load is uneven" in warning.value for warning in at.warning)
    assert any("ran one after another" in caption.value for caption in at.caption)
    table = at.dataframe[0].value.set_index("instance")
    assert table.loc["s-1", "calls"] == 8 and table.loc["s-2", "calls"] == 2
    assert table.loc["s-1", "host"] == "host-s-1"
    assert table.loc["s-1", "p50_total_us"] == Truth().expected_phases_us()["total"]
    assert (
        table.loc["s-2", "p99_total_us"] == Truth(processing=5 * MS).expected_phases_us()["total"]
    )
    assert table["share"].tolist() == [0.8, 0.2]


def test_share_chart_has_every_instance_in_every_bucket(served_store):
    seed_uneven(served_store)
    at = run_page("instances", {"method": "Predict"})
    charts = figures(at)
    assert {"instances_share", "instances_p99", "instances_imbalance"} <= set(charts)
    share = traces(charts["instances_share"])
    assert set(share) == {"s-1", "s-2"}
    # 45 s of calls -> 1 s buckets; each bucket holds one call: 100 % on one instance.
    assert len(share["s-1"]["y"]) == len(share["s-2"]["y"]) == 10
    assert share["s-1"]["y"] == [1.0] * 8 + [0.0] * 2


def test_a_method_filter_changes_the_answer(served_store):
    seed_uneven(served_store)
    at = run_page("instances", {"method": "Lookup"})
    assert not at.exception
    shown = metrics(at)
    assert shown["Server instances"] == "1" and shown["Calls"] == "3"
    assert shown["Imbalance (max / mean)"] == "1.00"
    assert not at.warning


def test_even_load_raises_no_warning(served_store):
    spans = []
    for index in range(6):
        client, server = synthetic_call(Truth(start=BASE_NS + index * MS))
        server.resource["service.instance.id"] = f"s-{index % 3}"
        spans += [client, server]
    insert_spans(served_store, spans)
    at = run_page("instances")
    assert metrics(at)["Imbalance (max / mean)"] == "1.00"
    assert not at.warning and not at.exception


def test_empty_store_shows_how_to_send_data(served_store):
    at = run_page("instances")
    assert not at.exception
    assert any("No calls stored yet" in info.value for info in at.info)
    assert not at.get("plotly_chart")


def test_uneven_load_while_serving_together_is_a_warning(served_store):
    """s-1 and s-2 side by side for 30 s, through the same address: s-1 takes 3 calls a
    second, s-2 one."""
    spans = []
    for index in range(30):
        for instance, count in (("s-1", 3), ("s-2", 1)):
            for repeat in range(count):
                truth = Truth(start=BASE_NS + index * SECOND + repeat * 100 * MS)
                client, server = synthetic_call(truth, server_host=f"host-{instance}")
                server.resource["service.instance.id"] = instance
                spans += [client, server]
    insert_spans(served_store, spans)
    at = run_page("instances")
    assert not at.exception and not at.error
    assert metrics(at)["Imbalance serving together"] == "1.50"
    warning = next(w.value for w in at.warning if "Load is uneven" in w.value)
    assert "2 instances of prediction-service served side by side through 10.0.0.2:50051" in (
        warning
    )
    assert "s-1 took 75.0 % of their calls" in warning

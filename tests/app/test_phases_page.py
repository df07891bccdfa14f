"""The Phases page on a seeded chDB store: quantiles, distributions and the tail are the data's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.analyzer.seed import BASE_NS, MS, US, Truth, insert_spans, synthetic_call
from tests.app.charts import figures, traces
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit


def seed_queued_tail(store) -> None:
    """100 calls: 2 queued for 10 ms (the slowest 1 %... and a bit), the rest 60 or 80 µs."""
    spans = []
    for index in range(100):
        queue = 10 * MS if index < 2 else (60 if index % 2 else 80) * US
        truth = replace(Truth(), start=BASE_NS + index * MS, server_queue=queue)
        spans += synthetic_call(truth)
    insert_spans(store, spans)


def test_per_phase_table_comes_from_the_calls(served_store):
    seed_queued_tail(served_store)
    at = run_page("phases")
    assert not at.exception and not at.error
    table = at.dataframe[0].value.set_index("phase")
    assert table.loc["processing", ["calls", "p50_us", "p90_us", "p99_us", "mean_us"]].tolist() == [
        100,
        2000.0,
        2000.0,
        2000.0,
        2000.0,
    ]
    assert table.loc["server_queue", "p99_us"] == 10_000.0
    # (2 x 10,000 + 49 x 60 + 49 x 80) / 100
    assert table.loc["server_queue", "mean_us"] == pytest.approx(268.6)
    assert table.loc["total", "p50_us"] == 2709.0
    assert table.loc["total", "p99_us"] == 12_629.0


def test_distributions_are_drawn(served_store):
    seed_queued_tail(served_store)
    at = run_page("phases")
    charts = figures(at)
    curves = traces(charts["phases_ecdf"])
    assert "total" in curves and "server_queue" in curves
    assert max(curves["processing"]["x"]) == min(curves["processing"]["x"]) == 2000.0
    # The histogram of total: every call counted, the 2 slow ones in a higher bin.
    bars = traces(charts["phases_histogram"])[""]
    counts = [count for count in bars["y"] if count]
    assert sum(bars["y"]) == 100 and counts[-1] == 2


def test_tail_shows_where_the_slowest_calls_spend_time(served_store):
    seed_queued_tail(served_store)
    at = run_page("phases")
    text = " ".join(markdown.value for markdown in at.markdown)
    assert "The slowest 1 % (2 calls, total ≥ 12.6 ms)" in text
    assert "**12.6 ms** on average" in text
    assert "**2.7 ms** for the 98 calls around the median" in text  # mean of 2,689 and 2,709
    assert "**100.0 % is server_queue**" in text
    tail = at.dataframe[1].value.set_index("phase")
    assert tail.loc["server_queue", "extra_us"] == pytest.approx(10_000 - 70)
    assert tail.loc["processing", "extra_us"] == 0
    bars = traces(figures(at)["phases_tail"])
    assert bars["server_queue"]["x"] == [pytest.approx(70.0), pytest.approx(10_000.0)]


def test_calls_without_events_have_total_but_no_tail(served_store):
    spans = []
    for index in range(3):
        spans += synthetic_call(Truth(start=BASE_NS + index * MS), official=True)
    insert_spans(served_store, spans)
    at = run_page("phases")
    assert not at.exception
    table = at.dataframe[0].value.set_index("phase")
    assert table.loc["total", "calls"] == 3 and table.loc["processing", "calls"] == 0
    assert any("needs calls that record every event" in info.value for info in at.info)


def test_empty_store_and_no_match(served_store):
    at = run_page("phases")
    assert not at.exception
    assert any("No calls stored yet" in info.value for info in at.info)
    assert not at.get("plotly_chart")
    seed_queued_tail(served_store)
    at = run_page("phases", {"run": "run-9"})
    assert any("No calls match the filters" in info.value for info in at.info)
    assert not at.get("plotly_chart")

"""The Payload & compression page on a seeded chDB store: fits and comparisons are the data's."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.analyzer.seed import (
    BASE_NS,
    MS,
    US,
    Truth,
    compress_with,
    insert_spans,
    synthetic_call,
)
from tests.app.charts import figures, metrics, traces
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit

#: Extra client_serialize per algorithm (compressing costs the client).
COMPRESS_US = {"none": 0, "gzip": 200, "zstd": 50}


def seed_sizes_and_algorithms(store) -> None:
    """12 calls: each algorithm at 250, 500, 750 and 1,000 kB; request_network = 100 µs +
    400 µs per MB of request, so total costs 400 µs per MB too."""
    spans = []
    for index in range(12):
        algorithm = ("none", "gzip", "zstd")[index % 3]
        size = (1 + index // 3) * 250_000
        truth = replace(
            Truth(),
            start=BASE_NS + index * MS,
            request_network=100 * US + size * 400 // 1_000_000 * US,
            client_serialize=(15 + COMPRESS_US[algorithm]) * US,
        )
        client, server = synthetic_call(truth, request_bytes=size)
        compress_with(algorithm, client, server)
        spans += [client, server]
    insert_spans(store, spans)


def test_cost_per_mb_of_the_chosen_phase(served_store):
    seed_sizes_and_algorithms(served_store)
    at = run_page("payload")
    assert not at.exception and not at.error
    shown = metrics(at)
    assert shown["Cost per MB"] == "400 µs"
    # total = 2,689 - 300 + 100 + 400 x MB + compression; at zero bytes (512 response bytes
    # count as "both"): 2,489 + mean compression cost (250 / 3) - 400 x 0.000512.
    assert shown["Fixed cost"] == "2.57 ms"
    at.selectbox(key="payload_phase").set_value("request_network").run()
    [row] = at.dataframe[0].value.to_dict("records")
    assert (row["service"], row["method"], row["run_id"]) == (
        "predict.Predictor",
        "Predict",
        "run-1",
    )
    assert row["slope_us_per_mb"] == pytest.approx(400)
    assert row["intercept_us"] == pytest.approx(100)
    assert row["calls"] == 12 and row["verdict"] == "400 µs per MB (R² 1.00)"
    # Processing does not change with size: no cost is headlined, and the page says why.
    at.selectbox(key="payload_phase").set_value("processing").run()
    assert metrics(at)["Cost per MB"] == "no size effect"
    assert any("did not change with size" in info.value for info in at.info)


def test_scatter_with_the_fitted_line(served_store):
    seed_sizes_and_algorithms(served_store)
    at = run_page("payload")
    at.selectbox(key="payload_phase").set_value("request_network").run()
    assert not at.exception
    assert metrics(at)["Cost per MB"] == "400 µs"
    scatter = traces(figures(at)["payload_scatter"])
    assert sorted(scatter["none"]["x"]) == [0.25, 0.5, 0.75, 1.0]
    assert sorted(scatter["none"]["y"]) == [200.0, 300.0, 400.0, 500.0]
    [line] = [trace for name, trace in scatter.items() if name.startswith("fit")]
    assert line["x"] == [0.25, 1.0] and line["y"] == [pytest.approx(200), pytest.approx(500)]


def test_algorithms_side_by_side(served_store):
    seed_sizes_and_algorithms(served_store)
    at = run_page("payload")
    table = at.dataframe[1].value.set_index("algorithm")
    assert sorted(table.index) == ["gzip", "none", "zstd"]
    assert table["calls"].tolist() == [4, 4, 4]
    # 2,489 + 400 x 0.625 MB + the algorithm's compression cost.
    for algorithm, extra in COMPRESS_US.items():
        assert table.loc[algorithm, "total_mean_us"] == pytest.approx(2739 + extra)
        assert table.loc[algorithm, "request_bytes_mean"] == 625_000
    bars = traces(figures(at)["payload_algorithms_phases"])
    by_algorithm = dict(
        zip(bars["client_serialize"]["y"], bars["client_serialize"]["x"], strict=True)
    )
    assert by_algorithm == {"gzip": 215.0, "none": 15.0, "zstd": 65.0}
    assert "payload_algorithms_total" in figures(at)
    # Each algorithm's cost per MB within the method and run: 400 µs, R² 1.
    per_algorithm = at.dataframe[2].value.set_index("algorithm")
    assert set(per_algorithm["verdict"]) == {"400 µs per MB (R² 1.00)"}


def test_filters_and_empty_states(served_store):
    at = run_page("payload")
    assert not at.exception
    assert any("No calls stored yet" in info.value for info in at.info)
    assert not at.get("plotly_chart")
    seed_sizes_and_algorithms(served_store)
    at = run_page("payload", {"method": "Nope"})
    assert any("No calls match the filters" in info.value for info in at.info)
    assert not at.get("plotly_chart")


def test_one_size_has_no_slope(served_store):
    spans = []
    for index in range(3):
        spans += synthetic_call(Truth(start=BASE_NS + index * MS))
    insert_spans(served_store, spans)
    at = run_page("payload")
    assert not at.exception
    assert metrics(at)["Cost per MB"] == "no size effect"
    assert any("one payload size only" in info.value for info in at.info)
    assert [name for name in traces(figures(at)["payload_scatter"]) if name.startswith("fit")] == []


def test_a_weak_or_negative_fit_is_explained_not_headlined(served_store):
    """Lookup (run slow): 30-60 kB requests whose request_network jumps 0/3 ms regardless
    of size (R² near 0); Predict (run fast): 400-700 kB, fast, 10 calls. Fitted across
    both the big calls are the fast ones: a negative slope, shown nowhere."""
    spans = []
    for index in range(4):
        truth = replace(
            Truth(),
            start=BASE_NS + index * MS,
            request_network=(3_000 if index in (0, 3) else 1) * US,
        )
        spans += synthetic_call(
            truth, method="Lookup", run_id="slow", request_bytes=30_000 + index * 10_000
        )
    for index in range(10):
        size = 400_000 + (index % 4) * 100_000
        truth = replace(
            Truth(), start=BASE_NS + (10 + index) * MS, request_network=size * 50 // 1_000_000 * US
        )
        spans += synthetic_call(truth, method="Predict", run_id="fast", request_bytes=size)
    insert_spans(served_store, spans)
    at = run_page("payload")
    at.selectbox(key="payload_phase").set_value("request_network").run()
    assert not at.exception and not at.error
    # The busiest method and run (Predict, fast) is headlined: 50 µs per MB.
    assert metrics(at)["Cost per MB"] == "50 µs"
    table = at.dataframe[0].value.set_index("method")
    assert table.loc["Predict", "verdict"] == "50 µs per MB (R² 1.00)"
    assert table.loc["Lookup", "verdict"].startswith("no size effect measurable: R² 0.")
    assert table["slope_us_per_mb"].isna().tolist() == [False, True]  # no cost for Lookup
    at = run_page("payload", {"method": "Lookup"})
    at.selectbox(key="payload_phase").set_value("request_network").run()
    assert metrics(at)["Cost per MB"] == "no size effect"
    assert any("no size effect measurable: R² 0." in info.value for info in at.info)
    assert [n for n in traces(figures(at)["payload_scatter"]) if n.startswith("fit")] == []


def seed_one_size_per_run(store) -> None:
    """As the demo plays it: Predict in run "small" (20 calls of 2.5 kB) and run "large"
    (4 calls of 250 kB), each run one size; request_network = 100 µs + 400 µs per MB.
    Lookup in run "small" too (30 calls, 2.5 kB): the busiest method/run has no effect."""
    spans = []
    for index, (method, run, size) in enumerate(
        [("Predict", "small", 2_500)] * 20
        + [("Predict", "large", 250_000)] * 4
        + [("Lookup", "small", 2_500)] * 30
    ):
        truth = replace(
            Truth(),
            start=BASE_NS + index * MS,
            request_network=100 * US + size * 400 // 1_000_000 * US,
        )
        spans += synthetic_call(truth, method=method, run_id=run, request_bytes=size)
    insert_spans(store, spans)


def test_runs_of_one_size_each_are_fitted_across_runs_and_the_page_says_so(served_store):
    """The demo's headline said "no size effect": every method/run has one size. Predict
    across its two runs costs 400 µs per MB, and the page says the fit is across runs."""
    seed_one_size_per_run(served_store)
    at = run_page("payload")
    at.selectbox(key="payload_phase").set_value("request_network").run()
    assert not at.exception and not at.error
    assert metrics(at)["Cost per MB"] == "400 µs"
    caption = " ".join(element.value for element in at.caption)
    assert "predict.Predictor/Predict across 2 runs: large, small, 24 calls" in caption
    assert "whatever else differs between them" in caption
    table = at.dataframe[0].value
    assert table["run_id"].tolist() == ["small", "small", "large", "(2 runs: large, small)"]
    assert table["verdict"].tolist()[:3] == ["one payload size only: no cost per MB to fit"] * 3
    # One run picked in the sidebar: its one size has no cost to fit, and it says so.
    at = run_page("payload", {"run": "large"})
    at.selectbox(key="payload_phase").set_value("request_network").run()
    assert metrics(at)["Cost per MB"] == "no size effect"
    assert any("in run large: one payload size only" in info.value for info in at.info)

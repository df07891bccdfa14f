"""Payload and compression insights on a real chDB store: exact fits from known costs per MB."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights import payload
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.result_columns import OPTIONAL_PHASES
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit

SIZES = (100_000, 400_000, 700_000, 1_000_000)


def seed_costs(store) -> None:
    """Per algorithm (none, gzip, zstd) one call per request size: client_serialize costs
    30 µs/MB (+ 100 µs for gzip), request_network 1,000 µs/MB + 50 µs; responses of
    2 kB and 8 kB alternate, client_deserialize 500 µs/MB of response."""
    spans = []
    for index, (algorithm, size) in enumerate(
        (algorithm, size) for algorithm in ("none", "gzip", "zstd") for size in SIZES
    ):
        response = 2_000 if index % 2 else 8_000
        truth = replace(
            Truth(),
            start=seed.BASE_NS + index * MS,
            client_serialize=size * 30 // 1000 + (100 * US if algorithm == "gzip" else 0),
            request_network=50 * US + size * 1000 // 1000,
            client_deserialize=response * 500 // 1000,
        )
        client, server = seed.synthetic_call(truth, request_bytes=size, response_bytes=response)
        seed.compress_with(algorithm, client, server)
        spans += [client, server]
    seed.insert_spans(store, spans)


def test_cost_per_mb_per_phase(store):
    seed_costs(store)
    costs = payload.costs(payload.by_algorithm(store))
    assert list(costs.columns) == list(payload.COST_COLUMNS)
    overall = costs[costs["algorithm"] == payload.ALL].set_index("phase")
    assert list(overall.index) == list(payload.FITTED_PHASES)
    network = overall.loc["request_network"]
    assert network["basis"] == "request" and network["calls"] == 12
    assert network["slope_us_per_mb"] == pytest.approx(1000.0)
    assert network["intercept_us"] == pytest.approx(50.0)
    assert network["r2"] == pytest.approx(1.0)
    assert (network["min_bytes"], network["max_bytes"]) == (100_000, 1_000_000)
    deserialize = overall.loc["client_deserialize"]
    assert deserialize["basis"] == "response"
    assert deserialize["slope_us_per_mb"] == pytest.approx(500.0)
    assert deserialize["intercept_us"] == pytest.approx(0.0, abs=1e-6)
    # Processing does not depend on size: a flat line at 2 ms, r2 undefined.
    assert overall.loc["processing", "slope_us_per_mb"] == pytest.approx(0.0, abs=1e-9)
    assert overall.loc["processing", "intercept_us"] == pytest.approx(2000.0)
    assert math.isnan(overall.loc["processing", "r2"])


def test_cost_per_mb_per_algorithm(store):
    seed_costs(store)
    costs = payload.costs(payload.by_algorithm(store))
    serialize = costs[costs["phase"] == "client_serialize"].set_index("algorithm")
    assert list(serialize.index) == [payload.ALL, "gzip", "none", "zstd"]
    for algorithm in ("gzip", "none", "zstd"):
        assert serialize.loc[algorithm, "slope_us_per_mb"] == pytest.approx(30.0)
        assert serialize.loc[algorithm, "calls"] == 4
    assert serialize.loc["gzip", "intercept_us"] == pytest.approx(100.0)
    assert serialize.loc["none", "intercept_us"] == pytest.approx(0.0, abs=1e-6)


def test_one_size_gives_no_slope(store):
    spans = []
    for index in range(3):
        spans += seed.synthetic_call(Truth(start=seed.BASE_NS + index * MS))
    seed.insert_spans(store, spans)
    costs = payload.costs(payload.by_algorithm(store))
    assert costs["slope_us_per_mb"].isna().all() and costs["r2"].isna().all()
    # No deadlines, client waits, chain events or marks on synthetic calls: none of the
    # optional phases is defined for any of them.
    measured = ~costs["phase"].isin(OPTIONAL_PHASES)
    assert (costs.loc[measured, "calls"] == 3).all()
    assert (costs.loc[~measured, "calls"] == 0).all()


def test_algorithms_side_by_side(store):
    seed_costs(store)
    frame = payload.algorithms(payload.by_algorithm(store))
    assert list(frame.columns) == list(payload.ALGORITHM_COLUMNS)
    summary = frame.drop_duplicates("algorithm").set_index("algorithm")
    assert list(summary.index) == ["gzip", "none", "zstd"]
    assert summary["calls"].tolist() == [4, 4, 4]
    assert summary.loc["none", "request_bytes_mean"] == 550_000
    assert summary.loc["none", "response_bytes_mean"] == 5_000
    # The seed records compressed = uncompressed for the first message each way.
    assert summary.loc["gzip", "request_compressed_ratio"] == 1.0
    serialize = frame[frame["phase"] == "client_serialize"].set_index("algorithm")["value_us"]
    assert serialize.to_dict() == {"gzip": 116.5, "none": 16.5, "zstd": 16.5}
    none = frame[frame["algorithm"] == "none"]
    assert none["value_us"].sum() == pytest.approx(summary.loc["none", "total_mean_us"])
    assert none["share"].sum() == pytest.approx(1.0)


def test_sample_is_bounded_and_stable(store):
    seed_costs(store)
    sample = payload.payload_sample(store, limit=5)
    assert list(sample.columns) == list(payload.SAMPLE_COLUMNS) and len(sample) == 5
    again = payload.payload_sample(store, limit=5)
    assert sample.equals(again)
    every = payload.payload_sample(store, limit=100)
    assert len(every) == 12
    row = every[(every["algorithm"] == "none") & (every["request_bytes"] == 400_000)].iloc[0]
    assert row["request_network_us"] == 450.0
    assert payload.payload_sample(store, CallFilters(method="Other")).empty
    with pytest.raises(BadInput, match="sample size"):
        payload.payload_sample(store, limit=0)


def test_nothing_matches(store):
    frame = payload.by_algorithm(store, CallFilters(run_id="nope"))
    assert payload.costs(frame).empty and payload.algorithms(frame).empty


@pytest.mark.parametrize(
    ("slope", "r2", "calls", "finding", "said"),
    [
        (400.0, 0.99, 12, True, "400 µs per MB (R² 0.99)"),
        (2_500.0, 0.7, 12, True, "2.5 ms per MB (R² 0.70)"),
        (-57.2, 0.01, 900, False, "no size effect measurable: R² 0.01"),
        (57.2, 0.49, 900, False, "no size effect measurable: R² 0.49"),
        (-935_624_612.7, 0.8, 900, False, "larger payloads were faster (R² 0.80)"),
        (math.nan, math.nan, 3, False, "one payload size only"),
        (0.0, math.nan, 3, False, "no size effect: the phase did not change with size"),
    ],
)
def test_verdict_headlines_only_real_costs(slope, r2, calls, finding, said):
    is_finding, text = payload.verdict(slope, r2, calls)
    assert is_finding is finding
    assert text.startswith(said)


def test_fits_per_method_and_run_not_across_them(store):
    """Lookup: small requests (10-40 kB) on a slow run; Predict: large ones (0.4-1 MB) on a
    fast one. Each costs 1,000 µs/MB of request_network, but fitted together the large
    calls are the fast ones: a negative slope that is no cost."""
    spans = []
    for index in range(8):
        small = index < 4
        size = (10_000 + index * 10_000) if small else 100_000 * (index)
        truth = replace(
            Truth(),
            start=seed.BASE_NS + index * MS,
            request_network=(5_000 * US if small else 0) + size * 1000 // 1000,
        )
        spans += seed.synthetic_call(
            truth,
            method="Lookup" if small else "Predict",
            run_id="slow" if small else "fast",
            request_bytes=size,
        )
    seed.insert_spans(store, spans)
    frame = payload.by_algorithm(store)
    together = payload.costs(frame)
    mixed = together[(together["algorithm"] == payload.ALL)].set_index("phase")
    assert mixed.loc["request_network", "slope_us_per_mb"] < 0
    assert not mixed.loc["request_network", "finding"]
    assert mixed.loc["request_network", "verdict"].startswith("larger payloads were faster")
    fits = payload.method_fits(frame)
    assert list(fits.columns) == list(payload.METHOD_FIT_COLUMNS)
    network = fits[(fits["phase"] == "request_network") & (fits["algorithm"] == payload.ALL)]
    by_method = network.set_index("method")
    assert set(by_method.index) == {"Lookup", "Predict"}
    assert by_method.loc["Lookup", "run_id"] == "slow"
    for method in ("Lookup", "Predict"):
        assert by_method.loc[method, "slope_us_per_mb"] == pytest.approx(1000.0)
        assert by_method.loc[method, "calls"] == 4
        assert by_method.loc[method, "finding"]
        assert by_method.loc[method, "verdict"] == "1 ms per MB (R² 1.00)"
    assert by_method.loc["Lookup", "intercept_us"] == pytest.approx(5_000.0)


def test_a_finding_within_one_run_is_headlined_before_one_across_runs(store):
    """Predict: run "small" (20 calls of 2.5 kB) and run "large" (4 of 250 kB), 400 µs/MB
    only across them; Lookup: 6 calls of 100-600 kB in one run, 1,000 µs/MB within it."""
    spans = []
    calls = [("Predict", "small", 2_500)] * 20 + [("Predict", "large", 250_000)] * 4
    calls += [("Lookup", "one", size) for size in range(100_000, 700_000, 100_000)]
    for index, (method, run, size) in enumerate(calls):
        cost = 400 if method == "Predict" else 1000
        truth = replace(
            Truth(), start=seed.BASE_NS + index * MS, request_network=size * cost // 1000
        )
        spans += seed.synthetic_call(truth, method=method, run_id=run, request_bytes=size)
    seed.insert_spans(store, spans)
    frame = payload.by_algorithm(store)

    def network(fits):
        return fits[(fits["phase"] == "request_network") & (fits["algorithm"] == payload.ALL)]

    within, across = network(payload.method_fits(frame)), network(payload.across_runs_fits(frame))
    [row] = across.to_dict("records")  # Lookup has one run: no fit across runs
    assert (row["method"], row["run_id"], row["calls"]) == ("Predict", "(2 runs: large, small)", 24)
    assert row["finding"] and row["slope_us_per_mb"] == pytest.approx(400.0)
    fit, is_across = payload.headline(within, across)
    assert (fit["method"], is_across) == ("Lookup", False)
    assert fit["slope_us_per_mb"] == pytest.approx(1000.0)
    fit, is_across = payload.headline(within[within["method"] == "Predict"], across)
    assert (fit["method"], fit["run_id"], is_across) == ("Predict", "(2 runs: large, small)", True)

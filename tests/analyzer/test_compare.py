"""The comparison's noise estimate: a bootstrap interval that holds 0 for noise, not for a shift."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from grpc_overhead.analyzer.compare import bootstrap_median_diff, compare

pytestmark = pytest.mark.unit


def _calls(rng: np.random.Generator, n: int, **medians: float) -> pd.DataFrame:
    """Per-call phases (µs), log-normal around the given medians; total = their sum."""
    frame = pd.DataFrame(
        {f"{name}_us": median * rng.lognormal(0, 0.3, n) for name, median in medians.items()}
    )
    frame["total_us"] = frame.sum(axis=1)
    return frame


def test_two_samples_of_one_distribution_are_noise() -> None:
    rng = np.random.default_rng(1)
    low, high = bootstrap_median_diff(rng.lognormal(6, 0.4, 400), rng.lognormal(6, 0.4, 400))
    assert low < 0 < high


def test_a_shift_is_found_with_an_interval_around_it() -> None:
    rng = np.random.default_rng(2)
    base = rng.lognormal(6, 0.2, 500)  # median ~403 µs
    low, high = bootstrap_median_diff(base, base + 100.0)
    assert 0 < low < 100 < high


def test_the_phase_that_moved_explains_the_difference() -> None:
    rng = np.random.default_rng(3)
    baseline = _calls(rng, 300, client_serialize=20, request_network=100, processing=300)
    slower = _calls(rng, 300, client_serialize=20, request_network=700, processing=300)
    runs = pd.DataFrame(
        {"run_id": ["a", "b"], "calls_per_s": [1000.0, 600.0], "predictions_per_s": [1e5, 6e4]}
    )
    (comparison,) = compare({"a": baseline, "b": slower}, runs, resamples=300)
    document = comparison.to_json()
    assert document["explained_by"]["phase"] == "request_network"
    assert document["phases"]["request_network"]["significant"] is True
    assert document["phases"]["processing"]["significant"] is False
    assert document["phases"]["total"]["ratio"] > 1.5
    assert document["throughput"]["calls_per_s_ratio"] == pytest.approx(0.6)
    assert "request_network explains most of it" in document["summary"]
    # phases no call defines are there, without numbers
    assert document["phases"]["server_queue"]["diff_us"] is None


def test_identical_runs_are_called_within_noise() -> None:
    rng = np.random.default_rng(4)
    frames = {name: _calls(rng, 200, processing=300) for name in ("a", "b")}
    (comparison,) = compare(frames, resamples=300)
    assert "no measurable difference" in comparison.summary()
    assert {delta.verdict for delta in comparison.phases if delta.diff_us is not None} == {
        "no measurable difference"
    }
    assert comparison.to_json()["throughput"] == {}

from __future__ import annotations

import time

import numpy as np
import pytest

from grpc_overhead.prediction import payload
from grpc_overhead.prediction.model import MAX_EMBEDDING, MAX_FEATURES, Model, burn_cpu

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(3)
    return payload.make_features(rng, 200, 32), rng.standard_normal(16).astype(np.float32)


def test_deterministic_across_calls_and_instances(inputs) -> None:
    features, query = inputs
    first = Model().predict(features, query)
    again = Model().predict(features, query)
    np.testing.assert_array_equal(first, again)
    np.testing.assert_array_equal(first, Model().predict(features.copy(), query.copy()))
    assert first.dtype == np.float32 and first.shape == (200,)
    assert np.all((first > 0) & (first < 1))
    assert float(np.std(first)) > 0.01 and 0.05 < float(np.mean(first)) < 0.95  # not saturated
    assert Model().version == Model().version


def test_seed_changes_weights_and_version(inputs) -> None:
    features, query = inputs
    assert Model(seed=1).version != Model(seed=2).version
    assert not np.array_equal(
        Model(seed=1).predict(features, query), Model(seed=2).predict(features, query)
    )


def test_matches_a_plain_reference(inputs) -> None:
    features, query = inputs
    model = Model()
    x = np.sign(features) * np.log1p(np.abs(features.astype(np.float64)))
    q = query.astype(np.float64)
    width = x.shape[1] + q.shape[0]
    hidden = (x @ model.w1_features[:32] + q @ model.w1_query[:16]) / np.sqrt(width) + model.b1
    logits = np.maximum(hidden, 0) @ model.w2 + model.b2
    np.testing.assert_allclose(
        model.predict(features, query), 1 / (1 + np.exp(-logits)), rtol=1e-4, atol=1e-6
    )


def test_rows_are_scored_independently(inputs) -> None:
    features, query = inputs
    model = Model()
    whole = model.predict(features, query)
    np.testing.assert_allclose(model.predict(features[50:60], query), whole[50:60], rtol=1e-6)


def test_shapes(inputs) -> None:
    _, query = inputs
    model = Model()
    assert model.predict(np.zeros((0, 32), np.float32), query).shape == (0,)
    assert model.predict(np.ones((3, 7), np.float32), np.zeros(0, np.float32)).shape == (3,)
    with pytest.raises(ValueError, match=f"the model supports {MAX_FEATURES}"):
        model.predict(np.ones((1, MAX_FEATURES + 1), np.float32), query)
    with pytest.raises(ValueError, match=f"the model supports {MAX_EMBEDDING}"):
        model.predict(np.ones((1, 4), np.float32), np.ones(MAX_EMBEDDING + 1, np.float32))
    with pytest.raises(ValueError, match="must be >= 0"):
        Model(model_cost_ms=-1)


def test_cost_knob_spends_thread_cpu_time(inputs) -> None:
    features, query = inputs
    cheap, heavy = Model(), Model(model_cost_ms=40)

    def cpu(model: Model) -> float:
        start = time.thread_time()
        model.predict(features, query)
        return time.thread_time() - start

    baseline = min(cpu(cheap) for _ in range(3))
    loaded = cpu(heavy)
    assert loaded >= 0.030  # by construction >= 40 ms; loose against timer granularity
    assert loaded > baseline + 0.020
    half = time.thread_time()
    heavy.predict(features, query, cost_fraction=0.5)
    assert time.thread_time() - half >= 0.015


def test_burn_cpu_zero_is_free() -> None:
    assert burn_cpu(0) == 0
    assert burn_cpu(1) >= 1

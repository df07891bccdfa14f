"""Sampled compressibility on a real chDB store: columns, medians per method, old stores."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grpc_overhead.analyzer import compressibility, sample_columns
from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_view import PHASES_VIEW
from grpc_overhead.instrumentation.compressibility import ATTRIBUTE_KEYS
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.unit

PREFIX = "grpc_overhead.compressibility."


def _sample(span, direction: str, size: int, gzip: float, cost: int) -> None:
    span.attributes[PREFIX + "direction"] = direction
    span.attributes[PREFIX + "message_bytes"] = str(size)
    span.attributes[PREFIX + "measured_bytes"] = str(size)
    for algorithm, ratio in (("gzip", gzip), ("deflate", max(gzip - 0.01, gzip / 2))):
        span.attributes[f"{PREFIX}{algorithm}.ratio"] = repr(ratio)
        span.attributes[f"{PREFIX}{algorithm}.compress_ns_per_mb"] = str(cost)
        span.attributes[f"{PREFIX}{algorithm}.decompress_ns_per_mb"] = str(cost // 4)


def seed_samples(store) -> None:
    """Predict: three requests sampled (ratios 0.2, 0.3, 0.4; 1e-05 written in Go's
    scientific style on a fourth method), one response; six calls without a sample."""
    spans = []
    for index in range(10):
        truth = replace(Truth(), start=seed.BASE_NS + index * MS)
        client, server = seed.synthetic_call(truth, request_bytes=40_000, response_bytes=800)
        if index < 3:
            _sample(client, "request", 40_000, 0.2 + index / 10, 8_000_000 + index * 1_000_000)
        if index == 3:
            _sample(server, "response", 800, 0.9, 30_000_000)
        if index == 4:
            for span in (client, server):
                span.attributes["rpc.method"] = "Tiny"
            _sample(client, "request", 40_000, 1e-05, 5_000_000)
        spans += [client, server]
    seed.insert_spans(store, spans)


def test_the_attribute_names_are_the_instrumentations():
    expected = {f"{PREFIX}message_bytes"} | {
        f"{PREFIX}{algorithm}.{measure}"
        for algorithm in sample_columns.ALGORITHMS
        for measure, _ in sample_columns.MEASURES
    }
    assert expected <= set(ATTRIBUTE_KEYS)


def test_medians_per_method_direction_and_algorithm(store):
    seed_samples(store)
    found = compressibility.by_method(store, CallFilters().at_rest())
    assert list(found.columns) == list(compressibility.BY_METHOD_COLUMNS)
    rows = found.set_index(["method", "direction", "algorithm"])
    gzip = rows.loc[("Predict", "request", "gzip")]
    assert gzip["samples"] == 3
    assert gzip["ratio_p50"] == pytest.approx(0.3)
    assert (gzip["ratio_min"], gzip["ratio_max"]) == pytest.approx((0.2, 0.4))
    assert gzip["compress_ns_per_mb_p50"] == 9_000_000
    assert gzip["decompress_ns_per_mb_p50"] == 2_250_000
    assert gzip["message_bytes_p50"] == 40_000
    assert rows.loc[("Predict", "request", "deflate")]["ratio_p50"] == pytest.approx(0.29)
    response = rows.loc[("Predict", "response", "gzip")]
    assert (response["samples"], response["ratio_p50"]) == (1, pytest.approx(0.9))
    assert rows.loc[("Tiny", "request", "gzip")]["ratio_p50"] == pytest.approx(1e-05)
    assert len(found) == 6  # Predict x 2 directions x 2 algorithms + Tiny's request x 2
    # The usual filters apply; no sample, no row.
    tiny = compressibility.by_method(store, CallFilters(method="Tiny").at_rest())
    assert set(tiny["method"]) == {"Tiny"}
    assert compressibility.by_method(store, CallFilters(method="None").at_rest()).empty


def test_calls_without_a_sample_hold_the_neutral_value(store):
    seed_samples(store)
    found = store.query(
        f"SELECT request_sample_bytes, request_gzip_ratio, response_gzip_ratio FROM {PHASES_VIEW}"
        " ORDER BY start_time"
    )
    assert found["request_sample_bytes"].notna().sum() == 4
    assert found["response_gzip_ratio"].notna().sum() == 1
    raw = store.query(
        "SELECT request_gzip_ratio AS r, request_gzip_compress_ns_per_mb AS c"
        " FROM grpc_calls FINAL WHERE request_sample_bytes < 0"
    )
    assert len(raw) == 6 and set(raw["r"]) == {-1.0} and set(raw["c"]) == {-1}


def test_a_store_made_before_the_columns_opens_and_reads_them_as_none(store):
    """An older grpc_calls (no sample columns, an older view) gets them on the next start;
    its rows read -1: not sampled."""
    options = CallsOptions()
    names = [name for name, *_ in sample_columns.specs()]
    store.command("DROP VIEW IF EXISTS grpc_calls_mv")
    store.command("ALTER TABLE grpc_calls " + ", ".join(f"DROP COLUMN {n}" for n in names))
    seed.insert_spans(store, seed.synthetic_call(Truth()))  # no view: nothing assembled
    assert create_calls(store, options)  # the view anew, with a backfill
    found = store.query(
        "SELECT request_sample_bytes AS b, response_deflate_ratio AS r FROM grpc_calls FINAL"
    )
    assert list(found["b"]) == [-1] and list(found["r"]) == [-1.0]
    assert compressibility.by_method(store, CallFilters().at_rest()).empty

"""Sampled compressibility through the whole path: instrumented client and the real prediction
service -> real collector -> serve's intake -> chDB -> grpc_calls, grpc_call_phases, by_method.

One pipeline for the module: an instrumented channel per payload kind (feature tables,
which compress, and JPEG-like noise, which does not), each sampling the first request of
its method (a one-hour interval), the service sampling the first response. The ratios the
store holds must be what zlib makes of the very same bytes here; every other call holds
the neutral value.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from grpc_overhead.analyzer import compressibility
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.instrumentation import SpanPipeline, instrument_channel
from grpc_overhead.instrumentation import compressibility as sampling
from grpc_overhead.instrumentation.environment import COMPRESSIBILITY_INTERVAL_S, RUN_ID
from grpc_overhead.instrumentation.otlp import CallRecordOTLPExporter
from grpc_overhead.prediction.payload import make_image_request, make_request
from grpc_overhead.prediction.protos import prediction_pb2_grpc
from grpc_overhead.processes import ServiceProcess, offline_env
from harness.ground_truth.pipeline import through_collector

pytestmark = pytest.mark.e2e

CALLS = 5
RUNS = ("features", "noise")


def _requests(run: str) -> list:
    rng = np.random.default_rng(7)
    if run == "features":
        return [make_request(rng, 200, 16, request_id=str(i)) for i in range(CALLS)]
    return [make_image_request(rng, 60_000, request_id=str(i)) for i in range(CALLS)]


def _zlib_ratios(payload: bytes) -> dict[str, float]:
    return {
        "gzip": len(zlib.compress(payload, wbits=31)) / len(payload),
        "deflate": len(zlib.compress(payload)) / len(payload),
    }


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """(the stopped store, {run: the sampled (first) request's bytes})."""
    store = tmp_path_factory.mktemp("compress") / "store"
    first: dict[str, bytes] = {}
    with through_collector(store) as port, pytest.MonkeyPatch.context() as patch:
        endpoint = f"http://127.0.0.1:{port}"
        service_env = offline_env(
            OTEL_SERVICE_NAME="predictor",
            OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
            **{COMPRESSIBILITY_INTERVAL_S: "3600"},
        )
        pipeline = SpanPipeline(
            exporter=CallRecordOTLPExporter(endpoint=endpoint, insecure=True),
            export_interval_ms=100,
        )
        patch.setenv(COMPRESSIBILITY_INTERVAL_S, "3600")
        # This process's budget, unspent by the tests that ran in it before.
        patch.setattr(sampling, "_budget", [0, 0])
        try:
            with ServiceProcess(["--workers", "2"], env=service_env) as service:
                for run in RUNS:
                    patch.setenv(RUN_ID, run)  # read when the channel is instrumented
                    with grpc.insecure_channel(service.target) as plain:
                        channel = instrument_channel(plain, service.target, pipeline=pipeline)
                        stub = prediction_pb2_grpc.PredictorStub(channel)
                        requests = _requests(run)
                        first[run] = requests[0].SerializeToString()
                        for request in requests:
                            stub.Predict(request, timeout=30)
        finally:
            assert pipeline.force_flush(30)
            pipeline.shutdown()
    yield store, first


def test_sampled_requests_carry_zlibs_ratio_and_the_rest_none(stored):
    store_dir, first = stored
    with open_store(str(store_dir)) as store:
        for run in RUNS:
            found = store.query(
                "SELECT request_sample_bytes AS size, request_gzip_ratio AS gzip,"
                " request_deflate_ratio AS deflate, request_gzip_compress_ns_per_mb AS cost"
                " FROM grpc_call_phases WHERE run_id = {run:String} ORDER BY start_time",
                {"run": run},
            )
            assert len(found) == CALLS
            sampled = found[found["size"].notna()]
            assert len(sampled) == 1, found  # one per method per interval: the first
            assert int(sampled["size"].iloc[0]) == len(first[run])
            expected = _zlib_ratios(first[run])
            assert sampled["gzip"].iloc[0] == pytest.approx(expected["gzip"], rel=1e-9)
            assert sampled["deflate"].iloc[0] == pytest.approx(expected["deflate"], rel=1e-9)
            assert sampled["cost"].iloc[0] > 0
            assert found[found["size"].isna()][["gzip", "deflate", "cost"]].isna().all().all()
        raw = store.query(
            "SELECT countIf(request_sample_bytes = -1) AS unsampled,"
            " countIf(request_gzip_ratio = -1) AS neutral FROM grpc_calls FINAL"
        )
        assert int(raw["unsampled"].iloc[0]) == int(raw["neutral"].iloc[0]) == 2 * (CALLS - 1)


def test_by_method_gives_the_measured_ratios(stored):
    store_dir, first = stored
    with open_store(str(store_dir)) as store:
        for run in RUNS:
            found = compressibility.by_method(store, CallFilters(run_id=run).at_rest())
            rows = found[found["direction"] == "request"].set_index("algorithm")
            expected = _zlib_ratios(first[run])
            for algorithm in ("gzip", "deflate"):
                row = rows.loc[algorithm]
                assert row["method"] == "Predict" and row["samples"] == 1
                assert row["ratio_p50"] == pytest.approx(expected[algorithm], rel=1e-9)
                assert row["message_bytes_p50"] == len(first[run])
                assert row["compress_ns_per_mb_p50"] > 0 < row["decompress_ns_per_mb_p50"]
        assert rows.loc["gzip"]["ratio_p50"] > 0.99  # noise: compression makes it no smaller
        features = compressibility.by_method(store, CallFilters(run_id="features").at_rest())
        assert (
            features.set_index(["direction", "algorithm"]).loc[("request", "gzip")]["ratio_p50"]
            < 0.9
        )
        # The service sampled its first response (the first run's first call) and no other.
        everything = compressibility.by_method(store, CallFilters().at_rest())
        responses = everything[everything["direction"] == "response"]
        assert set(responses["algorithm"]) == {"gzip", "deflate"}
        assert set(responses["samples"]) == {1}

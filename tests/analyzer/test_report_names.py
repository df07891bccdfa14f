"""``report``'s filters take the names ``report`` prints, and an OpenTelemetry service name."""

from __future__ import annotations

import json

import pytest

from tests.analyzer import seed
from tests.analyzer.seed import Truth, module_store_fixture  # noqa: F401
from tests.analyzer.test_report import calls_with_statuses, run_cli


@pytest.mark.e2e
def test_filters_take_the_names_the_report_prints(module_store):
    store = seed.clear(module_store)
    calls_with_statuses(store)
    seed.insert_spans(
        store,
        [
            *seed.synthetic_call(Truth(), service="other.Scorer", method="Predict"),
            *seed.synthetic_call(Truth(), service="legacy.Predictor", method="Get"),
        ],
    )
    directory = store.directory
    store.close()

    def report(*args: str) -> dict:
        result = run_cli("--store", directory, "--format", "json", *args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    printed = report()
    names = [f"{m['service']}/{m['method']}" for m in printed["methods"]]
    assert "predict.Predictor/Predict" in names
    for typed in ("predict.Predictor/Predict", "/predict.Predictor/Predict", "Predictor/Predict"):
        found = report("--method", typed)
        assert [(m["service"], m["method"]) for m in found["methods"]] == [
            ("predict.Predictor", "Predict")
        ], typed
    # The method alone: every service's method of that name (as before).
    assert {m["service"] for m in report("--method", "Predict")["methods"]} == {
        "predict.Predictor",
        "other.Scorer",
    }
    assert report("--service", "predict.Predictor", "--method", "Predict")["calls"] == 6

    # --otel-service: the OpenTelemetry service of either side, not the gRPC service.
    checked = report("--otel-service", "health-checker")
    assert [m["method"] for m in checked["methods"]] == ["Health"]
    assert report("--otel-service", "prediction-service")["calls"] == 10

    for args, message in (
        (("--method", "Predicts"), "no calls of method 'Predicts'; known methods: "),
        (("--method", "nope.Svc/Predict"), "no calls of gRPC service 'nope.Svc'"),
        (("--service", "Predictor"), "'Predictor' is ambiguous: legacy.Predictor, predict"),
        (("--otel-service", "predict.Predictor"), "no calls from or to the OpenTelemetry"),
        # An OTEL_SERVICE_NAME given as the gRPC service: the option that takes it.
        (("--service", "health-checker"), "OpenTelemetry service name: --otel-service health"),
    ):
        result = run_cli("--store", directory, *args)
        assert result.returncode == 2, result.stdout
        assert message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert "predict.Predictor/Predict" in run_cli("--store", directory, "--method", "x").stderr

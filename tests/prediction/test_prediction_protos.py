from __future__ import annotations

from pathlib import Path

import pytest

from grpc_overhead.prediction.protos import generate
from grpc_overhead.prediction.protos import prediction_pb2 as pb
from grpc_overhead.prediction.protos import prediction_pb2_grpc as pb_grpc


@pytest.mark.unit
def test_generated_files_are_current(tmp_path: Path) -> None:
    fresh = generate.generate(tmp_path)
    assert sorted(path.name for path in fresh) == sorted(generate.GENERATED)
    for path in fresh:
        committed = generate.PROTO_DIR / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"{path.name} is stale: run python -m grpc_overhead.prediction.protos.generate"
        )


@pytest.mark.unit
def test_generated_imports_use_the_package_namespace() -> None:
    grpc_module = (generate.PROTO_DIR / "prediction_pb2_grpc.py").read_text()
    assert "from grpc_overhead.prediction.protos import prediction_pb2" in grpc_module
    assert "\nimport prediction_pb2" not in grpc_module
    assert pb_grpc.PredictorStub is not None


@pytest.mark.unit
def test_service_shape() -> None:
    service = pb.DESCRIPTOR.services_by_name["Predictor"]
    assert service.full_name == "grpc_overhead.prediction.v1.Predictor"
    shapes = {
        method.name: (method.client_streaming, method.server_streaming)
        for method in service.methods
    }
    assert shapes == {
        "Predict": (False, False),
        "PredictStream": (True, True),
        "PredictBatch": (False, False),
        "PredictChunks": (False, True),
        "PredictUpload": (True, False),
    }
    # registered under a unique name in the process-wide descriptor pool
    assert pb.DESCRIPTOR.name == "grpc_overhead/prediction/protos/prediction.proto"


@pytest.mark.unit
def test_check_mode_reports_current(capsys) -> None:
    assert generate.main(["--check"]) == 0
    assert "current" in capsys.readouterr().out

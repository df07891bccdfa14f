"""The two distributions as pip builds them: the light one stays light, neither ships the other.

Wheels are built from a copy of the tracked files (nothing is written into the
checkout) with this venv's setuptools, so no registry is needed.
"""

from __future__ import annotations

import email.parser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
LIGHT = "instrumented-service/instrumentation"
HEAVY = ("chdb", "pyarrow", "pandas", "numpy", "plotly", "streamlit", "clickhouse-driver")


def _wheel(source: Path, out: Path) -> zipfile.ZipFile:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    [wheel] = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def _copy_tracked(destination: Path) -> Path:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        if (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


def _metadata(wheel: zipfile.ZipFile) -> email.message.Message:
    [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(wheel.read(name).decode())


def _requirement_names(metadata: email.message.Message) -> list[str]:
    names = []
    for requirement in metadata.get_all("Requires-Dist") or []:
        if "extra ==" in requirement:
            continue
        name = requirement.split(";")[0]
        for separator in "<>=![ (":
            name = name.split(separator)[0]
        names.append(name.strip().lower())
    return names


def test_the_instrumentation_wheel_is_light_and_holds_only_its_package(tmp_path: Path) -> None:
    source = _copy_tracked(tmp_path / "tree") / LIGHT
    wheel = _wheel(source, tmp_path / "wheel")
    metadata = _metadata(wheel)
    assert metadata["Name"] == "grpc-overhead-instrumentation"
    requirements = _requirement_names(metadata)
    assert "grpcio" in requirements and "opentelemetry-sdk" in requirements
    assert [
        n
        for n in requirements
        if n != "grpcio" and n != "protobuf" and not n.startswith("opentelemetry-")
    ] == []
    assert not set(requirements) & set(HEAVY)
    files = [n for n in wheel.namelist() if ".dist-info/" not in n]
    assert files and all(n.startswith("grpc_overhead/instrumentation/") for n in files)
    assert "grpc_overhead/__init__.py" not in files  # a namespace package
    entry_points = wheel.read(
        next(n for n in wheel.namelist() if n.endswith("entry_points.txt"))
    ).decode()
    assert "[opentelemetry_instrumentor]" in entry_points
    assert "grpc_overhead.instrumentation.instrumentor:GrpcOverheadInstrumentor" in entry_points


def test_the_main_wheel_depends_on_the_instrumentation_and_does_not_ship_it(
    tmp_path: Path,
) -> None:
    wheel = _wheel(_copy_tracked(tmp_path / "tree"), tmp_path / "wheel")
    metadata = _metadata(wheel)
    assert metadata["Name"] == "grpc-overhead"
    assert "grpc-overhead-instrumentation" in _requirement_names(metadata)
    files = [n for n in wheel.namelist() if ".dist-info/" not in n]
    assert not [n for n in files if n.startswith("grpc_overhead/instrumentation/")]
    assert "grpc_overhead/__init__.py" not in files
    for module in (
        "__main__.py",
        "cli/__init__.py",
        "processes/__init__.py",
        "processes/children.py",
        "analyzer/__init__.py",
        "app/main.py",
        "collector/runner.py",
        "prediction/protos/prediction.proto",
        "load_generator/runner.py",
    ):
        assert f"grpc_overhead/{module}" in files, module

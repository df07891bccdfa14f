"""The build helper: pinned manifest, no-op rebuilds, a clear error without Go."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from grpc_overhead.collector import CollectorUnavailable, build_collector, collector_binary, runner

COLLECTOR_DIR = runner.collector_dir()


@pytest.mark.e2e
def test_binary_reports_pinned_components(collector_bin: Path) -> None:
    out = subprocess.run(
        [str(collector_bin), "components"], capture_output=True, text=True, check=True
    ).stdout
    assert "clickhouseexporter v0.161.0" in out
    assert "healthcheckextension v0.161.0" in out
    assert "otlpreceiver v0.161.0" in out
    assert "envprovider v1.67.0" in out


@pytest.mark.e2e
def test_second_build_is_a_noop(collector_bin: Path) -> None:
    builder = COLLECTOR_DIR / "dist" / "bin" / "builder"
    before = (collector_bin.stat().st_mtime_ns, builder.stat().st_mtime_ns)
    started = time.monotonic()
    assert build_collector(echo=False) == collector_bin
    elapsed = time.monotonic() - started
    assert (collector_bin.stat().st_mtime_ns, builder.stat().st_mtime_ns) == before
    assert elapsed < 5, f"no-op build took {elapsed:.1f} s"
    out = subprocess.run(
        ["bash", str(COLLECTOR_DIR / "build.sh")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "up to date" in out
    assert "building" not in out


def _copy_build_inputs(tmp_path: Path) -> Path:
    for name in ("build.sh", "manifest.yaml"):
        shutil.copy2(COLLECTOR_DIR / name, tmp_path / name)
    return tmp_path


@pytest.mark.unit
def test_build_sh_without_go_exits_2_with_hint(tmp_path: Path) -> None:
    folder = _copy_build_inputs(tmp_path)
    result = subprocess.run(
        ["bash", str(folder / "build.sh")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env={**os.environ, "GRPC_OVERHEAD_GO": str(tmp_path / "no-such-go"), "CI": "true"},
        check=False,
    )
    assert result.returncode == 2
    assert "Go not found" in result.stderr
    assert "send OTLP straight to the intake on port 4327" in result.stderr
    assert not (folder / "dist").exists()


@pytest.mark.unit
def test_build_collector_without_go_raises_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "_HERE", _copy_build_inputs(tmp_path))
    monkeypatch.delenv(runner.ENV_BIN, raising=False)
    monkeypatch.setenv("GRPC_OVERHEAD_GO", str(tmp_path / "no-such-go"))
    with pytest.raises(CollectorUnavailable, match="send OTLP straight to the intake"):
        build_collector(echo=False)


@pytest.mark.unit
def test_binary_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "otelcol"
    monkeypatch.setenv(runner.ENV_BIN, str(fake))
    assert collector_binary() == fake
    with pytest.raises(CollectorUnavailable, match=runner.ENV_BIN):
        build_collector(echo=False)  # nothing is built for an override
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert build_collector(echo=False) == fake


@pytest.mark.unit
def test_default_binary_is_in_dist(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runner.ENV_BIN, raising=False)
    assert collector_binary() == COLLECTOR_DIR / "dist" / "otelcol-grpc-overhead"

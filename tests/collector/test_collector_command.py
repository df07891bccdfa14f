"""``grpc-overhead collector``: argument handling and user errors without tracebacks."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpc_overhead.cli import collector as command
from grpc_overhead.collector import config_path


@pytest.mark.unit
def test_config_prints_shipped_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(["config", "embedded"]) == 0
    assert capsys.readouterr().out == config_path("embedded").read_text()


@pytest.mark.unit
def test_config_unknown_name_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(["config", "prod"]) == 1
    err = capsys.readouterr().err
    assert "unknown collector config 'prod'" in err
    assert "embedded, clickhouse" in err
    assert "Traceback" not in err


@pytest.mark.unit
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", "--otlp-port", "99999"], "port out of range"),
        (["run", "--health-port", "abc"], "not a port number"),
        (["run", "--intake", "nohostport"], "expected HOST:PORT"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ],
)
def test_usage_errors_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert command.main(argv) == 2
    assert expected in capsys.readouterr().err


@pytest.mark.unit
def test_run_with_missing_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert command.main(["run", "--config", str(tmp_path / "nope.yaml")]) == 1
    err = capsys.readouterr().err
    assert "neither a shipped config" in err
    assert "Traceback" not in err


@pytest.mark.unit
def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(["--help"]) == 0
    assert "build" in capsys.readouterr().out


@pytest.mark.e2e
def test_validate_command(collector_bin: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert command.main(["validate", "--config", "clickhouse"]) == 0
    assert "clickhouse.yaml: valid" in capsys.readouterr().out

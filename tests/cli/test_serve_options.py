"""Which ports serve takes OTLP on, from its options (the decision; the processes: e2e tests)."""

from __future__ import annotations

import importlib

import pytest

from grpc_overhead.cli.serve import OtlpPorts, parser

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], OtlpPorts(4327, 4317, standard_required=False, http=4318)),  # plain serve: all
        (["--otlp-port", "0"], OtlpPorts(0, None, standard_required=False)),  # wired: alone
        (["--otlp-port", "5000"], OtlpPorts(5000, None, standard_required=False)),
        (["--standard-otlp-port", "off"], OtlpPorts(4327, None, False, http=4318)),
        (["--otlp-port", "0", "--standard-otlp-port", "4317"], OtlpPorts(0, 4317, True)),
        (["--standard-otlp-port=4400"], OtlpPorts(4327, 4400, True, http=4318)),
        (["--otlp-port", "4317"], OtlpPorts(4317, None, standard_required=False)),  # same port
        # OTLP/HTTP: the same rules on 4318; asked for, it is required (0: a free one)
        (["--otlp-http-port", "off"], OtlpPorts(4327, 4317, False, http=None, http_required=True)),
        (["--otlp-http-port", "0"], OtlpPorts(4327, 4317, False, http=0, http_required=True)),
        (["--otlp-port", "0", "--otlp-http-port", "4400"], OtlpPorts(0, None, False, 4400, True)),
    ],
)
def test_standard_port_decision(argv: list[str], expected: OtlpPorts) -> None:
    assert OtlpPorts.from_args(parser().parse_args(argv)) == expected


@pytest.mark.parametrize("value", ["0", "70000", "x", ""])
def test_bad_standard_port_values_are_usage_errors(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--standard-otlp-port", value])
    assert exited.value.code == 2
    assert "--standard-otlp-port" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["70000", "-1", "x", ""])
def test_bad_otlp_http_port_values_are_usage_errors(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(["--otlp-http-port", value])
    assert exited.value.code == 2
    assert "--otlp-http-port" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["serve", "app", "demo"])
@pytest.mark.parametrize("value", ["99999", "-1", "x"])
def test_port_options_out_of_range_are_usage_errors(
    command: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """99999 was a traceback (OverflowError from bind) for app ports, and gRPC quietly
    listened on 34463 (99999 - 65536) for --otlp-port."""
    module = importlib.import_module(f"grpc_overhead.cli.{command}")
    options = {"serve": ["--otlp-port", "--app-port", "--http-port"], "app": ["--port"]}
    for option in options.get(command, ["--app-port"]):
        with pytest.raises(SystemExit) as exited:
            module.parser().parse_args([option, value])
        assert exited.value.code == 2
        assert f"argument {option}:" in capsys.readouterr().err

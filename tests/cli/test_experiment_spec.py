"""Experiment files: matrix expansion, defaults, exclusions, and every refusal in one line."""

from __future__ import annotations

import pytest

from grpc_overhead.cli.experiment_spec import SpecError, load, parse

pytestmark = pytest.mark.unit


def test_the_matrix_expands_to_every_combination_minus_the_excluded() -> None:
    experiment = parse(
        {
            "name": "tls-compression",
            "calls": 50,
            "matrix": {"compression": ["none", "gzip", "zstd"], "tls": [False, True]},
            "exclude": [{"compression": "zstd", "tls": True}],
        }
    )
    assert experiment.name == "tls-compression"
    assert len(experiment.cells) == 5
    assert [cell.index for cell in experiment.cells] == [0, 1, 2, 3, 4]
    first = experiment.cells[0]
    assert first.varied == {"compression": "none", "tls": False}
    assert first.config["calls"] == 50  # top-level settings reach every cell
    assert first.config["concurrency"] == 8  # defaults fill the rest
    assert first.label() == "compression=none, tls=false"
    assert {"compression": "zstd", "tls": True} not in [cell.varied for cell in experiment.cells]


def test_no_matrix_is_one_cell() -> None:
    experiment = parse({"calls": 10, "transport": "rest"}, default_name="solo")
    assert experiment.name == "solo" and len(experiment.cells) == 1
    assert experiment.cells[0].config["transport"] == "rest"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], "must be a mapping"),
        ({"calsl": 5}, "unknown setting 'calsl'"),
        ({"matrix": {"concurrency": [1, "x"]}}, "matrix.concurrency[1]: expected an integer >= 1"),
        ({"matrix": {"concurrency": []}}, "matrix.concurrency: expected a non-empty list"),
        ({"matrix": {"concurrency": [1, 1]}}, "listed twice"),
        ({"concurrency": 2, "matrix": {"concurrency": [1]}}, "both at the top and in the matrix"),
        ({"tls": "yes"}, "tls: expected true or false"),
        ({"compression": "brotli"}, "expected one of none, gzip"),
        ({"duration": 0}, "duration: expected a number > 0"),
        ({"name": "a b"}, "name: expected letters"),
        ({"matrix": {"tls": [True]}, "exclude": [{"mode": "unary"}]}, "not a matrix setting"),
        ({"matrix": {"tls": [True]}, "exclude": [{"tls": True}]}, "leaves no cell"),
        ({"matrix": {"transport": ["grpc", "rest"]}, "mode": "stream"}, "cell 1 (transport=rest)"),
        ({"matrix": {"calls": list(range(1, 30)), "seed": list(range(30))}}, "at most 500"),
        ({"rounds": 0}, "rounds: expected an integer 1..50, got 0"),
        ({"rounds": "three"}, "rounds: expected an integer 1..50"),
        ({"matrix": {"tls": [False, True]}, "baseline": {"mode": "unary"}}, "not a matrix"),
        ({"matrix": {"tls": [False, True]}, "baseline": "tls"}, "baseline: expected a mapping"),
        ({"matrix": {"workers": [1, 2]}, "baseline": {"workers": 3}}, "not among the matrix"),
        ({"expect": {"phase": "total"}}, "expect: expected {saving_us"),
        ({"expect": {"saving_us": -4}}, "expect.saving_us: expected a number > 0"),
        ({"expect": {"saving_us": 4, "phase": "wire"}}, "expect.phase: 'wire' is not a phase"),
        ({"expect": {"saving_us": 4, "p": 99}}, "expect: unknown key 'p'"),
    ],
)
def test_refusals_name_the_setting_and_the_reason(document, message: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse(document)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_file_that_is_not_yaml_is_refused_with_its_line(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("calls: 5\nmatrix: {tls: [true, false]\n")
    with pytest.raises(SpecError, match=r"bad.yaml: not valid YAML \(line \d+"):
        load(path)
    with pytest.raises(SpecError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    binary = tmp_path / "latin1.yaml"
    binary.write_bytes("calls: 5 # réglage\n".encode("latin-1"))  # a traceback before
    with pytest.raises(SpecError, match=r"latin1.yaml: not UTF-8 text \(byte 12\)"):
        load(binary)


def test_the_bundled_experiments_parse() -> None:
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.yaml"))
    assert files, "experiments/ ships the bundled experiments"
    for path in files:
        experiment = load(path)
        assert experiment.cells, path


def test_rounds_baselines_and_expectations() -> None:
    experiment = parse(
        {
            "rounds": 5,
            "matrix": {"bandwidth_kb_s": [None, 5000], "compression": ["none", "gzip"]},
            "baseline": {"compression": "gzip"},
            "expect": {"saving_us": 1500, "phase": "request_network"},
        }
    )
    assert experiment.rounds == 5
    assert experiment.expect is not None and experiment.expect.saving_us == 1500.0
    pairs = {
        cell.label(): getattr(experiment.baseline_of(cell), "label", lambda: None)()
        for cell in experiment.cells
    }
    # each cell against gzip on its own path; the gzip cells are baselines themselves
    assert pairs == {
        "bandwidth_kb_s=off, compression=none": "bandwidth_kb_s=off, compression=gzip",
        "bandwidth_kb_s=off, compression=gzip": None,
        "bandwidth_kb_s=5000, compression=none": "bandwidth_kb_s=5000, compression=gzip",
        "bandwidth_kb_s=5000, compression=gzip": None,
    }
    default = parse({"matrix": {"workers": [1, 2, 4]}})
    assert default.rounds == 5  # the default: five interleaved rounds
    assert [getattr(default.baseline_of(c), "index", None) for c in default.cells] == [None, 0, 0]


def test_copies_make_an_a_a_experiment() -> None:
    experiment = parse({"calls": 10, "matrix": {"copy": [1, 2]}})
    first, second = experiment.cells
    assert {**first.config, "copy": 0} == {**second.config, "copy": 0}
    assert experiment.baseline_of(second) is first


def test_rounds_interleave_so_drift_reaches_every_cell() -> None:
    from grpc_overhead.cli.experiment import interleaved

    cells = parse({"matrix": {"workers": [1, 2, 3]}}).cells
    order = [(round_number, cell.index) for round_number, cell in interleaved(cells, 3)]
    assert order == [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0), (2, 0), (2, 1), (2, 2)]

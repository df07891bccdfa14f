"""``experiment`` and ``compare`` as a user runs them: real services, load, intake and chDB."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from grpc_overhead.analyzer.runs import list_runs
from grpc_overhead.analyzer.store import open_store
from tests.cli.experiment_runs import command, run_experiment

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """Two cells that differ by the server's CPU cost per request: 0 vs 5 ms, five rounds
    (the default) of 30 calls each; the costly cell is the baseline, and the cheap one is
    expected to save 4.5 ms of processing."""
    workdir = tmp_path_factory.mktemp("experiment")
    spec = workdir / "cost.yaml"
    spec.write_text(
        "name: cost\ncalls: 30\nconcurrency: 1\nentities: 20\nworkers: 2\n"
        "matrix:\n  model_cost_ms: [0, 5]\nbaseline: {model_cost_ms: 5}\n"
        "expect: {saving_us: 4500, phase: processing}\n"
    )
    store = workdir / "store"
    done = command("experiment", str(spec), "--store", str(store), "--format", "json")
    assert done.returncode == 0, done.stderr
    return store, json.loads(done.stdout)


def test_every_cell_is_a_run_with_its_phases(experiment) -> None:
    store, document = experiment
    assert document["experiment"] == "cost" and document["failed"] == []
    cells = document["cells"]
    assert document["rounds"] == 5
    assert [cell["config"]["model_cost_ms"] for cell in cells] == [0.0, 5.0]
    for cell in cells:
        assert cell["calls"] == 150 and cell["errors"] == 0
        assert [item["calls"] for item in cell["rounds"]] == [30] * 5
        assert [item["round"] for item in cell["rounds"]] == [0, 1, 2, 3, 4]
        assert cell["traced_calls"] == 150  # every call's spans reached the store
        assert cell["calls_per_s"] > 0 and cell["predictions_per_s"] == pytest.approx(
            cell["calls_per_s"] * 20, rel=1e-3
        )
        assert cell["p50_us"] <= cell["p99_us"]
        for phase in ("client_serialize", "request_network", "processing", "total"):
            assert cell["phases"][phase]["calls"] == 150, phase
            low, high = cell["phases"][phase]["ci_us"]
            assert low <= cell["phases"][phase]["p50_us"] <= high, phase
    # interleaved: cell 0, 1 in round 1, then 1, 0, then 0, 1
    first, second = (cell["rounds"] for cell in cells)
    assert first[0]["ended_ns"] <= second[0]["started_ns"]
    assert second[1]["ended_ns"] <= first[1]["started_ns"]
    assert first[2]["started_ns"] <= second[2]["started_ns"]
    cheap, costly = (cell["phases"]["processing"]["p50_us"] for cell in cells)
    # the injected 5 ms of CPU: at least 5 ms of wall time (more on a busy machine)
    assert costly - cheap >= 4_500
    assert document["winners"][0]["metric"] == "calls_per_s"
    assert document["winners"][0]["cell"] == "model_cost_ms=0.0"
    # the phase carrying the difference (its share's wording depends on the machine's noise)
    assert "; processing " in document["explanation"]
    (comparison,) = document["comparisons"]  # the cheap cell against the costly baseline
    assert (comparison["cell"], comparison["baseline_cell"]) == (0, 1)
    assert comparison["phase"] == "total" and comparison["verdict"] == "faster", (
        comparison["summary"],
        [cell["rounds"] for cell in cells],
    )
    assert comparison["ci_us"][0] <= comparison["diff_us"] <= comparison["ci_us"][1] < 0
    assert "paired" in comparison["basis"]
    phases = {item["phase"]: item for item in comparison["phases"]}
    assert phases["processing"]["verdict"] == "faster"
    assert phases["processing"]["ci_us"][0] <= phases["processing"]["diff_us"]
    assert comparison["explained_by"]["phase"] == "processing"
    (expected,) = document["expectation"]
    assert expected["outcome"] == "materialized" and expected["measured_us"] >= 4_500
    assert document["machine"]["before"]["cpus"] == os.cpu_count()
    assert isinstance(document["machine"]["under_load"], bool)
    with open_store(store) as opened:
        runs = list_runs(opened, "cost")
    assert list(runs["run_id"]) == [cell["run_id"] for cell in cells]
    assert list(runs["calls"]) == [150, 150]
    assert [len(json.loads(text)) for text in runs["rounds"]] == [5, 5]
    assert list(runs["under_load"]) == [int(cell["under_load"]) for cell in cells]
    assert "before" in json.loads(runs["machine"].iloc[0])


def test_compare_finds_the_phase_that_differs(experiment) -> None:
    store, document = experiment
    cheap, costly = (cell["run_id"] for cell in document["cells"])
    done = command(
        "compare", cheap, costly, "--store", str(store), "--format", "json", "--resamples", "200"
    )
    assert done.returncode == 0, done.stderr
    (comparison,) = json.loads(done.stdout)["comparisons"]
    processing = comparison["phases"]["processing"]
    # The interval covers the drift between rounds too: on a machine that other work keeps
    # busy the 5 ms task stretches differently per round and it widens, but never to 0.
    assert processing["significant"] and processing["diff_us"] >= 4_500, comparison
    assert processing["verdict"] == "slower" and processing["ci_us"][0] > 0
    assert processing["ci_us"][0] <= processing["diff_us"] <= processing["ci_us"][1]
    assert "5 rounds" in comparison["basis"] and "paired" in comparison["basis"]
    assert comparison["explained_by"]["phase"] == "processing"
    assert comparison["throughput"]["calls_per_s_ratio"] < 1
    table = command("compare", cheap, costly, "--store", str(store))
    assert table.returncode == 0 and "; processing " in table.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path, experiment) -> None:
    store, document = experiment
    spec = tmp_path / "bad.yaml"
    spec.write_text("matrix: {concurrency: [0]}\n")
    done = command("experiment", str(spec), "--store", str(tmp_path / "s"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "grpc-overhead experiment: matrix.concurrency[0]: expected an integer >= 1, got 0"
    )
    missing = command(
        "compare", document["cells"][0]["run_id"], "no-such-run", "--store", str(store)
    )
    assert missing.returncode == 2 and "no calls of run 'no-such-run'" in missing.stderr
    assert "Traceback" not in missing.stderr
    one = command("compare", "only-one", "--store", str(store))
    assert one.returncode == 2 and "at least two runs" in one.stderr


def test_rest_and_grpc_cells_split_into_the_same_phases(tmp_path) -> None:
    """The REST baseline (uvicorn + starlette, requests; OpenTelemetry's HTTP spans plus our
    events) and gRPC, both sending an image: every call of both is assembled with every phase."""
    spec = tmp_path / "rest.yaml"
    spec.write_text(
        "name: rest-vs-grpc\ncalls: 20\nrounds: 1\nconcurrency: 2\npayload: image\n"
        "image_bytes: 20000\n"
        "matrix:\n  transport: [grpc, rest]\n  rest_body: [json, binary]\n"
        "exclude:\n  - {transport: grpc, rest_body: binary}\n"
    )
    done = command("experiment", str(spec), "--store", str(tmp_path / "store"), "--format", "json")
    assert done.returncode == 0, done.stderr
    cells = json.loads(done.stdout)["cells"]
    assert [(c["config"]["transport"], c["config"]["rest_body"]) for c in cells] == [
        ("grpc", "json"),
        ("rest", "json"),
        ("rest", "binary"),
    ]
    for cell in cells:
        assert cell["errors"] == 0 and cell["traced_calls"] == 20, cell
        assert cell["predictions_per_s"] == pytest.approx(cell["calls_per_s"], rel=1e-3)
        for phase in (
            "client_serialize",
            "request_network",
            "server_queue",
            "request_deserialize",
            "processing",
            "response_serialize",
            "response_network",
            "client_deserialize",
            "total",
            "server_duration",
        ):
            assert cell["phases"][phase]["calls"] == 20, (cell["config"]["transport"], phase)
    _, base64_cell, binary_cell = cells
    # base64 inside JSON costs the client encoding time that raw bytes do not
    assert (
        base64_cell["phases"]["client_serialize"]["p50_us"]
        > 5 * binary_cell["phases"]["client_serialize"]["p50_us"]
    )


def test_a_cell_can_run_over_a_slowed_path(tmp_path) -> None:
    """``latency_ms`` puts a real toxiproxy between load and service: each direction's
    network phase carries the injected delay, the server's phases do not."""
    spec = tmp_path / "path.yaml"
    spec.write_text(
        "name: path\ncalls: 10\nrounds: 1\nconcurrency: 1\nentities: 10\nlatency_ms: 15\n"
    )
    done = command("experiment", str(spec), "--store", str(tmp_path / "store"), "--format", "json")
    assert done.returncode == 0, done.stderr
    (cell,) = json.loads(done.stdout)["cells"]
    phases = cell["phases"]
    assert phases["request_network"]["p50_us"] + phases["server_queue"]["p50_us"] >= 14_000
    assert phases["response_network"]["p50_us"] >= 14_000
    assert phases["processing"]["p50_us"] < 10_000


def test_an_a_a_experiment_finds_no_difference(tmp_path) -> None:
    """The same cell twice (``copy: [1, 2]``), five interleaved rounds: no measurable
    difference on the total and on every phase, and a predicted saving that does not show."""
    document = run_experiment(
        tmp_path,
        "name: a-a\ncalls: 100\nconcurrency: 2\nentities: 20\nworkers: 2\n"
        "matrix:\n  copy: [1, 2]\nexpect: {saving_us: 300}\n",
    )
    (comparison,) = document["comparisons"]
    assert comparison["verdict"] == "no measurable difference", comparison["summary"]
    assert len(comparison["phases"]) >= 10
    for phase in comparison["phases"]:
        assert phase["verdict"] == "no measurable difference", phase
        low, high = phase["ci_us"]
        assert low <= phase["diff_us"] <= high
    assert "no measurable difference" in comparison["summary"]
    (expected,) = document["expectation"]
    assert expected["outcome"] == "did not materialize"
    table = command(
        "compare",
        comparison["baseline_run_id"],
        comparison["run_id"],
        "--store",
        str(tmp_path / "store"),
        "--format",
        "json",
    )
    assert table.returncode == 0, table.stderr
    (again,) = json.loads(table.stdout)["comparisons"]
    assert again["phases"]["total"]["verdict"] == "no measurable difference"

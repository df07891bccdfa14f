"""``grpc-overhead findings`` as a user runs it: JSON contract, table, and clear errors."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from grpc_overhead.analyzer.findings import Checked, Finding, Findings
from grpc_overhead.analyzer.findings.advice import EXPERIMENTS, VERIFY
from grpc_overhead.cli import findings as command
from grpc_overhead.cli import usage
from grpc_overhead.cli.experiment_spec import parse
from tests.analyzer import seed
from tests.analyzer.seed import BASE_NS, MS, US, Truth, analysis_store

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A closed store: 240 calls of run "pool" waiting ~3 ms for a worker."""
    directory = tmp_path_factory.mktemp("findings") / "store"
    spans = []
    for index in range(240):
        wait = 3 * MS + (index * 7919) % (400 * US)
        truth = replace(
            Truth(), start=BASE_NS + index * 10 * MS, pool_wait=wait, server_queue=wait + 60 * US
        )
        spans += seed.synthetic_call(truth, run_id="pool")
    with analysis_store(directory) as store:
        seed.insert_spans(store, spans)
    return str(directory)


def run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = command.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_json_ranks_the_pool_first(store_dir: str, capsys: pytest.CaptureFixture) -> None:
    code, out, err = run(capsys, "--store", store_dir, "--run", "pool", "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    top = document["findings"][0]
    assert top["kind"] == "server_pool_saturated" and top["method"] == "Predict"
    assert top["saving_us"]["p50"] == pytest.approx(3100, rel=0.1)
    assert "max_workers" in top["action"] and "workers:" in top["verify"]
    assert {entry["kind"] for entry in document["checked"]} >= {"post_processing", "tail"}


def test_table_names_the_finding_and_what_was_checked() -> None:
    finding = Finding(
        kind="server_pool_saturated",
        service="predict.Predictor",
        method="Predict",
        instance="s-1",
        phases=("pool_wait",),
        calls=240,
        evidence={},
        saving_p50_us=3100.4,
        saving_p99_us=3400,
        saving_basis="pool_wait's p50/p99",
        confidence="high",
        action="max_workers",
        verify="experiment\nworkers: [4, 32]",
    )
    table = command.render_table(Findings([finding], [Checked("tail", "tail: p99 1.0 x p50")]))
    assert table.startswith(
        "1. server_pool_saturated  predict.Predictor/Predict on s-1  saves 3,100 µs at p50, "
        "3,400 µs at p99 (high confidence, 240 calls)\n"
    )
    assert "   verify: experiment\n           workers: [4, 32]\n" in table
    assert table.endswith("Checked, not found:\n  tail: tail: p99 1.0 x p50\n")
    assert "No findings" in command.render_table(Findings([], []))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--store", "/nonexistent/store"], "no store at /nonexistent/store"),
        (["--clickhouse", "clickhouse://127.0.0.1:1/default"], "cannot reach ClickHouse"),
        (["--since", "yesterday"], "bad --since 'yesterday'"),
        (["--since", "1h", "--until", "2h"], "is not before --until"),
        (["--window", "0"], "bad --window 0"),
        (["--run", "no-such-run"], "no-such-run"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    store_dir: str, capsys: pytest.CaptureFixture, argv: list[str], message: str
) -> None:
    if "--store" not in argv and "--clickhouse" not in argv:
        argv = ["--store", store_dir, *argv]
    code, out, err = run(capsys, *argv)
    assert code == command.EXIT_USAGE
    assert message in err and "Traceback" not in err and out == ""
    assert err.startswith("grpc-overhead findings: ")


def test_the_command_is_listed() -> None:
    assert "  findings " in usage()


@pytest.mark.parametrize("kind", sorted(EXPERIMENTS))
def test_every_verify_experiment_is_a_valid_file_with_two_cells(kind: str) -> None:
    """What a finding tells the user to run must run: our own experiment parser takes it."""
    name, text = EXPERIMENTS[kind]
    experiment = parse(yaml.safe_load(text))
    assert experiment.name == name and len(experiment.cells) == 2
    assert text in VERIFY[kind]

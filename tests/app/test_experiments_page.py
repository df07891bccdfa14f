"""The Experiments page on a seeded chDB store: cells, winners, the explaining phase, compare."""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.compare import compare
from grpc_overhead.analyzer.runs import RunRecord, create_runs, phase_summary, record_run, run_calls
from grpc_overhead.cli.experiment_report import comparison_json
from tests.analyzer.seed import BASE_NS, MS, US, Truth, insert_spans, synthetic_call
from tests.app.charts import figures, metrics
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit


def seed_experiment(store) -> None:
    """Two cells of 'bw': the limited one's response_network is 3 ms longer, it runs at half
    the throughput; 30 calls each, seeded as spans and recorded as runs from those spans."""
    store.command("DROP TABLE IF EXISTS grpc_runs")
    create_runs(store)
    cells = {"bw-c00": ("free", 250 * US, 1000.0), "bw-c01": ("limited", 3250 * US, 500.0)}
    spans = []
    for run_id, (_, network, _) in cells.items():
        for index in range(30):
            truth = Truth(start=BASE_NS + index * MS, response_network=network + index * US)
            spans += synthetic_call(truth, run_id=run_id)
    insert_spans(store, spans)
    frames = {run_id: run_calls(store, run_id) for run_id in cells}
    # the limited cell against the free one, as the experiment command records it
    (against,) = compare(frames, resamples=300)
    labels = {"bw-c00": (0, "path=free"), "bw-c01": (1, "path=limited")}
    comparisons = {"bw-c00": {}, "bw-c01": comparison_json(against, labels)}
    for cell, (run_id, (path, _, rate)) in enumerate(cells.items()):
        phases = phase_summary(frames[run_id])
        record_run(
            store,
            RunRecord(
                run_id=run_id,
                experiment="bw",
                invocation="bw-1",
                cell=cell,
                config={"path": path, "calls": 30},
                started_ns=BASE_NS,
                ended_ns=BASE_NS + 30 * MS,
                calls=30,
                errors=0,
                calls_per_s=rate,
                predictions_per_s=rate * 200,
                p50_us=phases["total"]["p50_us"],
                p99_us=phases["total"]["p50_us"] * 2,
                phases=phases,
                comparison=comparisons[run_id],
                under_load=cell == 1,
            ),
        )


def test_cells_winners_and_the_phase_that_explains_them(served_store):
    seed_experiment(served_store)
    at = run_page("experiments")
    assert not at.exception and not at.error
    shown = metrics(at)
    assert shown["Cells"] == "2" and shown["Calls"] == "60"
    winners = " ".join(item.value for item in at.markdown)
    assert "calls/s: path=free wins with 1,000 calls/s, 2.00x above path=limited" in winners
    explanation = at.info[0].value
    assert explanation.startswith("path=limited takes 3,000 µs longer than path=free")
    assert "response_network explains most of it (+3,000 µs, 100% of it)" in explanation
    assert "1 of 2 cells ran on a busy machine" in at.warning[0].value
    # the verdict recorded with the cells: the limited path slower, response_network moved
    against = at.dataframe[0].value
    assert list(against["cell"]) == ["path=limited"] and list(against["baseline"]) == ["path=free"]
    assert against["verdict"].iloc[0] == "slower"
    assert against["phase that moved"].iloc[0] == "response_network"
    phases = at.dataframe[1].value.set_index("phase")
    assert phases.loc["response_network", "verdict"] == "slower"
    assert phases.loc["processing", "verdict"] == "no measurable difference"
    cells = at.dataframe[2].value
    assert list(cells["cell"]) == ["path=free", "path=limited"]
    assert list(cells["busy machine"]) == ["", "yes"]
    charts = figures(at)
    assert {
        "experiments_throughput",
        "experiments_latency",
        "experiments_phases",
        "experiments_verdicts",
    } <= set(charts)
    # the two-run compare: the limited run against the free one
    assert "bw-c01 is slower" in at.info[1].value and "response_network" in at.info[1].value
    compared = at.dataframe[3].value.set_index("phase")
    assert compared.loc["response_network", "verdict"] == "slower"
    assert compared.loc["processing", "verdict"] == "no measurable difference"
    assert at.query_params["experiment"] == "bw"


def test_an_empty_store_says_how_to_run_an_experiment(served_store):
    served_store.command("DROP TABLE IF EXISTS grpc_runs")
    at = run_page("experiments")
    assert not at.exception
    assert "grpc-overhead experiment" in at.info[0].value

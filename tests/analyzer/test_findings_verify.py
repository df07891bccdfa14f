"""Every verify step that names an experiment file gives one ``grpc-overhead experiment``
accepts: two cells, without and with the change."""

from __future__ import annotations

import pytest
import yaml

from grpc_overhead.analyzer.findings import advice
from grpc_overhead.cli import experiment_spec

pytestmark = pytest.mark.unit


def experiment_of(verify: str) -> experiment_spec.Experiment:
    text = verify.split(".yaml, with:\n", 1)[1].split("then `grpc-overhead compare`", 1)[0]
    return experiment_spec.parse(yaml.safe_load(text))


@pytest.mark.parametrize("kind", sorted(advice.EXPERIMENTS))
def test_each_kind_experiment_is_a_valid_two_cell_experiment(kind):
    assert len(experiment_of(advice.VERIFY[kind]).cells) == 2


def test_the_upload_experiment_is_sized_and_limited_like_the_calls():
    # 209 KB requests on a path fitted at 400,000 µs/MB (2.5 MB/s).
    experiment = experiment_of(advice.upload_experiment(209_000, 400_000))
    limits = sorted(cell.config.get("bandwidth_kb_s") or 0 for cell in experiment.cells)
    assert limits == [0, 2500]
    assert {cell.config["entities"] for cell in experiment.cells} == {round(209_000 / 140)}


def test_sized_experiments_carry_the_predicted_saving_against_the_service_as_it_is():
    experiment = experiment_of(advice.upload_experiment(209_000, 400_000, 3_400.4))
    assert experiment.expect is not None and experiment.expect.saving_us == 3_400.0
    assert experiment.expect.phase == "total"
    free, limited = experiment.cells
    assert experiment.baseline_of(free) is limited  # the path as it is now
    assert experiment.baseline_of(limited) is None
    from grpc_overhead.analyzer.findings.compression import HELP, _verify

    costs = experiment_of(_verify("compression_costs_more", "request", 50_000, 100.0, 900.0))
    none, gzip = costs.cells
    assert costs.baseline_of(none) is gzip and costs.expect.saving_us == 900.0
    helps = experiment_of(_verify(HELP, "request", 50_000, 5e5, 2_000.0))
    none, gzip = helps.cells
    assert helps.baseline_of(gzip) is none and helps.expect.saving_us == 2_000.0
    assert {cell.config["bandwidth_kb_s"] for cell in helps.cells} == {2000}

"""An experiment's connections: they stay where a balancer put them unless they age.

It counts connections and calls, not timings, so it runs on the workers beside other
tests rather than in the timing part (``TIMING_FILES``), where the rest of the experiment
tests judge phases against each other."""

from __future__ import annotations

import pytest

from tests.cli.experiment_runs import run_experiment

pytestmark = pytest.mark.e2e


def test_instances_behind_one_address_stay_pinned_without_a_connection_age(tmp_path) -> None:
    """DoorDash's case: three instances behind one balancer address, two channels. Without
    a connection age each round makes exactly its two connections (they stay where they
    landed); with one, clients reconnect and the balancer sees many more."""
    pinned, recycled = run_experiment(
        tmp_path,
        "name: age\nrounds: 2\nduration: 3\nconcurrency: 4\nchannels: 2\ninstances: 3\n"
        "one_address: true\nworkers: 2\nentities: 10\nmatrix:\n  max_connection_age_s: [null, 1]\n",
    )["cells"]
    assert sum(pinned["connections"].values()) == 4  # 2 channels x 2 rounds, never recycled
    assert sum(recycled["connections"].values()) > 6
    for cell in (pinned, recycled):
        assert cell["errors"] == 0 and len(cell["instances"]) == 2
        assert all(len(calls) == 3 for calls in cell["instances"])  # idle instances count too
        assert sum(map(sum, cell["instances"])) == cell["traced_calls"] == cell["calls"]
        assert cell["imbalance"] >= 1.0
    # two connections reach at most two of the three instances: one gets nothing per round
    assert all(calls[-1] == 0 for calls in pinned["instances"])
    assert pinned["imbalance"] >= 1.5

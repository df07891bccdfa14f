"""grpc_runs on a real chDB store: recorded, replaced, listed; and the experiment insights."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from grpc_overhead.analyzer.insights import experiments as insights
from grpc_overhead.analyzer.runs import (
    RunRecord,
    create_runs,
    list_runs,
    phase_summary,
    record_run,
)
from grpc_overhead.analyzer.store import open_store

pytestmark = pytest.mark.unit


def _record(
    run_id: str, cell: int, compression: str, calls_per_s: float, total: float, network: float
) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        experiment="exp",
        invocation="exp-1",
        cell=cell,
        config={"compression": compression, "calls": 100, "tls": False},
        started_ns=1_700_000_000_000_000_000 + cell,
        ended_ns=1_700_000_001_000_000_000 + cell,
        calls=100,
        errors=cell,
        calls_per_s=calls_per_s,
        predictions_per_s=calls_per_s * 200,
        p50_us=total,
        p99_us=total * 3,
        phases={
            "total": {"p50_us": total, "mean_us": total},
            "processing": {"p50_us": 300.0, "mean_us": 310.0},
            "request_network": {"p50_us": network, "mean_us": network},
        },
    )


def test_runs_are_recorded_replaced_and_listed(tmp_path) -> None:
    with open_store(tmp_path / "store") as store:
        assert list_runs(store).empty  # no table yet: an empty answer, not an error
        create_runs(store)
        create_runs(store)  # idempotent
        record_run(store, _record("r0", 0, "none", 1000.0, 800.0, 100.0))
        record_run(store, _record("r1", 1, "gzip", 700.0, 1400.0, 650.0))
        record_run(store, _record("r1", 1, "gzip", 750.0, 1400.0, 650.0))  # recorded again
        record_run(store, replace(_record("x", 0, "none", 5.0, 1.0, 1.0), experiment="other"))
        runs = list_runs(store, "exp")
        assert list(runs["run_id"]) == ["r0", "r1"]
        assert runs.loc[runs["run_id"] == "r1", "calls_per_s"].item() == 750.0
        assert json.loads(runs["config"].iloc[1])["compression"] == "gzip"
        # Times keep their instant (µs): Unix-ns ints once landed at year 9999.
        assert pd.Timestamp(runs["started"].iloc[0]).value == 1_700_000_000_000_000_000
        assert pd.Timestamp(runs["ended"].iloc[1]).value == 1_700_000_001_000_000_000
        assert len(list_runs(store)) == 3
        frame = insights.cells(runs)
    assert list(frame["label"]) == ["compression=none", "compression=gzip"]
    winners = {winner.metric: winner for winner in insights.winners(frame)}
    assert winners["calls_per_s"].label == "compression=none"
    assert winners["calls_per_s"].factor == pytest.approx(1000 / 750)
    assert winners["p50_us"].label == "compression=none"
    sentence = insights.explain(frame)
    assert sentence.startswith("compression=gzip takes 600 µs longer than compression=none")
    assert "request_network explains most of it (+550 µs, 92% of it)" in sentence


def test_phase_summary_is_exact_and_skips_undefined_phases() -> None:
    frame = pd.DataFrame(
        {"total_us": [100.0, 200.0, 300.0, 1000.0], "processing_us": [None, None, None, None]}
    )
    summary = phase_summary(frame, ("total", "processing", "server_queue"))
    interval = summary["total"].pop("ci_us")
    assert summary["total"] == {"p50_us": 250.0, "mean_us": 400.0, "calls": 4}
    assert 100.0 <= interval[0] <= 250.0 <= interval[1] <= 1000.0  # the p50's, by bootstrap
    assert summary["processing"] == {"p50_us": None, "mean_us": None, "calls": 0, "ci_us": None}
    assert summary["server_queue"]["calls"] == 0


def test_a_store_from_before_rounds_is_read_and_upgraded(tmp_path) -> None:
    """grpc_runs as the first release made it (no rounds, machine, under_load, comparison):
    listed with defaults, then given the columns by create_runs, old rows kept."""
    old_columns = ", ".join(
        f"{name} {kind}"
        for name, kind in (
            ("run_id", "String"),
            ("experiment", "LowCardinality(String)"),
            ("invocation", "String"),
            ("cell", "UInt32"),
            ("config", "String"),
            ("transport", "LowCardinality(String)"),
            ("started", "DateTime64(6, 'UTC')"),
            ("ended", "DateTime64(6, 'UTC')"),
            ("calls", "UInt64"),
            ("errors", "UInt64"),
            ("calls_per_s", "Float64"),
            ("predictions_per_s", "Float64"),
            ("p50_us", "Float64"),
            ("p99_us", "Float64"),
            ("phases", "String"),
            ("recorded", "DateTime64(6, 'UTC')"),
        )
    )
    with open_store(tmp_path / "store") as store:
        engine = "ENGINE = ReplacingMergeTree(recorded) ORDER BY (experiment, run_id)"
        store.command(f"CREATE TABLE grpc_runs ({old_columns}) {engine}")
        store.command(
            "INSERT INTO grpc_runs (run_id, experiment, invocation, cell, config, "
            "transport, calls, phases) VALUES ('old', 'exp', 'exp-0', 0, "
            "'{\"compression\": \"none\"}', 'grpc', 10, '{}')"
        )
        before = list_runs(store, "exp")
        assert list(before["run_id"]) == ["old"]
        assert before[["rounds", "machine", "under_load", "comparison"]].iloc[0].tolist() == [
            "[]",
            "{}",
            0,
            "{}",
        ]
        create_runs(store)
        record_run(
            store,
            replace(
                _record("new", 1, "gzip", 5.0, 1.0, 1.0), under_load=True, rounds=[{"round": 0}]
            ),
        )
        after = list_runs(store, "exp").set_index("run_id")
    assert after.loc["old", "rounds"] == "[]" and after.loc["old", "under_load"] == 0
    assert after.loc["new", "under_load"] == 1
    assert json.loads(after.loc["new", "rounds"]) == [{"round": 0}]
    assert list(insights.cells(after.reset_index())["rounds_run"]) == [1, 1]

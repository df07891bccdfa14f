from __future__ import annotations

import numpy as np
import pytest

from grpc_overhead.load_generator.stats import (
    Outcome,
    format_text,
    histogram,
    latency_summary,
    summarize,
)

pytestmark = pytest.mark.unit


def _summary(outcome: Outcome, **kw):
    config = {"targets": ["h:1"], "mode": "unary", "method": "Predict"}
    payload = {
        "entities": 1,
        "features": 2,
        "encoding": "repeated",
        "codec": "none",
        "grpc_compression": "none",
        "request_bytes": 10,
    }
    return summarize(outcome, run_id="r", duration_s=2.0, config=config, payload=payload, **kw)


def test_percentiles_are_ordered_and_in_ms() -> None:
    rng = np.random.default_rng(1)
    latencies = (rng.lognormal(0, 1, 5000) * 1e6).astype(int).tolist()
    summary = latency_summary(latencies)
    order = [summary[k] for k in ("min", "p50", "p90", "p99", "p999", "max")]
    assert order == sorted(order)
    assert summary["p50"] == pytest.approx(np.median(latencies) / 1e6, rel=1e-3)
    assert latency_summary([]) == dict.fromkeys(["min", "mean", "p50", "p90", "p99", "p999", "max"])


def test_histogram_counts_every_call() -> None:
    latencies = [1_000_000, 2_000_000, 2_000_000, 10_000_000]
    rows = histogram(latencies)
    assert len(rows) == 10 and sum(r["count"] for r in rows) == 4
    assert rows[0] == {"le_ms": 1.9, "count": 1}  # [min, 1.9]
    assert rows[1] == {"le_ms": 2.8, "count": 2}  # (1.9, 2.8]
    assert rows[-1] == {"le_ms": 10.0, "count": 1}
    assert histogram([5_000_000] * 3) == [{"le_ms": 5.0, "count": 3}]
    assert histogram([]) == []


def test_summary_counts_and_errors() -> None:
    outcome = Outcome()
    outcome.latencies_ns += [1_000_000] * 8
    outcome.status_codes.update({"OK": 8, "UNAVAILABLE": 2})
    outcome.error_messages.update({"UNAVAILABLE: gone": 2})
    outcome.predictions = 8
    summary = _summary(outcome)
    assert (summary["calls"], summary["ok"], summary["errors"]) == (10, 8, 2)
    assert summary["rps"] == 5.0 and summary["predictions_per_s"] == 4.0
    assert summary["status_codes"] == {"OK": 8, "UNAVAILABLE": 2}
    text = format_text(summary)
    assert "[UNAVAILABLE]\t2 responses" in text and "[2]\tUNAVAILABLE: gone" in text


def test_all_errors_keeps_stable_keys() -> None:
    outcome = Outcome()
    outcome.status_codes["DEADLINE_EXCEEDED"] = 3
    summary = _summary(outcome)
    assert (
        summary["ok"] == 0 and summary["latency_ms"]["p99"] is None and summary["histogram"] == []
    )
    assert "Summary:" in format_text(summary)


def test_open_loop_lateness() -> None:
    outcome = Outcome()
    outcome.status_codes["OK"] = 4
    outcome.latencies_ns += [1_000_000] * 4
    outcome.start_lags_ns += [100_000, 200_000, 3_000_000, 9_000_000]
    summary = _summary(outcome, open_loop={"rps_target": 10.0, "late_threshold_ms": 1.0})
    assert summary["open_loop"]["late_calls"] == 2
    assert summary["open_loop"]["start_lag_ms"]["max"] == 9.0
    assert "Late starts:  2" in format_text(summary)


def test_merge() -> None:
    a, b = Outcome(), Outcome()
    a.status_codes["OK"] = 1
    a.latencies_ns.append(5)
    a.done = 1
    b.status_codes["OK"] = 2
    b.latencies_ns += [6, 7]
    b.server_instances["x"] = 2
    b.done = 2
    a.merge(b)
    assert (
        a.calls == 3
        and a.done == 3
        and a.latencies_ns == [5, 6, 7]
        and a.server_instances["x"] == 2
    )


def test_check_summary_finds_inconsistencies() -> None:
    from grpc_overhead.load_generator.stats import check_summary

    outcome = Outcome()
    outcome.latencies_ns += [1_000_000, 3_000_000]
    outcome.status_codes.update({"OK": 2, "INTERNAL": 1})
    summary = _summary(outcome)
    assert check_summary(summary) == []
    broken = {**summary, "ok": 3}
    assert any("!= calls" in problem for problem in check_summary(broken))
    disordered = {**summary, "latency_ms": {**summary["latency_ms"], "p50": 99.0}}
    assert any("out of order" in problem for problem in check_summary(disordered))
    assert check_summary({"calls": 1}) != []

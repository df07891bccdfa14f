"""The estimator on the same calls: tail-aware sampling's decision replayed over a run that
kept every call, so that what the weights estimate can be set against the truth of those
very calls.

Two live runs (``bench.sampling``) are different calls, and keeping every call slows the
calls it keeps (exporting every span), so a tail-aware run's figures differ from an
every-call run's by more than the estimate's error. Here the real decision
(``TailSampler.decide``, the server's on its residence time, its verdict passed to the
client as its trailer would, then the client's on its total) runs over the every-call
run's stored calls in the order they started; the calls either half keeps, weighted as
the instrumentation weighs them (the smaller of the halves' weights), estimate every
phase's p50/p90/p99, against the exact quantiles of all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.analyzer.store import open_store
from grpc_overhead.instrumentation import SpanPipeline
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.tail_sampling import TailSampler
from harness.known_mix import exact_quantile, weighted_quantile

LEVELS = (0.5, 0.9, 0.99)


def _calls(store: Path, run_id: str, phases: tuple[str, ...]) -> list[dict[str, Any]]:
    columns = ", ".join(f"{phase}_us" for phase in phases)
    with open_store(str(store)) as opened:
        frame = opened.query(
            "SELECT trace_id, rpc_method, status_code, total_us, server_residence_us,"
            f" {columns} FROM grpc_call_phases WHERE run_id = {{run:String}}"
            " AND total_us IS NOT NULL AND server_residence_us IS NOT NULL"
            " ORDER BY start_time",
            {"run": run_id},
            readonly=True,
        )
    return frame.to_dict("records")


def _weights(calls: list[dict[str, Any]], rate: float) -> list[float]:
    """Each call's weight under tail-aware sampling at ``rate`` (0: dropped)."""
    pipeline = SpanPipeline(exporter=InMemorySpanExporter())
    recorder = Recorder(pipeline)
    server_sampler, client_sampler = TailSampler(rate), TailSampler(rate)
    weights = []
    try:
        for call in calls:
            trace_id, status = int(call["trace_id"], 16), int(call["status_code"] or 0)
            halves = []
            for client in (False, True):
                record = CallRecord(
                    recorder, client, call["rpc_method"], "unary_unary", trace_id, 1, 0, 0
                )
                record.status_code = status
                if client and halves and halves[0][0]:
                    record.peer_weight = halves[0][1]  # the server's kept trailer
                sampler = client_sampler if client else server_sampler
                duration_us = call["total_us"] if client else call["server_residence_us"]
                kept = sampler.decide(record, round(duration_us * 1000))
                halves.append((kept, record.sampling_weight if kept else 0.0))
            kept_weights = [weight for kept, weight in halves if kept]
            weights.append(min(kept_weights) if kept_weights else 0.0)
    finally:
        pipeline.shutdown()
    return weights


def replay(store: Path, run_id: str, rates: tuple[float, ...], phases: tuple[str, ...]) -> dict:
    """Per rate: the share of calls kept, the estimated count, and per phase and level the
    truth (every call), the estimate (the kept calls, weighted) and the error in %."""
    calls = _calls(store, run_id, phases)
    found: dict[str, Any] = {"calls": len(calls), "rates": {}}
    for rate in rates:
        weights = _weights(calls, rate)
        kept = [(call, weight) for call, weight in zip(calls, weights, strict=True) if weight]
        rows = []
        for phase in phases:
            column = f"{phase}_us"
            every = [call[column] for call in calls if _defined(call[column])]
            if not every:
                continue
            weighted = [(call[column], weight) for call, weight in kept if _defined(call[column])]
            for level in LEVELS:
                truth = exact_quantile(every, level)
                estimate = weighted_quantile(weighted, level) if weighted else float("nan")
                rows.append(
                    {
                        "phase": phase,
                        "level": f"p{round(level * 100)}",
                        "every_call_us": truth,
                        "tail_us": estimate,
                        "error_pct": 100 * abs(estimate - truth) / truth if truth else None,
                        "within": abs(estimate - truth) <= max(0.05 * abs(truth), 200.0),
                    }
                )
        found["rates"][f"{rate:g}"] = {
            "kept": len(kept),
            "estimated": sum(weight for _, weight in kept),
            "phases": rows,
            "met": all(row["within"] for row in rows),
        }
    return found


def _defined(value: Any) -> bool:
    """A phase the call defines (the view's NULL arrives as None or NaN)."""
    return value is not None and value == value

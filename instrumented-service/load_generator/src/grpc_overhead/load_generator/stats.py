"""Run results: per-call outcomes -> a ghz-like summary (text) or a stable JSON document.

JSON keys (stable; new keys may be added, none renamed):

    run_id, calls, ok, errors, duration_s, rps,
    latency_ms {min, mean, p50, p90, p99, p999, max}   over OK calls; null when none
    histogram [{le_ms, count}]     10 linear buckets over OK calls: count of calls with
                                   latency in (previous le_ms, le_ms] (the first bucket
                                   also holds the minimum); not cumulative
    status_codes {CODE: n}         gRPC status code names, OK included
    error_messages {"CODE: details": n}
    predictions, predictions_per_s entities scored (OK calls only)
    server_instances {instance id: OK calls}   which server answered (round-robin check)
    open_loop {rps_target, late_calls, late_threshold_ms, start_lag_ms {p50, p99, max}}
                                   (null for closed-loop runs)
    cpu_wait_ms {per_call, callers, grpc_readers}   the load generator's own wait for a
                                   CPU (cpu_wait.py), inside its latency; null where the
                                   kernel does not count it
    config {...}, payload {...}    what was run

Latency is a call's whole duration as the client sees it: from starting the
call to its final status, including every message of a streaming call.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from grpc_overhead.load_generator import cpu_wait

PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p999", 99.9))
HISTOGRAM_BUCKETS = 10


@dataclass
class Outcome:
    """One worker's results (merged at the end, so the hot path takes no lock)."""

    latencies_ns: list[int] = field(default_factory=list)  # OK calls
    status_codes: collections.Counter = field(default_factory=collections.Counter)
    error_messages: collections.Counter = field(default_factory=collections.Counter)
    predictions: int = 0
    start_lags_ns: list[int] = field(default_factory=list)  # open loop only
    server_instances: collections.Counter = field(default_factory=collections.Counter)
    done: int = 0  # calls finished, read by the progress display
    cpu_wait_ns: int = 0  # the callers' run-queue wait during their calls (cpu_wait)
    cpu_wait_unknown: bool = False  # the kernel did not say, for some call

    def merge(self, other: Outcome) -> None:
        self.latencies_ns.extend(other.latencies_ns)
        self.status_codes.update(other.status_codes)
        self.error_messages.update(other.error_messages)
        self.predictions += other.predictions
        self.start_lags_ns.extend(other.start_lags_ns)
        self.server_instances.update(other.server_instances)
        self.done += other.done
        self.cpu_wait_ns += other.cpu_wait_ns
        self.cpu_wait_unknown |= other.cpu_wait_unknown

    @property
    def calls(self) -> int:
        return sum(self.status_codes.values())


def _round(value: float, digits: int = 3) -> float:
    return float(round(value, digits))


def latency_summary(latencies_ns: list[int]) -> dict[str, float | None]:
    keys = ["min", "mean", *(name for name, _ in PERCENTILES), "max"]
    if not latencies_ns:
        return dict.fromkeys(keys)
    values = np.asarray(latencies_ns, dtype=np.float64) / 1e6
    summary: dict[str, float | None] = {"min": _round(values.min()), "mean": _round(values.mean())}
    points = np.percentile(values, [q for _, q in PERCENTILES])
    for (name, _), point in zip(PERCENTILES, points, strict=True):
        summary[name] = _round(point)
    summary["max"] = _round(values.max())
    # Rounding can never break the order, but make it explicit for consumers.
    ordered = [summary[k] for k in ("min", "p50", "p90", "p99", "p999", "max")]
    for index in range(1, len(ordered)):
        if ordered[index] < ordered[index - 1]:  # pragma: no cover - numerical safety
            ordered[index] = ordered[index - 1]
    for key, value in zip(("min", "p50", "p90", "p99", "p999", "max"), ordered, strict=True):
        summary[key] = value
    return summary


def histogram(latencies_ns: list[int], buckets: int = HISTOGRAM_BUCKETS) -> list[dict[str, Any]]:
    if not latencies_ns:
        return []
    values = np.asarray(latencies_ns, dtype=np.float64) / 1e6
    low, high = float(values.min()), float(values.max())
    if high <= low:
        return [{"le_ms": _round(high), "count": int(values.size)}]
    edges = np.linspace(low, high, buckets + 1)
    # bucket i holds (edges[i], edges[i+1]]; the minimum goes into bucket 0
    index = np.clip(np.searchsorted(edges, values, side="left") - 1, 0, buckets - 1)
    counts = np.bincount(index, minlength=buckets)
    return [
        {"le_ms": _round(edge), "count": int(count)}
        for edge, count in zip(edges[1:], counts, strict=True)
    ]


def summarize(
    outcome: Outcome,
    *,
    run_id: str,
    duration_s: float,
    config: dict[str, Any],
    payload: dict[str, Any],
    open_loop: dict[str, Any] | None = None,
    interrupted: bool = False,
    grpc_readers_wait_ns: int = 0,
) -> dict[str, Any]:
    calls = outcome.calls
    ok = int(outcome.status_codes.get("OK", 0))
    duration = max(duration_s, 1e-9)
    lags = None
    if open_loop is not None:
        lag_ms = np.asarray(outcome.start_lags_ns, dtype=np.float64) / 1e6
        threshold = open_loop["late_threshold_ms"]
        lags = {
            **open_loop,
            "late_calls": int((lag_ms > threshold).sum()),
            "start_lag_ms": {
                "p50": _round(np.percentile(lag_ms, 50)) if lag_ms.size else None,
                "p99": _round(np.percentile(lag_ms, 99)) if lag_ms.size else None,
                "max": _round(lag_ms.max()) if lag_ms.size else None,
            },
        }
    return {
        "run_id": run_id,
        "calls": calls,
        "ok": ok,
        "errors": calls - ok,
        "duration_s": _round(duration_s, 4),
        "rps": _round(calls / duration, 2) if calls else 0.0,
        "latency_ms": latency_summary(outcome.latencies_ns),
        "histogram": histogram(outcome.latencies_ns),
        "status_codes": dict(sorted(outcome.status_codes.items())),
        "error_messages": dict(outcome.error_messages.most_common()),
        "predictions": outcome.predictions,
        "predictions_per_s": _round(outcome.predictions / duration, 1) if calls else 0.0,
        "server_instances": dict(sorted(outcome.server_instances.items())),
        "open_loop": lags,
        "cpu_wait_ms": cpu_wait.summary(
            None if outcome.cpu_wait_unknown else outcome.cpu_wait_ns, grpc_readers_wait_ns, calls
        ),
        "interrupted": interrupted,
        "config": config,
        "payload": payload,
    }


def _bar(count: int, largest: int, width: int = 40) -> str:
    if largest <= 0 or count <= 0:
        return ""
    return "∎" * max(1, math.ceil(width * count / largest))


#: A load generator waiting this share of its mean latency for a CPU is told so.
CPU_WAIT_WARNING_SHARE = 0.05


def cpu_wait_lines(summary: dict[str, Any]) -> list[str]:
    """The load generator's own wait for a CPU, and a warning where it is a visible part
    of the latency it reports (it is in response_network too: cpu_wait.py)."""
    waited = summary.get("cpu_wait_ms")
    if waited is None:
        return []
    lines = [
        f"  CPU wait:     {waited['per_call']:.3f} ms per call (the load generator's callers "
        f"{waited['callers']:.1f} ms, gRPC's readers {waited['grpc_readers']:.1f} ms in all)"
    ]
    mean = (summary.get("latency_ms") or {}).get("mean")
    if mean and waited["per_call"] > CPU_WAIT_WARNING_SHARE * mean:
        share = waited["per_call"] / mean
        lines.append(
            f"  (the load generator waited for a CPU for {share:.0%} of its mean latency: "
            "its latency and response_network include that wait. Give it a CPU of its own "
            "(taskset), a quieter host, or fewer --concurrency)"
        )
    return lines


def format_text(summary: dict[str, Any]) -> str:
    """A ghz-like plain-text report."""
    config, payload = summary["config"], summary["payload"]
    latency = summary["latency_ms"]
    lines = [
        "",
        "Summary:",
        f"  Run id:       {summary['run_id']}",
        f"  Targets:      {', '.join(config['targets'])}",
        f"  Mode:         {config['mode']} ({config['method']})",
        f"  Payload:      {payload['entities']} entities x {payload['features']} features, "
        f"{payload['encoding']} encoding, payload codec {payload['codec']}, "
        f"gRPC compression {payload['grpc_compression']}, "
        f"request {payload['request_bytes']} bytes",
        f"  Count:        {summary['calls']}",
        f"  Total:        {summary['duration_s'] * 1000:.2f} ms",
    ]
    if latency["min"] is not None:
        lines += [
            f"  Slowest:      {latency['max']:.2f} ms",
            f"  Fastest:      {latency['min']:.2f} ms",
            f"  Average:      {latency['mean']:.2f} ms",
        ]
    lines.append(f"  Requests/sec: {summary['rps']:.2f}")
    lines.append(f"  Predictions/sec: {summary['predictions_per_s']:.1f}")
    lines += cpu_wait_lines(summary)
    spans = summary.get("spans")
    if spans is not None:
        lost = spans["failed"] + spans["dropped"] + spans["unsent"]
        lines.append(
            f"  Spans:        {spans['exported']} exported"
            + (
                f", {lost} not delivered (export failed {spans['failed']}, queue full "
                f"{spans['dropped']}, unsent at exit {spans['unsent']})"
                if lost
                else ""
            )
        )
    if summary["interrupted"]:
        lines.append("  (interrupted: partial results)")
    histogram_rows = summary["histogram"]
    if histogram_rows:
        largest = max(row["count"] for row in histogram_rows)
        lines += ["", "Response time histogram (ms, OK calls):"]
        for row in histogram_rows:
            lines.append(f"  {row['le_ms']:10.3f} [{row['count']}]\t|{_bar(row['count'], largest)}")
        lines += ["", "Latency distribution (OK calls):"]
        for name, q in PERCENTILES:
            label = f"{q:g} %"
            lines.append(f"  {label:>7} in {latency[name]:.3f} ms")
    open_loop = summary["open_loop"]
    if open_loop is not None:
        lag = open_loop["start_lag_ms"]
        lines += [
            "",
            "Open loop:",
            f"  Target rate:  {open_loop['rps_target']:g}/s (Poisson arrivals)",
            f"  Late starts:  {open_loop['late_calls']} "
            f"(> {open_loop['late_threshold_ms']:g} ms after schedule)",
        ]
        if lag["max"] is not None:
            lines.append(
                f"  Start lag:    p50 {lag['p50']:.3f} ms, p99 {lag['p99']:.3f} ms, "
                f"max {lag['max']:.3f} ms"
            )
    lines += ["", "Status code distribution:"]
    for code, count in summary["status_codes"].items():
        lines.append(f"  [{code}]\t{count} responses")
    if summary["server_instances"]:
        lines += ["", "Server instances (OK calls):"]
        for instance, count in summary["server_instances"].items():
            lines.append(f"  [{count}]\t{instance or '(no instance id)'}")
    if summary["error_messages"]:
        lines += ["", "Error distribution:"]
        for message, count in summary["error_messages"].items():
            lines.append(f"  [{count}]\t{message}")
    return "\n".join(lines) + "\n"


def check_summary(summary: dict[str, Any]) -> list[str]:
    """Inconsistencies in a summary (empty when sound): counts add up, percentiles ordered."""
    problems = []
    for key in (
        "run_id",
        "calls",
        "ok",
        "errors",
        "duration_s",
        "rps",
        "latency_ms",
        "histogram",
        "status_codes",
    ):
        if key not in summary:
            problems.append(f"missing key {key!r}")
    if problems:
        return problems
    calls, ok = summary["calls"], summary["ok"]
    if ok + summary["errors"] != calls:
        problems.append(f"ok {ok} + errors {summary['errors']} != calls {calls}")
    if sum(summary["status_codes"].values()) != calls:
        problems.append(f"status codes {summary['status_codes']} do not sum to {calls}")
    if summary["status_codes"].get("OK", 0) != ok:
        problems.append("status_codes.OK != ok")
    latency = summary["latency_ms"]
    if ok:
        order = [latency[k] for k in ("min", "p50", "p90", "p99", "p999", "max")]
        if order != sorted(order) or not latency["min"] <= latency["mean"] <= latency["max"]:
            problems.append(f"latencies out of order: {latency}")
        if sum(row["count"] for row in summary["histogram"]) != ok:
            problems.append("histogram counts do not sum to ok")
    elif any(value is not None for value in latency.values()):
        problems.append("latencies without OK calls")
    if calls and summary["duration_s"] > 0:
        expected = calls / summary["duration_s"]
        if abs(summary["rps"] - expected) > 0.01 * expected + 0.01:
            problems.append(f"rps {summary['rps']} != calls / duration_s {expected:.2f}")
    return problems

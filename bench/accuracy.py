"""Ground-truth accuracy: every injected cause (harness/ground_truth) in its full profile.

Writes bench/results/accuracy.json (every check, every case's p50 phases,
calibrations and observations) and accuracy.md (the "Injected vs measured"
table docs/benchmarks.md quotes). Exit status 1 when a check that must pass did not;
documented limits (``Check.limit``) are listed, not failed.

    python -m bench.run accuracy                         # all scenarios, full
    python -m bench.run accuracy -- --quick              # the reduced profile (as make test)
    python -m bench.run accuracy -- --only bandwidth     # one scenario
"""

from __future__ import annotations

import argparse
import json
import tempfile
import traceback
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, log, machine_info, write_results
from harness.ground_truth import SCENARIOS
from harness.ground_truth.checks import Check, ScenarioResult
from harness.ground_truth.profile import FULL, REDUCED


def _row(c: Check) -> str:
    verdict = "ok" if c.within else ("limit" if c.limit else "**FAIL**")
    return (
        f"| {c.scenario} | {c.case} | {c.quantity} | {c.phase} | {c.injected_us:,.0f} | "
        f"{c.measured_us:,.0f} | {c.error_us:+,.0f} | {c.tolerance_us:,.0f} | {verdict} |"
    )


def markdown(results: list[ScenarioResult], info: dict[str, Any]) -> str:
    lines = [
        f"Injected vs measured, p50, µs ({info['date'][:10]}; {info['cpu_count']} CPUs, "
        f"load {info['load_average_1m_at_start']:.1f} at start; shared machine). "
        "Tolerance: 10 % of the injected amount or 200 µs, whichever is larger.",
        "",
        "| scenario | case | injected cause | phase | injected | measured | error | "
        "tolerance | verdict |",
        "|---|---|---|---|---:|---:|---:|---:|---|",
    ]
    lines += [_row(c) for r in results for c in r.checks]
    runs = [
        f"{r.name} {r.run['date'][:16].replace('T', ' ')} UTC, load "
        f"{r.run['load_average_1m_at_start']:.1f}"
        for r in results
        if r.run
    ]
    earlier = [r.name for r in results if not r.run]
    if runs and earlier:  # a merged partial run: say when each scenario ran
        lines += [
            "",
            f"When each ran: {'; '.join(runs)}; {', '.join(earlier)}: an earlier run "
            "(its date and load were not kept per scenario).",
        ]
    limits = [c for r in results for c in r.limits]
    if limits:
        lines += ["", "Not recoverable (the harness's explanation):", ""]
        lines += [f"- {c.scenario}/{c.case} {c.phase}: {c.limit}" for c in limits]
    compression = next((r for r in results if r.name == "compression"), None)
    if compression is not None:
        lines += ["", "Compression on the 5 MB/s request path (p50 µs, limited run):", ""]
        lines += [
            "| variant | wire KB | client_serialize | request_network | server_queue | "
            "processing | total | + client zstd outside call | end to end |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for variant in ("none", "grpc_gzip", "zstd"):
            o = compression.observations[variant]
            ph = o["per_phase_p50_us"]
            lines.append(
                f"| {variant} | {o['request_wire_bytes'] / 1e3:,.0f} | "
                f"{ph['client_serialize']:,.0f} | {ph['request_network']:,.0f} | "
                f"{ph['server_queue']:,.0f} | {ph['processing']:,.0f} | {ph['total']:,.0f} | "
                f"{o['client_compress_outside_call_us']:,.0f} | {o['end_to_end_us']:,.0f} |"
            )
        lines.append(f"\nWinner end to end: {compression.observations['winner_end_to_end']}.")
    return "\n".join(lines) + "\n"


def _merged(scenarios: list[dict[str, Any]], profile: str) -> list[dict[str, Any]]:
    try:
        previous = json.loads((RESULTS_DIR / "accuracy.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return scenarios
    if previous.get("profile") != profile:
        return scenarios
    fresh = {s["name"]: s for s in scenarios}
    kept = [fresh.pop(s["name"], s) for s in previous.get("scenarios", [])]
    return kept + list(fresh.values())


def _from_json(data: dict[str, Any]) -> ScenarioResult:
    """A result rebuilt from its JSON (for the table of a merged partial run)."""
    fields = (
        "scenario",
        "case",
        "quantity",
        "phase",
        "injected_us",
        "measured_us",
        "tolerance_us",
        "limit",
    )
    return ScenarioResult(
        data["name"],
        data["profile"],
        checks=[Check(**{k: c[k] for k in fields}) for c in data["checks"]],
        observations=data["observations"],
        notes=data["notes"],
        seconds=data["seconds"],
        run=data.get("run", {}),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.accuracy")
    parser.add_argument("--quick", action="store_true", help="reduced profile (as make test)")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="scenario(s)")
    args = parser.parse_args(argv or [])
    profile = REDUCED if args.quick else FULL
    info = machine_info()
    results: list[ScenarioResult] = []
    errors: dict[str, str] = {}
    for name in args.only or list(SCENARIOS):
        log(f"accuracy: {name} ({profile.name})")
        with tempfile.TemporaryDirectory(prefix=f"grpc-overhead-gt-{name}-") as workdir:
            try:
                result = SCENARIOS[name](Path(workdir), profile)
            except Exception:  # one broken scenario must not hide the others
                errors[name] = traceback.format_exc()
                log(errors[name])
                continue
        log(result.describe())
        results.append(result)
    run = {key: info[key] for key in ("date", "load_average_1m_at_start")}
    scenarios = [{**r.to_json(), "run": run} for r in results]
    if args.only:  # a partial run replaces its scenarios in the last full results
        scenarios = _merged(scenarios, profile.name)
    data = {
        "machine": info,
        "profile": profile.name,
        "tolerance": "max(10% of injected, 200 us), at p50",
        "scenarios": scenarios,
        "errors": errors,
    }
    shown = [_from_json(s) for s in scenarios]
    for path in write_results("accuracy", data, markdown(shown, info)):
        log(f"wrote {path}")
    failed = [c for r in results for c in r.failures]
    return 1 if failed or errors else 0

"""Findings against injected causes (harness/ground_truth/findings), in the full profile.

Writes bench/results/findings.json (every scenario's plan, the findings it got,
estimated and measured savings) and findings.md (the table docs/benchmarks.md
and the README quote). Exit status 1 when a scenario failed a check.

    python -m bench.run findings                       # all scenarios, full
    python -m bench.run findings -- --quick            # the reduced profile (as make test)
    python -m bench.run findings -- --only tail        # some scenarios
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

from bench.common import log, machine_info, write_results
from harness.ground_truth.findings import SCENARIOS, run_scenarios
from harness.ground_truth.findings.result import SAVING_TOLERANCE, FindingsResult
from harness.ground_truth.profile import FULL, REDUCED


def _saving(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _row(result: FindingsResult) -> str:
    plan, top = result.plan, result.top
    top_text = "none" if top is None else f"{top['kind']} ({top['confidence']})"
    if result.error:
        return f"| {plan.name} | - | failed to run: {result.error} | | | | | **FAIL** |"
    error = result.saving_error
    verdict = "ok" if result.ok else "**FAIL**"
    if result.ok and plan.limit:
        verdict = "ok (lower bound)"
    expected = plan.kind or "none above low"
    return (
        f"| {plan.name} | {plan.injected} | {expected} | {top_text} | {plan.quantile} | "
        f"{_saving(result.estimated_saving_us) if plan.kind else '-'} | "
        f"{_saving(plan.measured_saving_us) if plan.kind else '-'} | "
        f"{'-' if error is None else f'{error:+.0%}'} | {verdict} |"
    )


def markdown(results: list[FindingsResult], info: dict[str, Any], profile: str) -> str:
    lines = [
        f"Findings against injected causes ({info['date'][:16].replace('T', ' ')} UTC, "
        f"{profile} profile; {info['cpu_count']} CPUs, load {info['load_average_1m_at_start']:.1f}"
        f" at start). Saving in µs: estimated by the top finding of the injected kind, "
        f"measured as the client's latency with the cause minus without (interleaved rounds); "
        f"tolerance {SAVING_TOLERANCE:.0%} of the measured saving.",
        "",
        "| scenario | injected | expected | top finding | at | estimated | measured | error | "
        "verdict |",
        "|---|---|---|---|---|---:|---:|---:|---|",
    ]
    lines += [_row(result) for result in results]
    notes = [
        f"- {r.plan.name}: ranked below {', '.join(r.plan.ranks_below)} by design"
        for r in results
        if r.plan.ranks_below and r.plan.ranks_below != ("*",)
    ]
    notes += [f"- {r.plan.name}: a lower bound: {r.plan.limit}" for r in results if r.plan.limit]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.findings")
    parser.add_argument("--quick", action="store_true", help="reduced profile (as make test)")
    parser.add_argument("--only", action="append", choices=list(SCENARIOS), help="scenario(s)")
    args = parser.parse_args(argv or [])
    profile = REDUCED if args.quick else FULL
    info = machine_info()
    with tempfile.TemporaryDirectory(prefix="grpc-overhead-findings-") as workdir:
        results = run_scenarios(Path(workdir), profile, args.only, progress=log)
    for result in results:
        log(result.describe())
    info["load_average_1m_at_end"] = os.getloadavg()[0]
    data = {
        "machine": info,
        "profile": profile.name,
        "tolerance": f"{SAVING_TOLERANCE:.0%} of the measured saving",
        "scenarios": [result.to_json() for result in results],
    }
    for path in write_results("findings", data, markdown(results, info, profile.name)):
        log(f"wrote {path}")
    return 0 if all(result.ok for result in results) else 1

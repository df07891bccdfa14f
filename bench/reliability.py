"""The fault-injection suite as a benchmark (the suite itself: ``harness/fault_suite.py``).

python -m bench.run reliability            # full scale, results in bench/results/
python -m bench.run reliability -- --quick # the reduced run ``make test`` makes
"""

from __future__ import annotations

import argparse
import json
import tempfile
from typing import Any

from harness.fault_suite import FULL, QUICK, run_suite


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.reliability")
    parser.add_argument("--quick", action="store_true", help="the reduced run of make test")
    args = parser.parse_args(argv)
    from bench.common import machine_info, write_results

    with tempfile.TemporaryDirectory(prefix="grpc-overhead-faults-") as workdir:
        figures = run_suite(QUICK if args.quick else FULL, workdir)
    print(json.dumps(figures, indent=2))
    name = "reliability-quick" if args.quick else "reliability"
    for path in write_results(name, {"machine": machine_info(), **figures}, summary(figures)):
        print(path)
    return 0


def summary(figures: dict[str, Any]) -> str:
    """The figures as docs/reliability.md shows them."""
    flood_, crash_ = figures["flood"], figures["crash"]
    lines = [
        "# Fault-injection suite",
        "",
        f"Flood: {flood_['seconds']} s, requests {flood_['requests']}, attempts "
        f"{flood_['attempts']}, KILL attempts {flood_['kill_attempts']}, "
        f"{flood_['acknowledged_spans_per_s']} acknowledged spans/s.",
        f"Crash: {crash_['seconds']} s, faults {crash_['faults']}; after the senders "
        f"stopped, the collector's backlog reached the store in "
        f"{crash_.get('collector_drained_s')} s (None: not within the harness's limit).",
        "",
        "| phase / path | acknowledged | refused | unknown | poison | lost | refused but stored "
        "| poison stored | duplicates | reports readable |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [
        ("flood / direct", flood_["invariants"], flood_["reports_readable"]),
        ("crash / direct", crash_["direct"], crash_["reports_readable"]),
        ("crash / collector", crash_["through_collector"], crash_["reports_readable"]),
    ]
    for name, numbers, readable in rows:
        lost = numbers["lost"]
        lines.append(
            f"| {name} | {numbers['spans_acknowledged']} | {numbers['spans_refused']} | "
            f"{numbers['spans_unknown']} | {numbers['poison_spans']} | {lost} | "
            f"{numbers['refused_but_stored']} | {numbers['poison_stored']} | "
            f"{numbers['duplicates']} | {readable} |"
        )
    unauthenticated = figures.get("unauthenticated")
    if unauthenticated:
        flooded, good = unauthenticated["unauthenticated"], unauthenticated["authenticated"]
        lines += [
            "",
            f"Unauthenticated flood: {unauthenticated['seconds']} s, "
            f"{sum(flooded['requests'].values())} requests without valid credentials "
            f"({flooded['attempts']}), {flooded['spans_sent']} spans, {flooded['stored']} "
            f"stored; beside it the senders with the token: requests {good['requests']}, "
            f"{good['spans_acknowledged']} spans acknowledged, {good['lost']} lost, "
            f"{good['duplicates']} stored twice.",
        ]
    return "\n".join(lines) + "\n"

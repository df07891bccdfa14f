"""The seeds' results as Markdown: per seed, the machine check, each cell's throughput and
latency, the comparisons' verdicts with the phase that moved, and the phases per cell."""

from __future__ import annotations

import json
from typing import Any

Document = dict[str, Any]

#: The phases a seed's per-phase table shows: the design's consecutive ones and the total.
PHASES = (
    "client_serialize",
    "request_network",
    "server_queue",
    "request_deserialize",
    "processing",
    "response_serialize",
    "response_network",
    "client_deserialize",
    "total",
)


def _interval(verdict: Document | None) -> str:
    if not verdict:
        return "-"
    low, high = verdict["ci_us"] or (None, None)
    span = "" if low is None else f" ({low:+,.0f}..{high:+,.0f})"
    return f"{verdict['verdict']}, {verdict['diff_us']:+,.0f} µs{span}"


def _phase_cell(value: Document) -> str:
    if value["p50_us"] is None:
        return "-"
    low, high = value["ci_us"] or (None, None)
    span = "" if low is None else f" ({low:,.0f}-{high:,.0f})"
    return f"{value['p50_us']:,.0f}{span}"


def render(results: Document) -> str:
    lines = [
        f"# The seeds reproduced ({'full' if results['full'] else 'reduced'} run)",
        "",
        f"Machine: {json.dumps(results['machine'])}",
        "",
    ]
    for name, outcome in results["seeds"].items():
        machine = outcome["machine"]
        before = machine["before"]
        lines += [
            f"## {name} (`{outcome['file']}`, {len(outcome['cells'])} cells x "
            f"{outcome['rounds']} rounds, {outcome['seconds']} s)",
            "",
            f"Source: {outcome['source']['source']}: {outcome['source']['figure']}.",
            "",
            f"Machine check: load average {before.get('load_average')} before; other processes "
            f"{machine['during'].get('others_cpus_mean')} CPUs on average during; under load: "
            f"{machine['under_load']}"
            + (f" ({'; '.join(machine['warnings'])})" if machine["warnings"] else ""),
            "",
            "| cell | calls/s | predictions/s | p50 µs | p99 µs | errors | busy |",
            "|---|---|---|---|---|---|---|",
        ]
        for cell in outcome["cells"]:
            lines.append(
                f"| {cell['label']} | {cell['calls_per_s']:,.0f} "
                f"| {cell['predictions_per_s']:,.0f} | {cell['p50_us'] or 0:,.0f} "
                f"| {cell['p99_us'] or 0:,.0f} | {cell['errors']} "
                f"| {'yes' if cell['under_load'] else ''} |"
            )
        if outcome["comparisons"]:
            lines += [
                "",
                "| cell | against | verdict (p50 from the spans) | phase that moved |",
                "|---|---|---|---|",
            ]
            for item in outcome["comparisons"]:
                cause = item["explained_by"] or {}
                moved = f"{cause['phase']} {cause['diff_us']:+,.0f} µs" if cause else "-"
                lines.append(
                    f"| {item['label']} | {item['baseline_label']} | {_interval(item)} | {moved} |"
                )
        if all("phases" in cell for cell in outcome["cells"]):
            lines += [
                "",
                "Per phase, p50 µs (interval):",
                "",
                "| cell | " + " | ".join(PHASES) + " |",
                "|---|" + "---|" * len(PHASES),
            ]
            for cell in outcome["cells"]:
                shown = " | ".join(_phase_cell(cell["phases"][phase]) for phase in PHASES)
                lines.append(f"| {cell['label']} | {shown} |")
        lines += [
            "",
            "Ours, in the seed's terms:",
            "",
            "```",
            json.dumps(outcome["ours"], indent=2),
            "```",
            "",
        ]
    return "\n".join(lines) + "\n"

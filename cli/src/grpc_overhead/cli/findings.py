"""``grpc-overhead findings``: what to change to make the calls faster, ranked by the time saved.

    grpc-overhead findings [--store DIR | --clickhouse URL]
        [--since ...] [--until ...] [--service S] [--method M] [--run R] [--otel-service NAME]
        [--format table|json] [--window 60] [--clock-domain host|process]

The store and filter options are ``report``'s (one definition, ``report``'s
helpers). ``--format json`` is the contract of docs/reference.md ("Findings"):
``{"findings": [...], "checked": [{"kind", "why_not"}]}``. Every failure the user
can fix (no store, a bad --since, an unknown run or method) is one line on stderr
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from grpc_overhead.analyzer.findings import Findings, findings
from grpc_overhead.cli.report import (
    EXIT_USAGE,
    add_filter_arguments,
    add_store_arguments,
    guarded,
    read_store,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="grpc-overhead findings",
        description="Ranked, quantified advice: what to change, the time it would save "
        "(p50/p99), how sure we are, and how to verify it.",
    )
    add_store_arguments(p)
    add_filter_arguments(p)
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p


def run(args: argparse.Namespace) -> int:
    answer = read_store(args, findings)
    if answer is None:
        return EXIT_USAGE
    if args.format == "json":
        print(json.dumps(answer.to_json(), indent=2, ensure_ascii=False))
    else:
        sys.stdout.write(render_table(answer))
    return 0


def render_table(answer: Findings) -> str:
    """The findings as a reader scans them: one block each, then the kinds checked."""
    lines: list[str] = []
    if not answer.findings:
        lines.append("No findings: nothing the calls show would save time.")
    for number, finding in enumerate(answer.findings, 1):
        where = f"{finding.service}/{finding.method}"
        if finding.instance:
            where += f" on {finding.instance}"
        lines += [
            f"{number}. {finding.kind}  {where}  saves {finding.saving_p50_us:,.0f} µs at p50, "
            f"{finding.saving_p99_us:,.0f} µs at p99 ({finding.confidence} confidence, "
            f"{finding.calls:,} calls)",
            *_wrapped("basis", finding.saving_basis),
            *_wrapped("action", finding.action),
            *_verify(finding.verify),
            "",
        ]
    lines += ["", "Checked, not found:"]
    lines += [f"  {entry.kind}: {entry.why_not}" for entry in answer.checked]
    return "\n".join(lines) + "\n"


def _verify(text: str) -> list[str]:
    """The verify step: its sentence wrapped, an experiment file's lines as they are."""
    first, *rest = text.split("\n")
    return _wrapped("verify", first) + [f"{' ' * 11}{line}" for line in rest]


def _wrapped(label: str, text: str) -> list[str]:
    return textwrap.wrap(
        text, width=100, initial_indent=f"   {label}: ", subsequent_indent=" " * (5 + len(label))
    )


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    return guarded("findings", lambda: run(args))


if __name__ == "__main__":
    sys.exit(main())

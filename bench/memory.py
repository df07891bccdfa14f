"""Memory under a flood: ``serve`` offered the intake's target rate and twice it.

    python -m bench.run memory               # full run, bench/results/memory.{json,md}
    python -m bench.run memory -- --quick    # a short smoke run, prints only

The flood, its senders and its checks are ``harness/memory_flood.py`` (the reduced run
is a test); this writes the figures docs/reliability.md publishes: serve's resident
memory per phase against the documented bound, the rates sent and acknowledged, the
status codes, and the invariants (nothing acknowledged lost, nothing refused stored).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from bench.common import machine_info, markdown_table, publish
from harness.memory_flood import FULL, QUICK, SPANS_PER_REQUEST, run


def markdown(result: dict[str, Any]) -> str:
    machine, rss = result["machine"], result["rss"]
    lines = [
        "# Memory under a flood",
        "",
        f"{machine['date']}, {machine['cpu_count']} CPUs ({machine['cpu_model']}), load average "
        f"{machine['load_average_1m_at_start']:.2f} at the start. `serve` (embedded store, calls "
        f"view, settle loop, no app) offered {SPANS_PER_REQUEST}-span requests "
        f"({result['phases']['1x']['request_mib']} MiB each) at the target rate and twice it, "
        f"{result['scale']['seconds']:.0f} s each, from {result['scale']['processes']} sender "
        f"processes with {result['scale']['threads']} requests in flight each at most.",
        "",
        markdown_table(
            [
                "phase",
                "offered spans/s",
                "sent spans/s",
                "acknowledged spans/s",
                "requests OK",
                "refused",
                "unknown",
                "status codes",
                "RSS median MiB",
                "RSS peak MiB",
            ],
            [
                [
                    name,
                    numbers.get("offered_spans_per_second"),
                    numbers.get("sent_spans_per_second"),
                    numbers.get("acknowledged_spans_per_second"),
                    numbers.get("requests", {}).get("acknowledged"),
                    numbers.get("requests", {}).get("refused"),
                    numbers.get("requests", {}).get("unknown"),
                    ", ".join(
                        f"{code} {count}" for code, count in numbers.get("status_codes", {}).items()
                    ),
                    rss.get(name, {}).get("median_mib"),
                    rss.get(name, {}).get("peak_mib"),
                ]
                for name, numbers in [("idle", {}), *result["phases"].items(), ("drain", {})]
            ],
        ),
        f"Peak RSS over the whole run: **{result['peak_rss_mib']} MiB**; the documented bound "
        f"(docs/reliability.md): {result['bound_mib']} MiB ("
        + ", ".join(
            f"{key[:-4]} {value}" for key, value in result["bound"].items() if key != "total_mib"
        )
        + "): "
        f"**{'within' if result['peak_rss_mib'] <= result['bound_mib'] else 'ABOVE'}**.",
        "",
        f"Resent after the flood with the same bytes: {result['resent']['acknowledged']} of "
        f"{result['resent']['requests']} refused requests acknowledged "
        f"({result['resent']['attempts']} attempts).",
        "",
        markdown_table(list(result["invariants"]), [list(result["invariants"].values())]),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run; prints only")
    args = parser.parse_args(argv)
    result = {"machine": machine_info(), **run(QUICK if args.quick else FULL)}
    result["peak_rss_mib"] = max(numbers["peak_mib"] for numbers in result["rss"].values())
    result["bound_mib"] = result["bound"]["total_mib"]
    print(
        json.dumps({key: value for key, value in result.items() if key != "rss_samples"}, indent=2)
    )
    return publish("memory", result, markdown(result), quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())

"""``python -m harness.ground_truth.read_reports [--findings] STORE RUN...``: every run's JSON
report (or findings) at once.

The same steps as ``grpc-overhead report --format json --run RUN`` (assemble,
settle, ``build_report``, ``to_json``), or with ``--findings`` as ``grpc-overhead
findings --format json --run RUN``, with one engine start for all runs. Prints
``{run_id: report}``.
"""

from __future__ import annotations

import json
import sys

from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.findings import findings
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.report import build_report, to_json
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store import open_store


def main(argv: list[str]) -> int:
    read_findings = argv[:1] == ["--findings"]
    argv = argv[1:] if read_findings else argv
    if len(argv) < 2:
        print(
            "usage: python -m harness.ground_truth.read_reports [--findings] STORE RUN...",
            file=sys.stderr,
        )
        return 2
    store_dir, run_ids = argv[0], argv[1:]
    options = CallsOptions()
    with open_store(store_dir) as store:
        create_calls(store, options)
        settle(store, options)
        bodies = {
            run_id: findings(store, CallFilters(run_id=run_id), options=options).to_json()
            if read_findings
            else to_json(build_report(store, CallFilters(run_id=run_id), options=options))
            for run_id in run_ids
        }
    print(json.dumps(bodies))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

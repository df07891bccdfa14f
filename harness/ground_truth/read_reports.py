"""``python -m harness.ground_truth.read_reports STORE RUN...``: every run's JSON report at once.

The same steps as ``grpc-overhead report --format json --run RUN`` (assemble,
settle, ``build_report``, ``to_json``), with one engine start for all runs.
Prints ``{run_id: report}``.
"""

from __future__ import annotations

import json
import sys

from grpc_overhead.analyzer.calls import CallFilters, CallsOptions, create_calls
from grpc_overhead.analyzer.report import build_report, to_json
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store import open_store


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m harness.ground_truth.read_reports STORE RUN...", file=sys.stderr)
        return 2
    store_dir, run_ids = argv[0], argv[1:]
    options = CallsOptions()
    with open_store(store_dir) as store:
        create_calls(store, options)
        settle(store, options)
        bodies = {
            run_id: to_json(build_report(store, CallFilters(run_id=run_id), options=options))
            for run_id in run_ids
        }
    print(json.dumps(bodies))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

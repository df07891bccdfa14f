"""``python -m harness.ground_truth.findings.read_findings STORE RUN...``: every run's findings.

The same steps as ``grpc-overhead findings --format json --run RUN`` (assemble,
settle, ``findings``, ``to_json``), with one engine start for all runs. Prints
``{run_id: {"findings": [...], "checked": [...]}}``.
"""

from __future__ import annotations

import json
import sys

from grpc_overhead.analyzer.calls import CallFilters, CallsOptions, create_calls
from grpc_overhead.analyzer.findings import findings
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store import open_store


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m harness.ground_truth.findings.read_findings STORE RUN...",
              file=sys.stderr)  # fmt: skip
        return 2
    store_dir, run_ids = argv[0], argv[1:]
    options = CallsOptions()
    with open_store(store_dir) as store:
        create_calls(store, options)
        settle(store, options)
        answers = {
            run_id: findings(store, CallFilters(run_id=run_id), options=options).to_json()
            for run_id in run_ids
        }
    print(json.dumps(answers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

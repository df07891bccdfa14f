"""``python -m harness.ground_truth.read_reports [--findings] STORE RUN...``: every run's JSON
report (or findings) at once.

The same steps as ``grpc-overhead report --format json --run RUN`` (assemble,
settle, ``build_report``, ``to_json``), or with ``--findings`` as ``grpc-overhead
findings --format json --run RUN``, with one engine start for all runs. Prints
``{run_id: report}``.

Runs are read two at a time, each reader on its own session of the engine: a report's
time goes mostly to analysing its long statements, which is single-threaded, and the
scenarios read reports after their timed calls ended, with the second core idle.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.findings import findings
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.report import build_report, to_json
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store import Store, open_store

#: Readers at once (each one session of the engine).
READERS = 2


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
        readers = max(1, min(READERS, os.cpu_count() or 1, len(run_ids)))
        shares = [run_ids[start::readers] for start in range(readers)]
        sessions = [store] + [store.session() for _ in shares[1:]]
        try:
            with ThreadPoolExecutor(len(shares)) as pool:
                parts = pool.map(
                    lambda session, share: {
                        run_id: _read(session, run_id, options, read_findings) for run_id in share
                    },
                    sessions,
                    shares,
                )
                found = {run_id: body for part in parts for run_id, body in part.items()}
        finally:
            for session in sessions[1:]:
                store.close_session(session)
    print(json.dumps({run_id: found[run_id] for run_id in run_ids}))
    return 0


def _read(store: Store, run_id: str, options: CallsOptions, read_findings: bool) -> Any:
    filters = CallFilters(run_id=run_id)
    if read_findings:
        return findings(store, filters, options=options).to_json()
    return to_json(build_report(store, filters, options=options))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

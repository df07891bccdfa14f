"""A store directory with real calls of every shape (``python -m tests.app.stream_seeded DIR``):
an instrumented echo server and client of ours on loopback (unary Echo, server-streaming
Split, client-streaming Join, bidi Chat of 4 messages each way). Prints the bidi call's
trace id. Its own process: a chDB directory belongs to one process, the app is another."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.analyzer.seed import analysis_store, insert_rows, readable_span_rows, real_spans


def seed(directory: Path) -> str:
    rows = readable_span_rows(real_spans(calls=2, bidi=True))
    with analysis_store(directory) as store:
        insert_rows(store, rows)
        found = store.query(
            "SELECT any(trace_id) AS t FROM grpc_call_phases WHERE rpc_method = 'Chat'"
        )
        return str(found["t"].iloc[0])


if __name__ == "__main__":
    print(seed(Path(sys.argv[1])))

"""A store directory with calls of every kind the pages show, for tests that run the app.

Run in its own process (``python -m tests.app.seeded DIR [CALLS]``) because a
chDB directory belongs to one process and the app that reads it is another.
Calls come from ``tests.analyzer.seed.synthetic_call`` (exact, known phases),
written to ``otel_traces`` the intake's way so the view assembles them:

* methods ``Predict`` (most calls), ``PredictBatch`` and ``Lookup`` (another
  service), runs ``run-a`` and ``run-b`` (``run-b`` only Predict);
* two server instances on two hosts, one sharing the client's host, the
  other with its clock 3 ms ahead (so clock offsets are estimated);
* request sizes from 1 KB to 1 MB and the compression algorithms none, gzip,
  zstd, lz4 and snappy, with processing and serialization growing with size.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.analyzer.seed import MS, US, Truth, analysis_store, insert_spans, synthetic_call

CODECS = ("none", "gzip", "zstd", "lz4", "snappy")
SIZES = (1024, 16 * 1024, 128 * 1024, 1024 * 1024)
#: The calls of ``run-b`` (Predict only): what a filter on run=run-b must show.
DEFAULT_CALLS = 600


def trace_id(n: int) -> str:
    """The trace id of seeded call ``n`` (fixed, so a test can open that call)."""
    return f"{n + 1:032x}"


def spans(calls: int, start_ns: int) -> list:
    result = []
    for n in range(calls):
        size = SIZES[n % len(SIZES)]
        codec = CODECS[(n // len(SIZES)) % len(CODECS)]
        remote = n % 3 == 0
        method, service = ("Predict", "predict.Predictor")
        if n % 10 == 7:
            method = "PredictBatch"
        elif n % 10 == 9:
            method, service = ("Lookup", "features.FeatureStore")
        run = "run-b" if method == "Predict" and n % 2 else "run-a"
        scale = size / 1024
        truth = Truth(
            start=start_ns + n * 20 * MS,
            client_serialize=int((5 + 0.6 * scale) * US),
            request_network=int((150 + 0.8 * scale + (n % 7) * 20) * US),
            server_queue=int((40 + (n % 11) * 30) * US),
            pool_wait=int((30 + (n % 11) * 25) * US),
            request_deserialize=int((4 + 0.4 * scale) * US),
            processing=int((1.5 + 0.002 * scale + (n % 13) * 0.1) * MS),
            response_serialize=int((3 + 0.05 * scale) * US),
            response_network=int((120 + (n % 5) * 15) * US),
            client_deserialize=int((3 + 0.05 * scale) * US),
            server_offset=3 * MS if remote else 0,
        )
        client, server = synthetic_call(
            truth,
            client_host="client-1",
            server_host="server-2" if remote else "client-1",
            service=service,
            method=method,
            run_id=run,
            request_bytes=size,
            response_bytes=max(256, size // 16),
            ids=(trace_id(n), f"{2 * n + 2:016x}", f"{2 * n + 3:016x}"),
        )
        server.resource["service.instance.id"] = "predictor-b" if remote else "predictor-a"
        for span in (client, server):
            span.attributes["grpc.compression"] = codec
        result += [client, server]
    return result


def seed(directory: Path, calls: int = DEFAULT_CALLS, start_ns: int | None = None) -> int:
    """Write ``calls`` calls into a new store at ``directory``; returns the spans written."""
    from tests.analyzer.seed import BASE_NS

    with analysis_store(directory) as store:
        written = insert_spans(store, spans(calls, BASE_NS if start_ns is None else start_ns))
        record_runs(store)
        return written


def record_runs(store) -> None:
    """``run-a`` and ``run-b`` as the two cells of an experiment ``seeded`` (the Experiments
    page), their phases taken from the seeded calls."""
    from grpc_overhead.analyzer.runs import (
        RunRecord,
        create_runs,
        phase_summary,
        record_run,
        run_calls,
    )

    create_runs(store)
    for cell, run in enumerate(("run-a", "run-b")):
        phases = phase_summary(run_calls(store, run))
        total = phases["total"]["p50_us"]
        record_run(
            store,
            RunRecord(
                run_id=run,
                experiment="seeded",
                invocation="seeded-1",
                cell=cell,
                config={"run": run, "calls": 0},
                started_ns=0,
                ended_ns=10**9,
                calls=phases["total"]["calls"],
                errors=0,
                calls_per_s=100.0 * (cell + 1),
                predictions_per_s=2e4 * (cell + 1),
                p50_us=total,
                p99_us=None if total is None else total * 2,
                phases=phases,
            ),
        )


if __name__ == "__main__":
    target = Path(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_CALLS
    print(seed(target, count))

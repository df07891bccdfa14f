"""A store of known calls for the dashboard tests, and the variables/time range to query it.

Three methods, two runs, three server instances, two hosts (one pair with a
server clock 5 ms ahead), gzip on one method, and failed calls: enough for
every panel to show something a test can check against the seed and ``report``;
and an experiment of two cells (grpc_runs rows for run-1 and run-2, through ``runs``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from grpc_overhead.analyzer.runs import RunRecord, create_runs, record_run
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.seed import (
    BASE_NS,
    MS,
    US,
    Span,
    Truth,
    analysis_store,
    calls_across_hosts,
    compress_with,
    insert_spans,
    synthetic_call,
)
from tests.dashboards.datasource import ALL, QueryContext, Variable

SERVICE = "predict.Predictor"
PREDICT_CALLS = 120
BATCH_CALLS = 60
REMOTE_CALLS = 40
FAILED_CALLS = 3  # of the Predict calls
BATCH_REQUEST_BYTES = 100_000
SERVER_OFFSET_NS = 5 * MS
INSTANCES = ("s-1", "s-2")


def _set_instance(span: Span, instance: str) -> None:
    span.resource = {**span.resource, "service.instance.id": instance}


def calls() -> Iterator[Span]:
    """Every span of the seed, with the facts the tests check recorded in the constants."""
    for index in range(PREDICT_CALLS):
        truth = replace(Truth(), start=BASE_NS + index * 10 * MS, processing=MS + index * 10 * US)
        client, server = synthetic_call(truth, method="Predict", run_id="run-1")
        _set_instance(server, INSTANCES[index % 2])
        if index < FAILED_CALLS:
            for span in (client, server):
                span.status = "Error"
                span.attributes = {**span.attributes, "rpc.grpc.status_code": "14"}
        yield from (client, server)
    for index in range(BATCH_CALLS):
        truth = replace(Truth(), start=BASE_NS + 2_000 * MS + index * 10 * MS, processing=4 * MS)
        client, server = synthetic_call(
            truth, method="PredictBatch", run_id="run-2", request_bytes=BATCH_REQUEST_BYTES
        )
        compress_with("gzip", client, server)
        _set_instance(client, "c-2")
        _set_instance(server, "s-1")
        yield from (client, server)
    for client, server in calls_across_hosts(
        REMOTE_CALLS,
        server_offset=SERVER_OFFSET_NS,
        request_network=300 * US,
        response_network=200 * US,
        jitter=100 * US,
        start=BASE_NS + 4_000 * MS,
    ):
        for span in (client, server):
            span.attributes = {**span.attributes, "rpc.method": "Remote"}
            span.name = f"{SERVICE}/Remote"
        _set_instance(server, "s-3")
        yield from (client, server)


EXPERIMENT = "batching"
INVOCATION = "batching-20261124T120000"
#: The experiment's two cells: run-1 (Predict) and run-2 (PredictBatch), as
#: ``experiment`` records them (grpc_runs), with load-generator numbers of their own.
RUNS = (
    RunRecord(
        run_id="run-1",
        experiment=EXPERIMENT,
        invocation=INVOCATION,
        cell=0,
        config={"batch": 1, "transport": "grpc"},
        started_ns=BASE_NS,
        ended_ns=BASE_NS + PREDICT_CALLS * 10 * MS,
        calls=PREDICT_CALLS,
        errors=FAILED_CALLS,
        calls_per_s=100.0,
        predictions_per_s=97.5,
        p50_us=2100.0,
        p99_us=3300.0,
    ),
    RunRecord(
        run_id="run-2",
        experiment=EXPERIMENT,
        invocation=INVOCATION,
        cell=1,
        config={"batch": 64, "transport": "grpc"},
        started_ns=BASE_NS + 2_000 * MS,
        ended_ns=BASE_NS + 2_000 * MS + BATCH_CALLS * 10 * MS,
        calls=BATCH_CALLS,
        errors=0,
        calls_per_s=100.0,
        predictions_per_s=6400.0,
        p50_us=5200.0,
        p99_us=5900.0,
        # as ``experiment`` records a cell against its baseline, taken in three rounds
        rounds=[{"round": k, "calls": BATCH_CALLS // 3} for k in range(3)],
        under_load=True,
        comparison={
            "baseline_run_id": "run-1",
            "baseline_label": "batch=1",
            "phase": "total",
            "verdict": "slower",
            "diff_us": 3100.0,
            "ci_us": [2800.5, 3400.25],
        },
    ),
)


def seeded_store(directory: Path) -> Iterator[Store]:
    with analysis_store(directory) as store:
        insert_spans(store, list(calls()))
        create_runs(store)
        for record in RUNS:
            record_run(store, record)
        # A cell of another experiment (no calls stored): no panel of this one shows it.
        record_run(store, replace(RUNS[0], run_id="run-x", experiment="other", cell=0))
        yield store


#: The time picker: one minute before the first call to an hour after.
CONTEXT = QueryContext(
    datetime.fromtimestamp(BASE_NS // 1_000_000_000 - 60, UTC),
    datetime.fromtimestamp(BASE_NS // 1_000_000_000 + 3600, UTC),
    timedelta(seconds=10),
)
EMPTY_RANGE = QueryContext(
    datetime.fromtimestamp(BASE_NS // 1_000_000_000 - 7200, UTC),
    datetime.fromtimestamp(BASE_NS // 1_000_000_000 - 3600, UTC),
)


def variables(
    service: str | list[str] = ALL,
    method: str | list[str] = ALL,
    run: str | list[str] = ALL,
    instance: str | list[str] = ALL,
    jaeger_url: str = "http://127.0.0.1:16686",
    experiment: str = EXPERIMENT,
    invocation: str | list[str] = ALL,
) -> dict[str, Variable]:
    """Selections as Grafana holds them; options as the variables' queries list them."""
    return {
        "datasource": Variable("datasource", "grpc-overhead-clickhouse"),
        "database": Variable("database", "default"),
        "service": Variable("service", service, [SERVICE]),
        "method": Variable("method", method, ["Predict", "PredictBatch", "Remote"]),
        "run": Variable("run", run, ["run-1", "run-2"]),
        "instance": Variable("instance", instance, ["c-1", "c-2", "s-1", "s-2", "s-3"]),
        "jaeger_url": Variable("jaeger_url", jaeger_url),
        "experiment": Variable("experiment", experiment, [EXPERIMENT, "other"]),
        "invocation": Variable("invocation", invocation, [INVOCATION]),
    }

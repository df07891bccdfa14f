"""Where a span's intake CPU goes: each statement of the store path, per span and per batch.

``bench.intake`` runs this after its end-to-end rounds, in the same process and
run. Every statement of ``ProtobufSqlExporter``'s path is timed on its own (CPU
of the whole process, so the engine's threads and background merges count), on
a one-span batch and on a batch of ``requests_per_batch`` collector-sized
requests, interleaved. The difference gives the two numbers that matter:

* ``cpu_us_per_span``: what one more span costs (the slope);
* ``batch_fixed_cpu_ms``: what one more batch costs however small (the
  intercept: mostly the engine's analysis of a large statement).

From both, ``cpu_us_per_span_at`` gives the total per span for SDK-sized (512)
and collector-sized batches, the two end-to-end workloads.

Stages: ``parse`` (the Protobuf input format into the staging table),
``counts`` (spans and rejections per request), ``span_keys`` and
``duplicates`` (the check for spans stored already, with a million other
spans in the store), ``mapping`` (INSERT ... SELECT into a Null table:
the SQL that turns staged OTLP into exporter rows), ``write`` (the same into
``otel_traces``, minus the mapping), ``calls_view`` (the same write with the
``grpc_calls`` materialized view ``serve`` creates, minus the write without
it) and ``merges`` (``OPTIMIZE ... FINAL`` of both tables after the writes:
merge work the writes left to the background).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.common import median, rounded
from bench.intake_requests import realistic_request
from grpc_overhead.analyzer import schema
from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.intake import protobuf_sql
from grpc_overhead.analyzer.intake.exporter import ProtobufSqlExporter
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store

SPANS_PER_REQUEST = 8192
STAGES = (
    "parse",
    "counts",
    "span_keys",
    "duplicates",
    "mapping",
    "write",
    "calls_view",
    "merges",
)
#: Batch sizes for ``cpu_us_per_span_at``: one SDK-sized request, a collector-sized one.
BATCH_SIZES = (512, 8192)

#: A million spans of the last two hours (the duplicates check reads the store).
MILLION_SPANS = """\
INSERT INTO otel_traces (Timestamp, TraceId, SpanId, SpanName, ServiceName, SpanKind, Duration)
SELECT now64(9) - toIntervalMillisecond(number % 7200000),
    lower(hex(concat(reinterpretAsFixedString(cityHash64(number, 1)),
                     reinterpretAsFixedString(cityHash64(number, 2))))),
    lower(hex(reinterpretAsFixedString(cityHash64(number, 3)))),
    concat('span-', toString(number % 8)), 'svc', 'Client', 1000
FROM numbers(1000000)"""


class _Batch:
    """One batch's statements, exactly as the exporter runs them, each callable alone."""

    def __init__(self, store: Store, exporter: ProtobufSqlExporter, requests: list[bytes]):
        self.store, self.exporter = store, exporter
        self.chunks = [
            chunk
            for index, data in enumerate(requests)
            for chunk in protobuf_sql.framed(data, index)
        ]
        # No request withdrawn, no span stored already.
        self.parameters = {"kept": list(range(len(requests))), "stored": [], "repeated": []}
        traces = schema.SchemaOptions().qualified_traces_table()
        self.transform = protobuf_sql.transform_insert(traces)
        self.into_null = self.transform.replace(traces, "bench_null", 1)

    def parse(self) -> None:
        self.store.command(protobuf_sql.TRUNCATE_STAGING)
        self.store.insert_encoded(
            self.exporter._statement, "Protobuf", self.chunks, self.exporter._settings
        )

    def counts(self) -> None:
        self.store.query(protobuf_sql.REQUEST_COUNTS)

    def span_keys(self) -> None:
        self.store.command(protobuf_sql.TRUNCATE_SPAN_KEYS)
        self.store.command(protobuf_sql.STAGE_SPAN_KEYS, {"kept": self.parameters["kept"]})

    def duplicates(self) -> None:
        self.store.query(self.exporter._duplicates)

    def mapping(self) -> None:
        self.store.command(self.into_null, self.parameters)

    def write(self) -> None:
        self.store.command(self.transform, self.parameters)


def stage_numbers(requests_per_batch: int = 4, repeats: int = 5) -> dict[str, Any]:
    """CPU of each store stage: per span (slope) and per batch (intercept)."""
    large = [realistic_request(SPANS_PER_REQUEST, 100 + seed) for seed in range(requests_per_batch)]
    sizes = {"one": 1, "large": requests_per_batch * SPANS_PER_REQUEST}
    samples: dict[tuple[str, str], list[float]] = {
        (stage, size): [] for stage in STAGES for size in sizes
    }
    with tempfile.TemporaryDirectory(prefix="bench-intake-stages-") as directory:
        store = open_store(os.path.join(directory, "store"))
        try:
            exporter = ProtobufSqlExporter(store)
            exporter.start()
            store.command("CREATE TABLE bench_null AS otel_traces ENGINE = Null")
            batches = {"one": _Batch(store, exporter, [realistic_request(1, 7)])}
            batches["large"] = _Batch(store, exporter, large)

            def each(action: Callable[[_Batch], None], stage: str) -> None:
                for round_index in range(repeats):  # sizes interleaved, order alternating
                    order = list(sizes) if round_index % 2 == 0 else list(reversed(sizes))
                    for size in order:
                        batch = batches[size]
                        batch.parse()
                        samples[(stage, size)].append(_cpu(lambda b=batch: action(b)))

            # The check for spans stored already reads the store: a million spans in it.
            store.command(MILLION_SPANS)
            each(lambda batch: batch.parse(), "parse")
            each(_Batch.span_keys, "span_keys")
            for size, batch in batches.items():  # the query reads the keys staged last
                batch.parse()
                batch.span_keys()
                samples[("duplicates", size)] = [_cpu(batch.duplicates) for _ in range(repeats)]
            store.command("TRUNCATE TABLE otel_traces")
            each(_Batch.counts, "counts")
            each(_Batch.mapping, "mapping")
            each(_Batch.write, "write")
            store.command("TRUNCATE TABLE otel_traces")
            create_calls(store, CallsOptions())
            each(_Batch.write, "calls_view")
            stored = int(store.query("SELECT count() AS n FROM otel_traces")["n"][0])
            merges = _cpu(lambda: _merge(store))
            exporter.shutdown()
            plain_insert = _plain_insert_rows_per_second(store)
        finally:
            store.close()
    slope: dict[str, float] = {}
    fixed: dict[str, float] = {}
    for stage in STAGES:
        if stage == "merges":
            continue
        one = median(samples[(stage, "one")]) or 0.0
        many = median(samples[(stage, "large")]) or 0.0
        slope[stage], fixed[stage] = (many - one) / (sizes["large"] - 1), one
    for derived, base in (("write", "mapping"), ("calls_view", "write")):
        slope[derived] -= slope[base]
        fixed[derived] -= fixed[base]
    slope["merges"], fixed["merges"] = merges / max(1, stored), 0.0
    return {
        "spans_per_batch": sizes["large"],
        "repeats": repeats,
        "cpu_us_per_span": {stage: rounded(slope[stage] * 1e6, 2) for stage in STAGES}
        | {"total": rounded(sum(slope.values()) * 1e6, 2)},
        "batch_fixed_cpu_ms": {stage: rounded(fixed[stage] * 1e3, 1) for stage in STAGES}
        | {"total": rounded(sum(fixed.values()) * 1e3, 1)},
        "cpu_us_per_span_at": {
            str(spans): rounded((sum(slope.values()) + sum(fixed.values()) / spans) * 1e6, 2)
            for spans in (*BATCH_SIZES, sizes["large"])
        },
        "plain_insert_rows_per_second": plain_insert,
    }


def _merge(store: Store) -> None:
    for table in ("otel_traces", CallsOptions().calls):
        store.command(f"OPTIMIZE TABLE {table} FINAL")


def _plain_insert_rows_per_second(store: Store) -> int:
    """Stored rows copied into a second table with the exporter's schema: the write alone."""
    copy_options = schema.SchemaOptions(traces_table="bench_insert_copy")
    schema.create_schema(store, copy_options)
    rows = int(store.query("SELECT count() AS n FROM otel_traces")["n"][0])
    copy = f"INSERT INTO {copy_options.qualified_traces_table()} SELECT * FROM otel_traces"
    seconds = median([_wall(lambda: store.command(copy)) for _ in range(3)]) or 1.0
    return round(rows / seconds)


def markdown_lines(stages: dict[str, Any]) -> list[str]:
    """The stage table of ``bench/results/intake.md``."""
    at = stages["cpu_us_per_span_at"]
    header = "| stage | us/span (slope) | ms/batch (fixed) |" + "".join(
        f" us/span at {spans} spans/batch |" for spans in at
    )
    lines = [
        "Store stages, CPU of the intake process (slope: per span; fixed: per batch, from "
        f"a one-span batch; batches of {stages['spans_per_batch']} spans, "
        f"{stages['repeats']} interleaved repeats):",
        "",
        header,
        "|" + "---|" * (3 + len(at)),
    ]
    for stage in (*STAGES, "total"):
        slope, fixed = stages["cpu_us_per_span"][stage], stages["batch_fixed_cpu_ms"][stage]
        cells = [
            f"{slope + fixed * 1e3 / int(spans):.2f}" if stage != "total" else f"**{value}**"
            for spans, value in at.items()
        ]
        lines.append(f"| {stage} | {slope} | {fixed} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Plain insert into the exporter's schema: "
        f"{stages['plain_insert_rows_per_second']:,} rows/s.",
        "",
    ]
    return lines


def _cpu(action: Callable[[], object]) -> float:
    started = time.process_time()
    action()
    return time.process_time() - started


def _wall(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started

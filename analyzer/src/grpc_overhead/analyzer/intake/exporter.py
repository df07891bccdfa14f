"""Exporters: a batch of encoded OTLP requests in, rows in ``otel_traces``, outcomes out.

``export`` answers per request (spans seen, spans rejected, or the whole
request malformed) and raises ``AnalyzerError`` when the store failed, in
which case nothing of the batch is acknowledged and every caller is told to
retry. Two implementations, chosen by what the store can do:

* ``ProtobufSqlExporter``: the engine parses and maps (chDB; see
  ``protobuf_sql``).
* ``RowsExporter``: Python parses and maps (``rows``), the store inserts
  columns (a ClickHouse server through clickhouse-driver).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from grpc_overhead.analyzer.errors import QueryError, brief
from grpc_overhead.analyzer.intake import journal, protobuf_sql
from grpc_overhead.analyzer.intake.rows import COLUMNS, Rows, request_rows
from grpc_overhead.analyzer.intake.salvage import salvage
from grpc_overhead.analyzer.intake.values import MAX_NESTING_DEPTH
from grpc_overhead.analyzer.schema import SchemaOptions, create_schema
from grpc_overhead.analyzer.store.base import Store

REJECTED_SPAN_MESSAGE = (
    "{rejected} span(s) rejected: trace_id must be 0 or 16 bytes, span_id and "
    "parent_span_id 0 or 8 bytes (also in links), and array/map attribute values "
    f"well-formed and nested at most {MAX_NESTING_DEPTH} levels deep"
)

#: Which requests of a batch may still be stored: called once, right before the
#: statement that stores them; returns their indexes (the others timed out and were
#: answered "not stored"). ``None``: all of them.
Claim = Callable[[], Sequence[int]]


def _claim_all(count: int) -> Claim:
    return lambda: range(count)


@dataclass
class RequestOutcome:
    spans: int = 0
    rejected: int = 0
    error: str = ""
    malformed: bool = False
    #: Not stored because its caller stopped waiting before the batch was committed.
    withdrawn: bool = False
    #: Spans left out because the store has them already (a retry whose bytes differ
    #: from the first attempt's, e.g. a collector's batch cut anew after its restart).
    duplicates: int = 0

    @property
    def accepted(self) -> int:
        """Spans this request added to the store."""
        return self.spans - self.rejected - self.duplicates


class Exporter(Protocol):
    #: Where it stores (the processor journals stored requests there too, ``journal``).
    store: Store
    schema: SchemaOptions
    #: Held from the check for spans stored already to the statement that stores the
    #: rest. Exporters writing to the same table share one (``share_commit_lock``), so a
    #: span sent twice at once (a retry while the first attempt is being stored by
    #: another worker) cannot pass both checks.
    commit_lock: threading.Lock

    def start(self) -> None: ...

    def export(self, requests: list[bytes], claim: Claim | None = None) -> list[RequestOutcome]: ...

    def shutdown(self) -> None: ...


def share_commit_lock(exporters: Sequence[Exporter]) -> None:
    """One ``commit_lock`` for exporters writing to the same table (see ``Exporter``)."""
    lock = threading.Lock()
    for exporter in exporters:
        exporter.commit_lock = lock


def exporter_for(store: Store, schema: SchemaOptions | None = None) -> Exporter:
    if store.backend.encoded_inserts:
        return ProtobufSqlExporter(store, schema)
    return RowsExporter(store, schema)


class ProtobufSqlExporter:
    """Length-delimited requests -> staging table (Protobuf format) -> INSERT ... SELECT."""

    def __init__(self, store: Store, schema: SchemaOptions | None = None) -> None:
        self.store = store
        self.schema = schema or SchemaOptions.for_store(store)
        self.commit_lock = threading.Lock()
        self._schema_dir = ""
        self._statement = ""
        self._settings = ""
        table = self.schema.qualified_traces_table()
        self._transform = protobuf_sql.transform_insert(table)
        self._transform_once = protobuf_sql.transform_insert(table, once=True)
        self._duplicates = protobuf_sql.duplicates_query(table)

    def start(self) -> None:
        create_schema(self.store, self.schema)
        journal.create(self.store, self.schema)
        self._schema_dir = tempfile.mkdtemp(prefix="grpc-overhead-intake-")
        schema_path = os.path.join(self._schema_dir, "otlp_intake.proto")
        with open(schema_path, "w", encoding="utf-8") as handle:
            handle.write(protobuf_sql.INTAKE_PROTO)
        self._statement, self._settings = protobuf_sql.staging_insert(schema_path)
        self.store.register_function(
            protobuf_sql.UDF_NAME,
            protobuf_sql.complex_value,
            protobuf_sql.UDF_ARGUMENTS,
            protobuf_sql.UDF_RETURNS,
        )
        for statement in (
            protobuf_sql.CREATE_STAGING,
            protobuf_sql.TRUNCATE_STAGING,
            protobuf_sql.CREATE_SPAN_KEYS,
            protobuf_sql.TRUNCATE_SPAN_KEYS,
        ):
            self.store.command(statement)

    def shutdown(self) -> None:
        if self._schema_dir:
            shutil.rmtree(self._schema_dir, ignore_errors=True)
            self._schema_dir = ""

    def export(self, requests: list[bytes], claim: Claim | None = None) -> list[RequestOutcome]:
        claim = claim or _claim_all(len(requests))
        outcomes = [RequestOutcome() for _ in requests]
        try:
            self._export(requests, range(len(requests)), outcomes, claim)
        except QueryError as batch_error:
            if len(requests) == 1:
                raise
            # A request the engine cannot store must not take the others down:
            # store each alone; only those that still fail are refused.
            self._truncate()
            outcomes = [RequestOutcome() for _ in requests]
            kept = set(claim())
            for index in sorted(kept):
                try:
                    self._export(requests, range(index, index + 1), outcomes, lambda i=index: [i])
                except QueryError as error:
                    self._truncate()
                    outcomes[index] = RequestOutcome(
                        malformed=True, error=f"cannot store request: {brief(error.message)}"
                    )
            if kept and all(outcomes[index].malformed for index in kept):
                raise batch_error from None  # every request fails alone: the store is at fault
        finally:
            self._truncate()
        return outcomes

    def _truncate(self) -> None:
        for statement in (protobuf_sql.TRUNCATE_STAGING, protobuf_sql.TRUNCATE_SPAN_KEYS):
            with contextlib.suppress(Exception):
                self.store.command(statement)

    def _export(
        self, requests: list[bytes], indexes: range, outcomes: list[RequestOutcome], claim: Claim
    ) -> None:
        staged = self._stage(requests, indexes, outcomes)
        if not staged:
            return
        counts = self.store.query(protobuf_sql.REQUEST_COUNTS)
        seen = set()
        for seq, spans, rejected in zip(
            counts["intake_seq"], counts["spans"], counts["rejected"], strict=True
        ):
            outcome = outcomes[int(seq)]
            seen.add(int(seq))
            outcome.spans, outcome.rejected = int(spans), int(rejected)
            if rejected:
                outcome.error = REJECTED_SPAN_MESSAGE.format(rejected=int(rejected))
        missing = [i for i in staged if i not in seen]
        if missing:  # e.g. the staging insert was cancelled: never acknowledge it
            raise QueryError(
                f"{len(missing)} staged request(s) missing from the staging table "
                "(insert cancelled?)",
                sql=protobuf_sql.REQUEST_COUNTS,
            )
        kept = [i for i in claim() if i in seen]
        if kept:
            with self.commit_lock:
                stored, repeated = self._skip_duplicates(kept, outcomes)
                with self.store.storing_spans():
                    self.store.command(
                        self._transform_once if repeated else self._transform,
                        {"kept": kept, "stored": stored, "repeated": repeated},
                    )
        for index in set(indexes) - set(kept):
            if not outcomes[index].malformed:
                outcomes[index].withdrawn = True

    def _skip_duplicates(
        self, kept: list[int], outcomes: list[RequestOutcome]
    ) -> tuple[list[str], list[str]]:
        """Keys (trace id, span id, start) of staged spans the table has already, and of
        spans staged more than once: each span is stored once, however often it is sent.

        Each skipped copy is counted against the request that carried it (the first
        request of a span staged twice keeps it).
        """
        self.store.command(protobuf_sql.TRUNCATE_SPAN_KEYS)
        self.store.command(protobuf_sql.STAGE_SPAN_KEYS, {"kept": kept})
        frame = self.store.query(self._duplicates)
        stored, repeated = [], []
        for key, seqs, is_stored in zip(frame["key"], frame["seqs"], frame["stored"], strict=True):
            ordered = sorted(int(seq) for seq in seqs)
            if is_stored:
                stored.append(key)
            else:
                repeated.append(key)
                ordered = ordered[1:]
            for seq in ordered:
                outcomes[seq].duplicates += 1
        return stored, repeated

    def _stage(
        self, requests: list[bytes], indexes: range, outcomes: list[RequestOutcome]
    ) -> list[int]:
        """Insert the requests into staging; isolate malformed ones if the batch fails."""
        chunks = [chunk for i in indexes for chunk in protobuf_sql.framed(requests[i], i)]
        try:
            self.store.insert_encoded(self._statement, "Protobuf", chunks, self._settings)
            return list(indexes)
        except QueryError as batch_error:
            self.store.command(protobuf_sql.TRUNCATE_STAGING)
            if len(indexes) == 1:
                outcomes[indexes[0]].malformed = True
                outcomes[indexes[0]].error = f"cannot decode request: {brief(batch_error.message)}"
                return []
        staged = []
        for index in indexes:  # rare: find the culprit(s), keep the others
            message = protobuf_sql.framed(requests[index], index)
            try:
                self.store.insert_encoded(self._statement, "Protobuf", message, self._settings)
                staged.append(index)
            except QueryError as error:
                outcomes[index].malformed = True
                outcomes[index].error = f"cannot decode request: {brief(error.message)}"
        return staged


class RowsExporter:
    """Decode with the generated classes, map in Python, insert columns."""

    def __init__(self, store: Store, schema: SchemaOptions | None = None) -> None:
        self.store = store
        self.schema = schema or SchemaOptions.for_store(store)
        self.commit_lock = threading.Lock()
        self._table = self.schema.qualified_traces_table()

    def start(self) -> None:
        create_schema(self.store, self.schema)
        journal.create(self.store, self.schema)

    def shutdown(self) -> None:
        pass

    def export(self, requests: list[bytes], claim: Claim | None = None) -> list[RequestOutcome]:
        claim = claim or _claim_all(len(requests))
        outcomes = []
        converted: list[Rows | None] = []
        for data in requests:
            try:
                request, dropped = _decoded(data)
            except DecodeError as error:
                outcomes.append(
                    RequestOutcome(malformed=True, error=f"cannot decode request: {brief(error)}")
                )
                converted.append(None)
                continue
            rows = request_rows(request)
            rows.rejected += dropped
            outcome = RequestOutcome(spans=len(rows) + rows.rejected, rejected=rows.rejected)
            if rows.rejected:
                outcome.error = REJECTED_SPAN_MESSAGE.format(rejected=rows.rejected)
            outcomes.append(outcome)
            converted.append(rows)
        batch, origins = Rows(), []
        kept = set(claim())
        for index, rows in enumerate(converted):
            if rows is None:
                continue
            if index in kept:
                batch.extend(rows)
                origins.extend([index] * len(rows))
            else:
                outcomes[index].withdrawn = True
        if len(batch):
            with self.commit_lock:
                batch = self._skip_duplicates(batch, origins, outcomes)
                with self.store.storing_spans():
                    self.store.insert(self._table, COLUMNS, batch.columns)
        return outcomes

    def _skip_duplicates(
        self, batch: Rows, origins: list[int], outcomes: list[RequestOutcome]
    ) -> Rows:
        """``batch`` without the spans the table has already or that came twice (the
        same rule as ``ProtobufSqlExporter._skip_duplicates``, decided in Python)."""
        timestamps, traces, spans = batch.columns[0], batch.columns[1], batch.columns[2]
        identified = [row for row in range(len(batch)) if traces[row] and spans[row]]
        if not identified:
            return batch
        frame = self.store.query(
            _STORED_KEYS.format(table=self._table),
            {
                "first": min(timestamps[row] for row in identified),
                "last": max(timestamps[row] for row in identified),
                "traces": sorted({traces[row] for row in identified}),
            },
        )
        seen = set(zip(frame["TraceId"], frame["SpanId"], frame["start"], strict=True))
        keep = []
        for row in range(len(batch)):
            key = (traces[row], spans[row], timestamps[row])
            if key[0] and key[1]:
                if key in seen:
                    outcomes[origins[row]].duplicates += 1
                    continue
                seen.add(key)
            keep.append(row)
        if len(keep) == len(batch):
            return batch
        kept = Rows(rejected=batch.rejected, errors=batch.errors)
        kept.columns = [[column[row] for row in keep] for column in batch.columns]
        return kept


#: Which of a batch's spans the table has already (``RowsExporter._skip_duplicates``).
_STORED_KEYS = (
    "SELECT TraceId, SpanId, toUnixTimestamp64Nano(Timestamp) AS start FROM {table} "
    "WHERE Timestamp >= fromUnixTimestamp64Nano({{first:Int64}}) "
    "AND Timestamp <= fromUnixTimestamp64Nano({{last:Int64}}) "
    "AND TraceId IN {{traces:Array(String)}}"
)


def _decoded(data: bytes) -> tuple[ExportTraceServiceRequest, int]:
    """The request, and how many spans had to be left out to decode it (``salvage``)."""
    try:
        return ExportTraceServiceRequest.FromString(data), 0
    except DecodeError:
        salvaged = salvage(data)
        if salvaged is None:
            raise
        return ExportTraceServiceRequest.FromString(salvaged[0]), salvaged[1]

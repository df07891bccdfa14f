"""Each span is stored once, however often it is sent (a real intake on a real chDB store).

A retry with the same bytes is answered from the processor's digests; these
tests send the same spans in *different* bytes, as a collector does when it
re-cuts its batches after a restart, and as a sender does when it retries a
request into a new intake process. Both exporters (the engine's mapping and
Python's) are held to the same rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.intake.exporter import ProtobufSqlExporter, RowsExporter
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.otlp_requests import request, span, stub

pytestmark = pytest.mark.e2e

EXPORTERS: dict[str, Callable[[Store], object]] = {
    "chdb": ProtobufSqlExporter,
    "python": RowsExporter,
}


def _start(store: Store, exporter: str, flush_interval: float = 0.02) -> Intake:
    config = IntakeConfig(port=0, flush_interval=flush_interval)
    intake = Intake(store, config, exporter=EXPORTERS[exporter](store))  # type: ignore[arg-type]
    intake.start()
    return intake


@pytest.fixture(params=sorted(EXPORTERS))
def exporter(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "store") as opened:
        yield opened


def _rows(store: Store) -> list[tuple[int, str, int]]:
    """(span number, span name, copies) of every stored span id."""
    frame = store.query(
        "SELECT SpanId, max(SpanName) AS name, count() AS copies FROM otel_traces "
        "GROUP BY SpanId ORDER BY SpanId"
    )
    return [
        (int(span_id, 16) - 1000 if span_id else -1, name, int(copies))
        for span_id, name, copies in zip(
            frame["SpanId"], frame["name"], frame["copies"], strict=True
        )
    ]


def test_a_batch_cut_anew_stores_only_the_new_spans(store: Store, exporter: str) -> None:
    intake = _start(store, exporter)
    channel, export = stub(intake.port)
    try:
        export(request(span(1), span(2), span(3)), timeout=10)
        # Same spans in other bytes: another order, one new span, another scope name.
        export(request(span(3), span(4), span(1), scope="re-cut"), timeout=10)
        stats = intake.stats()
    finally:
        channel.close()
        intake.stop()
    assert _rows(store) == [(n, f"span-{n}", 1) for n in (1, 2, 3, 4)]
    assert (stats.spans_received, stats.spans_inserted, stats.duplicate_spans) == (6, 4, 2)
    assert stats.spans_accepted == 4 and stats.spans_rejected == 0


def test_a_span_twice_in_one_request_or_one_batch_is_stored_once(
    store: Store, exporter: str
) -> None:
    # A long flush interval puts the concurrent requests into one batch.
    intake = _start(store, exporter, flush_interval=0.3)
    channel, export = stub(intake.port)
    try:
        export(request(span(5), span(5), span(6)), timeout=10)
        futures = [export.future(request(span(7), span(8 + n)), timeout=10) for n in range(3)]
        for future in futures:
            future.result()
        stats = intake.stats()
    finally:
        channel.close()
        intake.stop()
    assert _rows(store) == [(n, f"span-{n}", 1) for n in (5, 6, 7, 8, 9, 10)]
    assert (stats.spans_inserted, stats.duplicate_spans) == (6, 3)


def test_spans_without_ids_or_with_another_start_are_not_duplicates(
    store: Store, exporter: str
) -> None:
    intake = _start(store, exporter)
    channel, export = stub(intake.port)
    try:
        anonymous = [span(20, span_id=b""), span(20, span_id=b"", name="again")]
        export(request(*anonymous, span(21)), timeout=10)
        # The same ids with another start time: another span (a sender reusing ids),
        # kept, as the exporter would keep it.
        export(request(span(21, start_time_unix_nano=span(21).start_time_unix_nano + 1)))
        stats = intake.stats()
    finally:
        channel.close()
        intake.stop()
    assert _rows(store) == [(-1, "span-20", 2), (21, "span-21", 2)]
    assert stats.duplicate_spans == 0


def test_a_retry_into_a_restarted_intake_is_not_stored_again(store: Store, exporter: str) -> None:
    first = _start(store, exporter)
    channel, export = stub(first.port)
    try:
        export(request(span(30), span(31)), timeout=10)
    finally:
        channel.close()
        first.stop()
    # The new process has no memory of the first one's requests: only the store knows.
    second = _start(store, exporter)
    channel, export = stub(second.port)
    try:
        export(request(span(31), span(30), span(32)), timeout=10)
        stats = second.stats()
    finally:
        channel.close()
        second.stop()
    assert _rows(store) == [(n, f"span-{n}", 1) for n in (30, 31, 32)]
    assert (stats.spans_inserted, stats.duplicate_spans) == (1, 2)


def test_the_same_spans_in_two_workers_at_once_are_stored_once(store: Store) -> None:
    """Two export workers (two store sessions): a retry taken by one worker while the
    first attempt is being stored by the other must not pass both checks."""
    intake = Intake(store, IntakeConfig(port=0, flush_interval=0.001, export_workers=2))
    intake.start()
    channel, export = stub(intake.port)
    try:
        futures = []
        for number in range(40, 100, 3):
            spans = [span(number), span(number + 1), span(number + 2)]
            futures.append(export.future(request(*spans), timeout=20))
            futures.append(export.future(request(*reversed(spans), scope="retry"), timeout=20))
        for future in futures:
            future.result()
        stats = intake.stats()
    finally:
        channel.close()
        intake.stop()
    assert _rows(store) == [(n, f"span-{n}", 1) for n in range(40, 100)]
    assert (stats.spans_inserted, stats.duplicate_spans) == (60, 60)

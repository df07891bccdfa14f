"""When the store cannot take spans, clients hear a retryable UNAVAILABLE; nothing is lost."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.intake.exporter import ProtobufSqlExporter, RowsExporter
from grpc_overhead.analyzer.intake.processor import BatchProcessor
from grpc_overhead.analyzer.store import open_store
from tests.analyzer.otlp_requests import (
    python_rows,
    request,
    span,
    stored_rows,
    stub,
    tricky_request,
)

pytestmark = pytest.mark.e2e


def test_store_down_answers_unavailable(tmp_path: Path) -> None:
    store = open_store(tmp_path / "store")
    intake = Intake(store, IntakeConfig(port=0, flush_interval=0.01))
    intake.start()
    channel, export = stub(intake.port)
    try:
        export(request(span(1)), timeout=10)
        store.close()  # the store goes away under a running intake
        with pytest.raises(grpc.RpcError) as raised:
            export(request(span(2)), timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "closed" in raised.value.details()
        stats = intake.stats()
        assert stats.requests_refused == 1 and stats.failed_batches == 1
        assert stats.spans_accepted == 1
    finally:
        channel.close()
        intake.stop()
        store.close()


class _HeldExporter(ProtobufSqlExporter):
    """The real chDB exporter, made to wait: a store that is not keeping up."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.release = threading.Event()

    def export(self, requests: list[bytes], claim=None):  # type: ignore[override]
        self.release.wait(10)
        return super().export(requests, claim)


def test_full_buffer_answers_unavailable_then_recovers(tmp_path: Path) -> None:
    # Distinct requests of one size: copies of the same bytes would be one request.
    payloads = [request(span(first), span(first + 1)) for first in (1, 3, 5, 7)]
    payload = payloads[0]
    with open_store(tmp_path / "store") as store:
        held = _HeldExporter(store)
        config = IntakeConfig(
            port=0,
            flush_interval=0.01,
            batch_bytes=len(payload),
            max_pending_bytes=len(payload) * 2,
        )
        with Intake(store, config, exporter=held) as intake:
            channel, export = stub(intake.port)
            waiting = [export.future(payloads[index], timeout=10) for index in range(2)]
            while intake.stats().pending_bytes < len(payload) * 2:
                threading.Event().wait(0.01)
            with pytest.raises(grpc.RpcError) as raised:
                export(payloads[2], timeout=10)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "not keeping up" in raised.value.details()
            held.release.set()
            for future in waiting:
                future.result()
            export(payloads[3], timeout=10)  # room again: accepted
            channel.close()
            assert intake.stats().requests_refused == 1
        assert int(store.query("SELECT count() AS n FROM otel_traces")["n"][0]) == 6


def test_python_rows_path_stores_the_same_rows(tmp_path: Path) -> None:
    """The exporter used for ClickHouse servers (Python mapping + column insert)."""
    data = tricky_request()
    with open_store(tmp_path / "store") as store:
        with Intake(store, IntakeConfig(port=0), exporter=RowsExporter(store)) as intake:
            channel, export = stub(intake.port)
            bad = span(9)
            bad.span_id = b"\x01"
            response = export(request(bad), timeout=10)
            assert response.partial_success.rejected_spans == 1
            with pytest.raises(grpc.RpcError) as raised:
                export(b"\xff\xff", timeout=10)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            export(data, timeout=10)
            channel.close()
        assert stored_rows(store) == python_rows(data)


class _MeetingExporter(ProtobufSqlExporter):
    """The real chDB exporter, which only proceeds once the other worker is exporting too."""

    def __init__(self, store: object, meeting: threading.Barrier) -> None:
        super().__init__(store)  # type: ignore[arg-type]
        self.meeting = meeting

    def export(self, requests: list[bytes], claim=None):  # type: ignore[override]
        self.meeting.wait()  # BrokenBarrierError (a failed batch) unless both run at once
        return super().export(requests, claim)


def test_two_workers_store_two_batches_at_once(tmp_path: Path) -> None:
    """Each worker writes through its own store session, concurrently."""
    payloads = [request(span(1), span(2)), request(span(3))]
    with open_store(tmp_path / "store") as store:
        meeting = threading.Barrier(2, timeout=10)
        sessions = [store.session(), store.session()]
        exporters = [_MeetingExporter(session, meeting) for session in sessions]
        for exporter in exporters:
            exporter.start()
        processor = BatchProcessor(
            exporters,
            batch_bytes=max(map(len, payloads)),
            flush_interval=0.01,
            max_pending_bytes=sum(map(len, payloads)),
        )
        processor.start()
        try:
            pending = [processor.submit(payload) for payload in payloads]
            outcomes = [item.wait(20) for item in pending]
        finally:
            processor.shutdown()
            for exporter, session in zip(exporters, sessions, strict=True):
                exporter.shutdown()
                store.close_session(session)
        assert [outcome.spans for outcome in outcomes] == [2, 1]
        assert processor.stats.batches == 2 and processor.stats.failed_batches == 0
        assert int(store.query("SELECT count() AS n FROM otel_traces")["n"][0]) == 3


def test_a_request_refused_after_waiting_is_never_stored_later(tmp_path: Path) -> None:
    """The caller's deadline passes while the store is busy: refused, and not stored after."""
    with open_store(tmp_path / "store") as store:
        held = _HeldExporter(store)
        with Intake(store, IntakeConfig(port=0, flush_interval=0.01), exporter=held) as intake:
            channel, export = stub(intake.port)
            blocker = export.future(request(span(1)), timeout=30)  # holds the only worker
            with pytest.raises(grpc.RpcError) as raised:
                export(request(span(2)), timeout=1.0)
            # Answered before the caller's deadline, so the caller knows it was not stored.
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "not stored" in raised.value.details()
            held.release.set()
            blocker.result()
            export(request(span(3)), timeout=10)
            channel.close()
        ids = store.query("SELECT TraceId FROM otel_traces ORDER BY TraceId")["TraceId"]
        assert [int(value, 16) for value in ids] == [1, 3]


class _SlowCommitExporter(ProtobufSqlExporter):
    """The real exporter, whose storing statement starts, then takes longer than callers wait."""

    def export(self, requests: list[bytes], claim=None):  # type: ignore[override]
        def slow_claim():
            claimed = claim() if claim else range(len(requests))
            threading.Event().wait(1.5)
            return claimed

        return super().export(requests, slow_claim)


@pytest.mark.parametrize("pause_s", [0.0, 1.5], ids=["retry-while-storing", "retry-after"])
def test_a_request_stored_after_its_caller_left_is_not_stored_twice(
    tmp_path: Path, pause_s: float
) -> None:
    """The retry of a request stored after its caller's deadline is answered, not stored
    again, whether it arrives while the first copy is still being stored or after."""
    payload = request(span(1), span(2))
    with open_store(tmp_path / "store") as store:
        slow = _SlowCommitExporter(store)
        with Intake(store, IntakeConfig(port=0, flush_interval=0.01), exporter=slow) as intake:
            channel, export = stub(intake.port)
            with pytest.raises(grpc.RpcError) as raised:
                export(payload, timeout=1.0)
            assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            threading.Event().wait(pause_s)
            response = export(payload, timeout=10)  # the caller's retry
            assert response.partial_success.rejected_spans == 0
            channel.close()
        count = store.query("SELECT count() AS n, uniqExact(SpanId) AS u FROM otel_traces")
        assert count.values.tolist() == [[2, 2]]
        assert intake.stats().spans_inserted == 2


def test_the_intake_answers_before_the_collectors_exporter_gives_up() -> None:
    """The shipped collector config waits longer for the intake than the intake waits."""
    import re

    from grpc_overhead.collector.runner import config_path

    text = config_path("embedded").read_text(encoding="utf-8")
    exporter = text[text.index("otlp_grpc/intake:") :]
    timeout = re.search(r"^\s+timeout: (\d+)s$", exporter, re.MULTILINE)
    assert timeout is not None
    assert IntakeConfig().wait_timeout < int(timeout.group(1))


@pytest.mark.parametrize("exporter_class", [_SlowCommitExporter, RowsExporter])
def test_a_retry_after_a_restart_is_not_stored_twice(tmp_path: Path, exporter_class) -> None:
    """Stored, but its caller never heard so (here: its deadline passed; in the fault suite:
    serve was killed before answering). The retry reaches the next intake process, which
    knows the request from the store's journal: answered, not stored again."""
    payload = request(span(1), span(2))
    with open_store(tmp_path / "store") as store:
        config = IntakeConfig(port=0, flush_interval=0.01)
        with Intake(store, config, exporter=_SlowCommitExporter(store)) as first:
            channel, export = stub(first.port)
            with pytest.raises(grpc.RpcError):
                export(payload, timeout=1.0)
            channel.close()
            while first.stats().spans_inserted < 2:
                threading.Event().wait(0.05)
        with Intake(store, config, exporter=exporter_class(store)) as second:  # a new process
            channel, export = stub(second.port)
            response = export(payload, timeout=10)
            assert response.partial_success.rejected_spans == 0
            export(request(span(3)), timeout=10)  # anything new is stored as ever
            channel.close()
        count = store.query("SELECT count() AS n, uniqExact(SpanId) AS u FROM otel_traces")
        assert count.values.tolist() == [[3, 3]]

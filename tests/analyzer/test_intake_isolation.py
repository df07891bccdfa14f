"""A bad span is rejected alone, a bad request alone; innocent requests are stored.

Each poison comes from issue 10: values nested thousands of levels deep,
array bytes that are not a message, span kinds and status codes below zero.
Both exporters (chDB parses the protobuf; Python maps for ClickHouse servers)
are held to the same answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.intake.exporter import ProtobufSqlExporter, RowsExporter
from grpc_overhead.analyzer.intake.values import MAX_NESTING_DEPTH
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.otlp_raw import (
    broken_array,
    key_value,
    nested_array,
    raw_request,
    raw_span,
    text_value,
)
from tests.analyzer.otlp_requests import request, span, stub

pytestmark = pytest.mark.e2e

#: Every status detail and partial-success message stays below this (gRPC metadata).
MESSAGE_LIMIT = 1024

EXPORTERS: dict[str, Callable[[Store], object]] = {
    "chdb": ProtobufSqlExporter,
    "python": RowsExporter,
}


@pytest.fixture(params=sorted(EXPORTERS))
def intake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, int]]:
    with open_store(tmp_path / "store") as store:
        exporter = EXPORTERS[request.param](store)
        # A long flush interval puts concurrent requests into one batch.
        config = IntakeConfig(port=0, flush_interval=0.3)
        with Intake(store, config, exporter=exporter) as running:  # type: ignore[arg-type]
            yield store, running.port


def _span_ids(store: Store) -> list[int]:
    frame = store.query("SELECT SpanId FROM otel_traces ORDER BY SpanId")
    return [int(value, 16) - 1000 for value in frame["SpanId"]]


def test_too_deep_value_rejects_its_span_only(intake: tuple[Store, int]) -> None:
    store, port = intake
    channel, export = stub(port)
    with channel:
        response = export(
            raw_request(
                raw_span(2, key_value(b"ok", nested_array(MAX_NESTING_DEPTH))),
                raw_span(3, key_value(b"deep", nested_array(MAX_NESTING_DEPTH + 1))),
            ),
            timeout=30,
        )
        # Thousands of levels: past the Python decoder's own limit too (salvaged there).
        deepest = export(
            raw_request(raw_span(1, key_value(b"deep", nested_array(5000))), raw_span(4)),
            timeout=30,
        )
    assert response.partial_success.rejected_spans == 1
    message = response.partial_success.error_message
    assert str(MAX_NESTING_DEPTH) in message and len(message) < MESSAGE_LIMIT
    assert deepest.partial_success.rejected_spans == 1
    assert _span_ids(store) == [2, 4]


def test_malformed_value_rejects_its_span_only(intake: tuple[Store, int]) -> None:
    store, port = intake
    channel, export = stub(port)
    with channel:
        response = export(
            raw_request(raw_span(1, key_value(b"broken", broken_array())), raw_span(2)),
            timeout=30,
        )
    assert response.partial_success.rejected_spans == 1
    assert len(response.partial_success.error_message) < MESSAGE_LIMIT
    assert _span_ids(store) == [2]


def test_bad_resource_value_rejects_that_resources_spans(intake: tuple[Store, int]) -> None:
    store, port = intake
    channel, export = stub(port)
    poisoned = raw_request(raw_span(1), raw_span(2), resource=(key_value(b"r", nested_array(999)),))
    with channel:
        response = export(poisoned, timeout=30)
        export(raw_request(raw_span(3)), timeout=30)
    assert response.partial_success.rejected_spans == 2
    assert _span_ids(store) == [3]


def test_poison_in_a_batch_leaves_concurrent_requests_stored(intake: tuple[Store, int]) -> None:
    """Poison requests and innocent ones from other senders, written in the same batch."""
    store, port = intake
    channel, export = stub(port)
    with channel:
        futures = []
        for number in range(1, 41):
            if number % 10 == 0:
                payload = raw_request(raw_span(number, key_value(b"d", nested_array(40))))
            elif number % 10 == 5:
                payload = b"\x0a\xff\xff\xff\x0f"  # a length far past the end: undecodable
            else:
                payload = request(span(number))
            futures.append((number, export.future(payload, timeout=30)))
        answers = {}
        for number, future in futures:
            try:
                answers[number] = future.result().partial_success.rejected_spans
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
                assert len(error.details()) < MESSAGE_LIMIT
                answers[number] = "refused"
    innocent = [number for number in range(1, 41) if number % 5]
    assert [answers[number] for number in innocent] == [0] * len(innocent)
    assert {answers[number] for number in range(10, 41, 10)} == {1}
    assert {answers[number] for number in range(5, 41, 10)} == {"refused"}
    assert _span_ids(store) == innocent


def test_kinds_and_status_codes_outside_the_enums_are_empty(intake: tuple[Store, int]) -> None:
    """pdata names values outside an enum '' (negative ones too), as the exporter writes."""
    store, port = intake
    channel, export = stub(port)
    below = span(1, kind=-2)
    below.status.code = -2
    above = span(2, kind=6)
    above.status.code = 3
    with channel:
        export(request(below, above, span(3)), timeout=30)
    frame = store.query("SELECT SpanKind, StatusCode FROM otel_traces ORDER BY SpanId")
    assert frame.values.tolist() == [["", ""], ["", ""], ["Server", "Unset"]]


def test_invalid_utf8_is_stored_byte_for_byte_on_chdb(tmp_path: Path) -> None:
    """The exporter keeps strings as sent; readers (not the intake) make them readable."""
    with open_store(tmp_path / "store") as store, Intake(store, IntakeConfig(port=0)) as running:
        channel, export = stub(running.port)
        with channel:
            export(raw_request(raw_span(1, key_value(b"k", text_value(b"a\xffb")))), timeout=30)
        frame = store.query(
            "SELECT hex(SpanAttributes['k']) AS raw, length(SpanAttributes['k']) AS n "
            "FROM otel_traces"
        )
    assert frame.values.tolist() == [["61FF62", 3]]

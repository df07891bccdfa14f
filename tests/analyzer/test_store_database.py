"""Every command writes and reads the store's current database, whatever it is.

On a ClickHouse server the URL's path (``clickhouse://host:9000/otel``)
makes ``otel`` current; ``serve`` must write there, since ``report`` and
``sql`` read there. The server backend cannot run here, so a real chDB store
is switched to another current database with ``USE``, which is the same
situation for everything above the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from grpc_overhead.analyzer.calls import create_calls
from grpc_overhead.analyzer.clock_offsets import ClockOptions
from grpc_overhead.analyzer.intake import Intake, IntakeConfig
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store import open_store
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.cli.report import prepare
from tests.analyzer.otlp_requests import request, span, stub
from tests.analyzer.seed import insert_spans, synthetic_call

pytestmark = pytest.mark.e2e


@pytest.fixture
def otel_store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(tmp_path / "store")
    try:
        store.command("CREATE DATABASE otel")
        store.command("USE otel")
        yield store
    finally:
        store.close()


def _tables(store: Store, database: str) -> set[str]:
    frame = store.query(
        "SELECT name FROM system.tables WHERE database = {database:String}",
        {"database": database},
    )
    return set(frame["name"])


def test_options_follow_the_current_database(otel_store: Store) -> None:
    assert otel_store.database == "otel"
    assert SchemaOptions.for_store(otel_store).database == "otel"
    assert SchemaOptions.for_store(otel_store, database="other").database == "other"
    session = otel_store.session()
    try:
        assert session.database == "otel"
    finally:
        otel_store.close_session(session)


def test_intake_and_report_meet_in_the_current_database(otel_store: Store) -> None:
    with Intake(otel_store, IntakeConfig(port=0, flush_interval=0.01)) as intake:
        assert intake.schema.database == "otel"
        calls_options = CallsOptions.from_schema(intake.schema)  # what serve builds
        create_calls(otel_store, calls_options)
        channel, export = stub(intake.port)
        try:
            export(request(span(1)), timeout=10)
        finally:
            channel.close()
    client, server = synthetic_call()
    insert_spans(otel_store, [client, server], table="otel.otel_traces")

    assert "otel_traces" not in _tables(otel_store, "default")
    assert {"otel_traces", "grpc_calls"} <= _tables(otel_store, "otel")
    stored = otel_store.query("SELECT count() AS n FROM otel.otel_traces")
    assert int(stored["n"].iloc[0]) == 3

    options, missing = prepare(otel_store)  # what report does
    assert missing == ""
    assert options == calls_options
    report = build_report(otel_store, CallFilters(), ClockOptions(), options=options)
    assert report.calls == 1
    assert "grpc_phase_rollup" in _tables(otel_store, "otel")

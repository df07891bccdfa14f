"""A store holding text that is not UTF-8, the way a sender can make the exporter store it."""

from __future__ import annotations

from grpc_overhead.analyzer.store.base import Store
from tests.analyzer.seed import Truth, insert_spans, synthetic_call

#: ``bad`` + bytes no UTF-8 decoder accepts (a lone continuation, 0xff, a cut sequence).
BAD_HEX = "626164FFFE80C3"


def insert_call_with_invalid_text(store: Store) -> None:
    """One whole call whose service, span name, resource and event values are not UTF-8.

    The spans go through a Memory copy of ``otel_traces`` and one INSERT ... SELECT,
    so the view that assembles calls sees them as it sees the intake's inserts.
    """
    store.command("DROP TABLE IF EXISTS invalid_text_stage")
    store.command("CREATE TABLE invalid_text_stage AS otel_traces ENGINE = Memory")
    insert_spans(store, synthetic_call(Truth(), service="PLACEHOLDER"), "invalid_text_stage")
    bad = f"unhex('{BAD_HEX}')"
    store.command(
        f"""INSERT INTO otel_traces SELECT * REPLACE (
            {bad} AS SpanName,
            concat(ServiceName, {bad}) AS ServiceName,
            mapUpdate(ResourceAttributes, map('host.name', {bad})) AS ResourceAttributes,
            mapUpdate(SpanAttributes, map('rpc.service', {bad}, 'rpc.method', {bad}))
                AS SpanAttributes,
            arrayMap(m -> mapUpdate(m, map('note', {bad})), `Events.Attributes`)
                AS `Events.Attributes`
        ) FROM invalid_text_stage"""
    )
    store.command("DROP TABLE invalid_text_stage")

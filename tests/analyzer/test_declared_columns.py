"""Declared columns are the engine's own, so declaring them changes nothing a reader sees
(``declared_columns``: declared, creating a view or table skips analyzing its SELECT)."""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer import call_rollup
from grpc_overhead.analyzer.declared_columns import (
    MESSAGES_VIEW_COLUMNS,
    PHASES_VIEW_COLUMNS,
    SETTLED_CALLS_COLUMNS,
    column_list,
    described,
)
from grpc_overhead.analyzer.messages import MESSAGES_VIEW
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import PHASES_VIEW, messages_view_select_sql, view_select_sql
from tests.analyzer import seed
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e

REGENERATE = "run: .venv/bin/python -m grpc_overhead.analyzer.declared_columns_writer"


def _settled_calls(store) -> str:
    call_rollup.create_settled_calls(store, CallsOptions())
    return call_rollup.SETTLED_CALLS_TABLE


@pytest.mark.parametrize(
    ("select", "parameters", "declared", "made"),
    [
        (view_select_sql, None, PHASES_VIEW_COLUMNS, lambda store: PHASES_VIEW),
        (messages_view_select_sql, None, MESSAGES_VIEW_COLUMNS, lambda store: MESSAGES_VIEW),
        (
            call_rollup.settled_calls_select_sql,
            call_rollup.settled_calls_parameters(),
            SETTLED_CALLS_COLUMNS,
            _settled_calls,
        ),
    ],
    ids=["grpc_call_phases", "grpc_message_phases", "grpc_settled_calls"],
)
def test_the_declared_columns_are_what_the_engine_derives_from_the_select(
    store, select, parameters, declared, made
):
    assert declared, f"no declared columns ({REGENERATE})"
    assert described(store, select(), parameters) == declared, (
        f"the SELECT changed its columns: {REGENERATE}"
    )
    # ... and the view or table the store holds is made with them, in that order.
    found = store.query(f"DESCRIBE {made(store)}")
    assert tuple(zip(found["name"], found["type"], strict=True)) == declared


def test_a_view_declared_so_reads_the_rows_its_select_reads(store):
    spans = []
    for pair in seed.calls_across_hosts(
        3, server_offset=2 * seed.MS, request_network=300 * seed.US, response_network=200 * seed.US
    ):
        spans += pair
    spans += seed.synthetic_call(seed.Truth(start=seed.BASE_NS + 50 * seed.MS))
    seed.insert_spans(store, spans)
    order = "ORDER BY trace_id, client_span_id"
    for view, select in ((PHASES_VIEW, view_select_sql), (MESSAGES_VIEW, messages_view_select_sql)):
        through_view = store.query(f"SELECT * FROM {view} {order}")
        direct = store.query(f"SELECT * FROM ({select()}) {order}")
        assert len(through_view) >= 4
        assert through_view.equals(direct), view


def test_no_declared_columns_leave_them_to_the_engine():
    assert column_list(()) == ""
    assert column_list((("a", "UInt8"), ("b c", "Nullable(Float64)"))) == (
        " (\n    `a` UInt8,\n    `b c` Nullable(Float64)\n)"
    )

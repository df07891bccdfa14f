"""``grpc_call_phases``: the report's numbers, one merged row per call, created with the store."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from grpc_overhead.analyzer.messages import MESSAGES_VIEW
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phase_view import (
    IDENTITY,
    PHASES_VIEW,
    create_call_tables,
    schema_fingerprint,
    schema_is_current,
)
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.report import build_report
from grpc_overhead.analyzer.result_columns import ALL_PHASES
from grpc_overhead.analyzer.store import table_exists
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e


def _seed_mixed(store) -> int:
    """Calls on one host, across two skewed hosts, without events, with errors: 31 calls."""
    spans = []
    for index in range(10):  # one host, processing varies
        truth = replace(Truth(), start=seed.BASE_NS + index * MS, processing=(1 + index) * MS)
        spans += seed.synthetic_call(truth, request_bytes=1000 * (index + 1))
    for pair in seed.calls_across_hosts(
        12, server_offset=3 * MS, request_network=200 * US, response_network=150 * US, jitter=40
    ):
        spans += pair
    for index in range(6):  # opentelemetry-instrumentation-grpc spans: no events
        truth = replace(Truth(), start=seed.BASE_NS + (50 + index) * MS)
        spans += seed.synthetic_call(truth, official=True, method="Health")
    for index in range(3):
        client, server = seed.synthetic_call(
            replace(Truth(), start=seed.BASE_NS + (90 + index) * MS), method="Fail"
        )
        for span in (client, server):
            span.attributes["rpc.grpc.status_code"] = "13"
            span.status = "Error"
        spans += [client, server]
    seed.insert_spans(store, spans)
    return len(spans) // 2


def _view(store) -> pd.DataFrame:
    return store.query(f"SELECT * FROM {PHASES_VIEW} ORDER BY trace_id, client_span_id")


def test_the_view_gives_every_call_the_phases_calls_gives_it(store):
    count = _seed_mixed(store)
    view = _view(store)
    assert len(view) == count
    expected = calls(store).sort_values(["TraceId", "ClientSpanId"]).reset_index(drop=True)
    assert view["trace_id"].tolist() == expected["TraceId"].tolist()
    for name in ALL_PHASES:
        got, want = view[f"{name}_us"].astype(float), expected[f"{name}_us"].astype(float)
        assert got.isna().tolist() == want.isna().tolist(), name
        assert (got.fillna(0) - want.fillna(0)).abs().max() < 1e-6, name
    # Undefined is NULL: calls without events have a total but no processing.
    health = view[view["rpc_method"] == "Health"]
    assert health["total_us"].notna().all() and health["processing_us"].isna().all()
    # Identity columns, named as the issue asks.
    assert [name for name, _, _ in IDENTITY][:2] == ["trace_id", "client_span_id"]
    assert set(view.loc[view["rpc_method"] == "Fail", "status_code"]) == {13}
    assert set(view.loc[view["rpc_method"] == "Predict", "status_code"]) == {0}
    assert set(view["service_name"]) == {"load-generator"}
    assert view["request_bytes"].max() == 10_000
    skewed = view[view["server_host"] == "host-b"]
    assert len(skewed) == 12  # the NTP estimate: 3 ms within its bound (asymmetric paths)
    assert ((skewed["clock_offset_us"] - 3000).abs() <= skewed["clock_uncertainty_us"]).all()


def test_the_views_numbers_are_the_reports(store):
    _seed_mixed(store)
    report = build_report(store).breakdown
    aggregates = ", ".join(
        f"count({name}_us) AS {name}_n, avg({name}_us) AS {name}_mean,"
        f" quantileTDigest(0.5)({name}_us) AS {name}_p50"
        for name in ALL_PHASES
    )
    from_view = store.query(
        f"SELECT rpc_service, rpc_method, count() AS calls, {aggregates} "
        f"FROM {PHASES_VIEW} GROUP BY rpc_service, rpc_method"
    ).set_index(["rpc_service", "rpc_method"])
    assert len(from_view) == 3
    checked = 0
    for row in report.itertuples(index=False):
        mine = from_view.loc[(row.service, row.method)]
        assert int(mine["calls"]) == row.calls
        assert int(mine[f"{row.phase}_n"]) == row.phase_calls, (row.method, row.phase)
        if row.phase_calls:
            assert math.isclose(mine[f"{row.phase}_mean"], row.mean_us, rel_tol=1e-9, abs_tol=1e-6)
            assert math.isclose(mine[f"{row.phase}_p50"], row.p50_us, rel_tol=1e-3, abs_tol=0.01)
            checked += 1
    assert checked > 40


def test_a_call_delivered_twice_is_counted_once_without_final(store):
    spans = [span for _ in range(5) for span in seed.synthetic_call()]
    seed.insert_spans(store, spans)
    seed.insert_spans(store, spans)  # the collector retried: at-least-once delivery
    halves = int(store.query("SELECT count() AS n FROM grpc_calls")["n"].iloc[0])
    assert halves > 5  # the raw table holds the unmerged halves: FINAL would be needed there
    found = store.query(f"SELECT count() AS n, sum(total_us) AS total FROM {PHASES_VIEW}")
    assert int(found["n"].iloc[0]) == 5
    assert found["total"].iloc[0] == pytest.approx(5 * Truth().expected_phases_us()["total"])


def test_the_view_is_created_and_upgraded_with_the_store(store):
    store.command(f"DROP VIEW IF EXISTS {PHASES_VIEW}")
    assert not table_exists(store, PHASES_VIEW)
    create_call_tables(store)  # an older store gets the view
    assert table_exists(store, PHASES_VIEW)
    store.command(f"CREATE OR REPLACE VIEW {PHASES_VIEW} AS SELECT 1 AS old_column")
    create_call_tables(store)  # an older definition is replaced
    columns = set(store.query(f"DESCRIBE TABLE {PHASES_VIEW}")["name"])
    assert {f"{name}_us" for name in ALL_PHASES} <= columns and "old_column" not in columns


def test_a_ready_store_is_left_as_it_is_and_a_broken_one_is_mended(store, monkeypatch):
    create_call_tables(store)
    ran: list[str] = []
    command = store.command
    monkeypatch.setattr(store, "command", lambda sql, *args: ran.append(sql) or command(sql, *args))
    assert schema_is_current(store, CallsOptions())
    assert create_call_tables(store) is False and ran == []  # one query, no statement
    # Anything missing or made otherwise is made again, as before the fingerprint.
    for broken in (
        "DROP TABLE grpc_runs",
        "DROP VIEW grpc_calls_mv",
        f"CREATE OR REPLACE VIEW {MESSAGES_VIEW} AS SELECT 1 AS old_column",
    ):
        command(broken)
        assert not schema_is_current(store, CallsOptions())
        ran.clear()
        create_call_tables(store)
        assert len(ran) > 3 and schema_is_current(store, CallsOptions())
    assert table_exists(store, "grpc_runs") and table_exists(store, "grpc_calls_mv")
    # The current database named or not: the same objects, the same fingerprint.
    assert schema_is_current(store, CallsOptions(database="default"))
    # Other options (another calls table): other statements, another fingerprint.
    other = CallsOptions(calls_table="grpc_calls_other", view="grpc_calls_other_mv")
    assert schema_fingerprint(other, "default") != schema_fingerprint(CallsOptions(), "default")
    assert not schema_is_current(store, other)


@pytest.mark.parametrize(
    ("client_weight", "server_weight", "expected"),
    [
        ("100", "100", 100.0),  # a base-sampled call: both halves say so
        ("1", "100", 1.0),  # kept for sure by one side: the smaller weight
        ("100", None, 1.0),  # a half without one (another source: every call) was sure
        (None, "100", 1.0),
        (None, None, 1.0),  # every other source
        ("100", "absent", 100.0),  # a client half alone (its server dropped it): its own
        ("33.5", "33.5", 33.5),
        # Hostile or broken values stand for themselves, never for billions of calls.
        ("1e300", None, 1.0),
        ("inf", None, 1.0),
        ("nan", None, 1.0),
        ("-5", None, 1.0),
        ("0.5", None, 1.0),
        ("a lot", None, 1.0),
    ],
)
def test_a_calls_weight_is_the_smaller_of_its_halves_valid_weights(
    store, client_weight, server_weight, expected
):
    client, server = seed.synthetic_call(Truth())
    for span, weight in ((client, client_weight), (server, server_weight)):
        if weight is not None:
            span.attributes["grpc_overhead.sampling.weight"] = weight
            span.attributes["grpc_overhead.sampling.reason"] = "base"
    seed.insert_spans(store, [client] if server_weight == "absent" else [client, server])
    [weight] = store.query(f"SELECT weight FROM {PHASES_VIEW}")["weight"].tolist()
    assert weight == expected
    answer = build_report(store)
    assert answer.calls == round(expected) and answer.stored_calls == 1

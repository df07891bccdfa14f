"""grpc_calls: the DDL, and the client and server halves of a call meeting without a JOIN."""

from __future__ import annotations

from dataclasses import replace

import pytest

from grpc_overhead.analyzer import calls as calls_module
from grpc_overhead.analyzer.call_columns import COLUMN_NAMES
from grpc_overhead.analyzer.calls import (
    backfill_calls,
    create_calls,
    create_calls_table_sql,
    create_view_sql,
)
from grpc_overhead.analyzer.options import CallsOptions
from grpc_overhead.analyzer.phases import calls
from grpc_overhead.analyzer.schema import SchemaOptions
from tests.analyzer import seed
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401


def physical_rows(store) -> int:
    return int(store.query("SELECT count() AS n FROM grpc_calls")["n"].iloc[0])


@pytest.mark.unit
def test_ddl_has_no_partition_and_every_column_is_a_max():
    ddl = create_calls_table_sql(CallsOptions())
    assert "PARTITION BY" not in ddl
    assert "ENGINE = AggregatingMergeTree()" in ddl
    assert "ORDER BY (TraceId, ClientSpanId)" in ddl
    assert ddl.count("SimpleAggregateFunction(max,") == len(COLUMN_NAMES) - 2


@pytest.mark.unit
def test_server_mode_options_render_on_cluster_and_replicated_engine():
    schema = SchemaOptions(
        database="otel",
        cluster="prod",
        engine="ReplicatedMergeTree",
        engine_params="'/ch/{shard}/{table}', '{replica}'",
    )
    options = CallsOptions.from_schema(schema)
    ddl = create_calls_table_sql(options)
    assert ddl.startswith("CREATE TABLE IF NOT EXISTS `otel`.`grpc_calls` ON CLUSTER `prod`")
    assert "ENGINE = ReplicatedAggregatingMergeTree('/ch/{shard}/{table}', '{replica}')" in ddl
    view = create_view_sql(options)
    assert "ON CLUSTER `prod`\nTO `otel`.`grpc_calls`" in view
    assert "FROM `otel`.`otel_traces`" in view


@pytest.mark.e2e
def test_create_calls_is_idempotent(store):
    assert create_calls(store) is False  # the fixture created it already
    assert create_calls(store) is False
    names = set(
        store.query("SELECT name FROM system.tables WHERE database = currentDatabase()")["name"]
    )
    assert {"grpc_calls", "grpc_calls_mv", "otel_traces"} <= names


@pytest.mark.e2e
@pytest.mark.parametrize("order", ["client_first", "server_first", "same_insert"])
def test_halves_meet_whatever_the_arrival_order(store, order):
    pairs = [seed.synthetic_call() for _ in range(5)]
    clients = [client for client, _ in pairs]
    servers = [server for _, server in pairs]
    if order == "client_first":
        seed.insert_spans(store, clients)
        seed.insert_spans(store, servers)
    elif order == "server_first":
        seed.insert_spans(store, servers)
        seed.insert_spans(store, clients)
    else:
        seed.insert_spans(store, [span for pair in pairs for span in pair])

    found = calls(store)
    assert len(found) == 5
    assert found["has_client"].all() and found["has_server"].all()
    assert set(found["ServerSpanId"]) == {server.span_id for server in servers}
    assert found["total_us"].notna().all() and found["processing_us"].notna().all()

    store.command("OPTIMIZE TABLE grpc_calls FINAL")
    assert physical_rows(store) == 5  # merged for good: one row per call
    assert calls(store)[found.columns].equals(found)


@pytest.mark.e2e
def test_one_half_per_insert_across_many_parts(store):
    """Halves in different parts that no merge has combined yet still read as one call."""
    for client, server in [seed.synthetic_call() for _ in range(4)]:
        seed.insert_spans(store, [server])
        seed.insert_spans(store, [client])
    assert physical_rows(store) in range(4, 9)  # merges may or may not have run
    assert len(calls(store)) == 4


@pytest.mark.e2e
def test_a_span_stored_twice_changes_nothing(store):
    client, server = seed.synthetic_call()
    seed.insert_spans(store, [client, server])
    first = calls(store)
    seed.insert_spans(store, [server])  # a collector retry
    seed.insert_spans(store, [client, server])
    again = calls(store)
    assert len(again) == 1
    assert again.equals(first)


@pytest.mark.e2e
def test_backfill_assembles_spans_stored_before_the_view(store):
    store.command("DROP VIEW grpc_calls_mv")  # as on a store the collector's exporter made
    try:
        seed.insert_spans(store, [span for _ in range(3) for span in seed.synthetic_call()])
        assert physical_rows(store) == 0
        assert create_calls(store) is True  # new view: existing spans backfilled
        assert len(calls(store)) == 3
        backfill_calls(store)  # again: idempotent
        assert len(calls(store)) == 3
        seed.insert_spans(store, list(seed.synthetic_call()))  # through the view now
        assert len(calls(store)) == 4
    finally:
        create_calls(store, backfill=False)


@pytest.mark.e2e
def test_only_grpc_client_and_server_spans_are_assembled(store):
    client, server = seed.synthetic_call()
    internal = replace(client, span_id="00000000000000aa", kind="Internal")
    http = replace(client, span_id="00000000000000bb", attributes={"http.method": "GET"})
    seed.insert_spans(store, [client, server, internal, http])
    assert list(calls(store)["ClientSpanId"]) == [client.span_id]
    assert physical_rows(store) <= 2  # halves of one insert may merge on insert already


@pytest.mark.e2e
def test_old_span_kind_and_status_spellings(store):
    client, server = seed.synthetic_call(
        client_kind="SPAN_KIND_CLIENT", server_kind="SPAN_KIND_SERVER"
    )
    client.status = "STATUS_CODE_ERROR"
    client.attributes["rpc.grpc.status_code"] = "14"
    server.attributes["rpc.grpc.status_code"] = "2"
    seed.insert_spans(store, [client, server])
    [call] = calls(store).itertuples()
    assert call.has_client and call.has_server
    assert call.status_code == 14  # the client's code wins
    assert call.server_status_code == 2
    assert call.error == 1


@pytest.mark.e2e
def test_a_call_missing_its_server_half(store):
    client, _ = seed.synthetic_call()
    seed.insert_spans(store, [client])
    [call] = calls(store).itertuples()
    assert call.has_client and not call.has_server
    assert call.total_us > 0 and call.client_serialize_us == 15
    assert call.server_residence_us == seed.Truth().expected_phases_us()["server_residence"]
    for phase in ("processing_us", "request_network_us", "unattributed_us", "server_duration_us"):
        assert getattr(call, phase) != getattr(call, phase)  # NaN


@pytest.mark.e2e
def test_messages_sizes_and_identity_columns(store):
    seed.insert_spans(
        store, seed.synthetic_call(request_bytes=4096, response_bytes=77, run_id="r9")
    )
    [call] = calls(store).itertuples()
    assert (call.request_messages, call.response_messages) == (1, 1)
    assert (call.request_uncompressed_bytes, call.request_compressed_bytes) == (4096, 4096)
    assert (call.response_uncompressed_bytes, call.response_compressed_bytes) == (77, 77)
    assert (call.service, call.method, call.run_id) == ("predict.Predictor", "Predict", "r9")
    assert (call.client_host, call.server_host) == ("host-a", "host-a")
    assert call.server_address == "10.0.0.2:50051"
    assert call.client_address == "10.0.0.1"


@pytest.mark.e2e
def test_real_instrumented_calls_are_assembled_whole(store):
    seed.insert_rows(store, seed.readable_span_rows(seed.real_spans(calls=3)))
    found = calls(store).set_index("method")
    assert sorted(found.index) == ["Echo", "Echo", "Echo", "Join", "Split"]
    assert found["has_client"].all() and found["has_server"].all()
    assert (found["client_events"] == 1).all() and (found["server_events"] == 1).all()
    assert found.loc["Split", "response_messages"] == 3
    assert found.loc["Join", "request_messages"] == 3
    assert (found["call_type"].loc[["Split", "Join"]] == ["unary_stream", "stream_unary"]).all()


@pytest.mark.unit
def test_extract_select_is_the_view_and_the_backfill():
    options = CallsOptions()
    select = calls_module.extract_select_sql(options)
    assert create_view_sql(options).endswith(select)
    assert calls_module.backfill_sql(options).endswith(select)
    assert "ARRAY JOIN" not in select

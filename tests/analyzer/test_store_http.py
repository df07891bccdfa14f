"""``ClickHouseHttpStore``, the third backend: the analysis reads through an HTTP interface
exactly as it reads chDB (a real interface on a real chDB store, no stand-ins)."""

from __future__ import annotations

import os
import resource
import threading
import time
from datetime import datetime

import pytest

from grpc_overhead.analyzer.errors import QueryError, StoreUnavailable
from grpc_overhead.analyzer.phases import phase_breakdown
from grpc_overhead.analyzer.store import ClickHouseHttpStore, open_store
from grpc_overhead.analyzer.store.user_statements import QueryLimits
from tests.analyzer import seed
from tests.analyzer.conftest import HTTP_USER
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e


def test_parameters_of_every_kind_bind_as_on_chdb(reader, store):
    sql = (
        "SELECT {text:String} AS text, {n:Int64} AS n, {x:Float64} AS x, {xs:Array(String)} AS xs,"
        " {at:DateTime64(6, 'UTC')} AS at"
    )
    values = {
        "text": "it's a\ttab \\ and a 'quote'",
        "n": -(2**62),
        "x": 0.125,
        "xs": ["a", "b'c"],
        "at": datetime(2026, 11, 24, 12, 0, 0, 123456),  # naive: see the notes
    }
    got, expected = reader.query(sql, values), store.query(sql, values)
    for column in ("text", "n", "x", "at"):
        assert got[column].iloc[0] == expected[column].iloc[0], column
    assert got["text"].iloc[0] == values["text"] and got["n"].iloc[0] == values["n"]
    assert got["xs"].iloc[0].tolist() == expected["xs"].iloc[0].tolist() == ["a", "b'c"]


def test_the_analysis_reads_the_same_through_http(reader, store):
    for pair in seed.calls_across_hosts(
        8, server_offset=2 * seed.MS, request_network=100 * seed.US, response_network=100 * seed.US
    ):
        seed.insert_spans(store, pair)
    through_http, direct = phase_breakdown(reader), phase_breakdown(store)
    assert len(direct) > 10
    assert through_http.equals(direct)


def test_user_queries_formats_errors_and_writes(reader):
    limits = QueryLimits()
    assert reader.check_user_statement("select 1 format CSV").endswith("FORMAT CSV")
    assert reader.user_query("SELECT 1 AS x FORMAT CSV", limits, output="CSV") == b"1\n"
    assert reader.user_query("SELECT 2 AS x", limits)["x"].tolist() == [2]
    with pytest.raises(QueryError) as failed:
        reader.query("SELEC 1")
    assert failed.value.code == 62 and "Syntax error" in failed.value.message
    with pytest.raises(QueryError) as refused:
        reader.command("TRUNCATE TABLE otel_traces")
    assert refused.value.is_readonly_refusal
    with pytest.raises(QueryError) as refused:
        reader.user_query("SELECT * FROM numbers(10)", limits.lowered(max_result_rows=3))
    assert "TOO_MANY_ROWS" in refused.value.message


def test_an_abandoned_user_query_is_cancelled(reader, store):
    gone = threading.Event()
    threading.Timer(0.5, gone.set).start()
    started = time.monotonic()
    with pytest.raises(QueryError, match="cancelled"):
        reader.user_query(
            "SELECT count() FROM numbers(1000000000000) WHERE 'cancel_marker_4411' != ''",
            QueryLimits(),
            abandoned=gone.is_set,
        )
    assert time.monotonic() - started < 20


def test_credentials_and_reachability_are_store_unavailable(interface):
    with pytest.raises(StoreUnavailable, match="refused the credentials"):
        ClickHouseHttpStore(interface.url, user=HTTP_USER, password="wrong")
    with pytest.raises(StoreUnavailable, match="cannot reach"):
        open_store(None, "http://127.0.0.1:9")


def test_a_busy_process_with_descriptors_above_1023_still_answers(reader, store):
    """CI's whole suite holds over a thousand open files: a connection's descriptor above
    1023 once made every query look abandoned (select() refuses such descriptors)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held: list[int] = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.dup(0))
        for pair in seed.calls_across_hosts(
            2, server_offset=0, request_network=100 * seed.US, response_network=100 * seed.US
        ):
            seed.insert_spans(store, pair)
        assert phase_breakdown(reader).equals(phase_breakdown(store))
    finally:
        for descriptor in held:
            os.close(descriptor)

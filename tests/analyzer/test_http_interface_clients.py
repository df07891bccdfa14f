"""The HTTP interface driven by ClickHouse's official Python client, clickhouse-connect.

Its default framing is Native: it first probes for the block-info framing
(``client_protocol_version``), which the interface refuses, and then reads
plain Native, which the engine writes. So ``query``, ``query_df``,
``query_arrow``, ``raw_query`` and ``command`` all work unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pytest

from grpc_overhead.analyzer.http_interface import HttpInterface
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer import seed
from tests.analyzer.conftest import HTTP_PASSWORD, HTTP_USER
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

clickhouse_connect = pytest.importorskip("clickhouse_connect")  # the dev extras install it
pytestmark = pytest.mark.e2e


@pytest.fixture
def client(interface: HttpInterface, store: Store) -> Iterator[object]:
    spans = [span for index in range(6) for span in seed.synthetic_call(request_bytes=100 + index)]
    seed.insert_spans(store, spans)
    connected = clickhouse_connect.get_client(
        host="127.0.0.1", port=interface.port, username=HTTP_USER, password=HTTP_PASSWORD
    )
    yield connected
    connected.close()


def test_query_and_query_df_read_the_view_as_the_store_does(client, store):
    sql = "SELECT * FROM grpc_call_phases ORDER BY request_bytes"
    frame = client.query_df(sql)
    expected = store.query(sql)
    assert list(frame.columns) == list(expected.columns) and len(frame) == 6
    assert frame["total_us"].tolist() == expected["total_us"].tolist()
    assert frame["request_bytes"].tolist() == list(range(100, 106))
    assert pd.isna(frame["server_dispatch_us"]).all()  # NULL where undefined
    rows = client.query(
        "SELECT rpc_method, count() AS calls FROM grpc_call_phases GROUP BY rpc_method"
    ).result_rows
    assert rows == [("Predict", 6)]


def test_arrow_raw_formats_parameters_and_command(client):
    table = client.query_arrow("SELECT rpc_method, total_us FROM grpc_call_phases")
    assert table.num_rows == 6
    raw = client.raw_query("SELECT count() AS n FROM grpc_call_phases", fmt="JSONEachRow")
    assert raw == b'{"n":6}\n'
    found = client.query(
        "SELECT {text:String} AS text, {n:UInt32} * 2 AS n", parameters={"text": "a'b\tc", "n": 21}
    ).result_rows
    assert found == [("a'b\tc", 42)]
    assert client.command("SELECT count() FROM otel_traces") == 12
    # Maps and arrays of otel_traces come through too.
    spans = client.query_df("SELECT SpanAttributes, Events.Name FROM otel_traces LIMIT 2")
    assert spans["SpanAttributes"].iloc[0]["rpc.system"] == "grpc"


def test_writes_are_refused_with_clickhouses_error(client, store):
    with pytest.raises(clickhouse_connect.driver.exceptions.DatabaseError) as refused:
        client.command("DROP TABLE grpc_calls")
    assert "Code: 164" in str(refused.value) and "refused" in str(refused.value)
    assert int(store.query("SELECT count() AS n FROM grpc_calls FINAL")["n"].iloc[0]) == 6


def test_wrong_credentials_fail_the_connection(interface):
    with pytest.raises(clickhouse_connect.driver.exceptions.DatabaseError) as refused:
        clickhouse_connect.get_client(
            host="127.0.0.1", port=interface.port, username=HTTP_USER, password="nope"
        )
    assert "516" in str(refused.value) or "Authentication failed" in str(refused.value)

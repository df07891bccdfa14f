"""docs/sql.md's ten SQL questions: each one is shown, runs, and answers from the data."""

from __future__ import annotations

import re
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest

from grpc_overhead.analyzer.insights import sql_console
from grpc_overhead.analyzer.phase_view import PHASES_VIEW, view_columns
from grpc_overhead.analyzer.sql_examples import EXAMPLES
from grpc_overhead.analyzer.store.user_statements import QueryLimits
from grpc_overhead.cli.sql import parser, render
from tests.analyzer import seed
from tests.analyzer.seed import MS, US, Truth, module_store_fixture, store_fixture  # noqa: F401

GUIDE = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text()


def readme_examples() -> list[str]:
    """The ```sql blocks of docs/sql.md ("Querying with SQL"), dedented."""
    section = GUIDE
    return [
        textwrap.dedent(block).strip()
        for block in re.findall(r"```sql\n(.*?)```", section, re.DOTALL)
    ]


@pytest.mark.unit
def test_the_sql_guide_shows_exactly_the_ten_examples():
    assert len(EXAMPLES) == 10
    assert readme_examples() == [sql for _, sql in EXAMPLES]
    for question, _ in EXAMPLES:
        assert f"**{question}**" in GUIDE


@pytest.mark.unit
def test_sql_help_documents_the_view():
    text = parser().format_help()
    assert PHASES_VIEW in text and "no FINAL" in text
    for name, _ in view_columns():
        assert f"  {name} " in text


@pytest.mark.e2e
def test_every_example_runs_and_answers(store):
    spans = []
    for index, codec in enumerate(("", "gzip", "", "zstd", "", "")):
        truth = replace(Truth(), start=seed.BASE_NS + index * 70 * seed.MS)
        client, server = seed.synthetic_call(truth, request_bytes=(index + 1) * 40_000)
        for span in (client, server):
            span.attributes["grpc.compression"] = codec
            if index == 4:  # the service's own codec, no gRPC compression
                span.attributes["grpc_overhead.payload.codec"] = "lz4"
            if index == 5:
                span.attributes["rpc.grpc.status_code"] = "14"
        spans += [client, server]
    for pair in seed.calls_across_hosts(
        4, server_offset=MS, request_network=90 * US, response_network=90 * US
    ):
        spans += pair
    # Example 3 asks about the last hour: one call a minute ago.
    spans += seed.synthetic_call(replace(Truth(), start=time.time_ns() - 60 * 10**9))
    seed.insert_spans(store, spans)
    answers = {}
    for question, sql in EXAMPLES:
        store.check_user_statement(sql)
        answers[question] = store.user_query(sql, QueryLimits())
    by_index = [answers[question] for question, _ in EXAMPLES]
    assert by_index[0]["calls"].sum() == 11
    assert len(by_index[2]) == 1
    assert by_index[0]["total"].iloc[0] == Truth().expected_phases_us()["total"]
    assert set(by_index[3]["status_code"]) == {0, 14}
    # gRPC's compression and the service's payload codec apart: lz4 is not lumped into ''.
    compression = by_index[4].set_index("compression_algorithm")["calls"]
    assert compression.to_dict() == {"gzip": 1, "lz4": 1, "none": 8, "zstd": 1}
    assert set(by_index[5]["server_instance"]) == {"s-1"}
    # The network is the two network phases, apart from total - processing (which holds
    # queuing and serialization too): 300 + 250 µs in the seeded calls.
    assert by_index[1]["network_p50_us"].tolist() == [550.0]
    assert (by_index[1]["not_processing_p50_us"] > by_index[1]["network_p50_us"]).all()
    assert {"network_percent", "not_processing_percent"} <= set(by_index[7].columns)
    assert set(by_index[9]["server_host"]) == {"host-a", "host-b"}
    assert all(len(answer) for answer in by_index)
    # round(x, 1) prints one decimal, also where the engine answers in Float32
    # (quantileTDigest): 28210.9, never 28210.900391. (Example 3 lists raw columns.)
    for index, answer in enumerate(by_index):
        if index == 2:
            continue
        for output in ("table", "csv", "json"):
            shown = render(answer, output)
            assert not re.findall(r"\b\d+\.\d{3,}\b", shown), (index, output, shown)


@pytest.mark.e2e
@pytest.mark.parametrize("output", ["table", "csv", "json"])
def test_a_rounded_quantile_prints_as_rounded(store, output):
    """quantileTDigest answers in Float32, and round() keeps the type: 28210.9 arrives as
    28210.900390625. `sql` and the SQL page print it as ClickHouse's clients do."""
    sql = "SELECT round(quantileTDigest(0.5)(x), 1) AS p50_us FROM (SELECT 28210.9 AS x)"
    answer = store.user_query(sql, QueryLimits())
    assert str(answer["p50_us"].dtype) in ("float32", "Float32")  # the engine's type
    shown = render(answer, output)
    assert "28210.9" in shown and "28210.90" not in shown, shown
    page = sql_console.displayable(sql_console.run(store, sql))
    assert page["p50_us"].tolist() == [28210.9]

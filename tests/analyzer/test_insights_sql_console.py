"""The SQL console: read-only by the engine, a row limit, one clear line per failure."""

from __future__ import annotations

import pandas as pd
import pytest

from grpc_overhead.analyzer.errors import BadInput
from grpc_overhead.analyzer.insights import sql_console
from grpc_overhead.analyzer.sql_examples import EXAMPLES
from tests.analyzer import seed
from tests.analyzer.seed import MS, Truth, module_store_fixture, store_fixture  # noqa: F401


def seed_calls(store, count: int = 4) -> None:
    spans = []
    for index in range(count):
        spans += seed.synthetic_call(Truth(start=seed.BASE_NS + index * MS))
    seed.insert_spans(store, spans)


@pytest.mark.e2e
def test_select_runs_under_the_limit_and_says_when_it_cut(store):
    found = sql_console.run(store, "SELECT number FROM numbers(10) ORDER BY number;", limit=4)
    assert found["number"].tolist() == [0, 1, 2, 3]
    assert found.attrs[sql_console.TRUNCATED] is True
    whole = sql_console.run(store, "  WITH 3 AS n SELECT number FROM numbers(n)  ", limit=3)
    assert whole["number"].tolist() == [0, 1, 2] and whole.attrs[sql_console.TRUNCATED] is False


@pytest.mark.e2e
@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE grpc_calls",
        "TRUNCATE TABLE otel_traces",
        "INSERT INTO grpc_calls (TraceId, ClientSpanId) SELECT 'a', 'b'",
        "ALTER TABLE grpc_calls DELETE WHERE 1",
        "CREATE TABLE sneaky (x UInt8) ENGINE = Memory",
        "INSERT INTO grpc_calls (TraceId, ClientSpanId) SETTINGS readonly = 0 SELECT 'a', 'b'",
    ],
)
def test_writes_are_refused_by_the_engine(store, statement):
    seed_calls(store)
    with pytest.raises(BadInput) as refused:
        sql_console.run(store, statement)
    assert str(refused.value) == sql_console.READ_ONLY_REFUSAL
    assert int(store.query("SELECT count() AS n FROM grpc_calls FINAL")["n"][0]) == 4


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("SELECT x FROMM t", "Syntax error: failed at position 16"),
        ("SELECT 1; SELECT 2", "Multi-statements are not allowed"),
        ("SELECT * FROM no_such_table", "no_such_table"),
        ("SELECT 1 FORMAT JSON", "remove that clause"),
        ("   ;  ", "empty statement"),
    ],
)
def test_failures_are_one_line_that_says_what_to_do(store, statement, expected):
    with pytest.raises(BadInput) as failed:
        sql_console.run(store, statement)
    message = str(failed.value)
    assert expected in message and "\n" not in message.strip()
    assert "formatQuery" not in message  # the console's own wrapping never shows


@pytest.mark.e2e
def test_other_statements_run_as_typed(store):
    tables = sql_console.run(store, "SHOW TABLES")
    assert {"otel_traces", "grpc_calls"} <= set(tables["name"])
    described = sql_console.run(store, "DESCRIBE TABLE grpc_calls", limit=2)
    assert len(described) == 2 and described.attrs[sql_console.TRUNCATED]


@pytest.mark.e2e
def test_every_example_runs_and_answers_from_the_data(store):
    seed_calls(store)
    answers = {title: sql_console.run(store, sql) for title, sql in sql_console.examples().items()}
    per_method = answers[EXAMPLES[1][0]]  # p50 / p99 per method, from grpc_call_phases
    assert per_method["calls"].tolist() == [4]
    assert per_method["total_p50_us"].tolist() == [Truth().expected_phases_us()["total"]]
    assert answers[EXAMPLES[3][0]]["percent"].tolist() == [100.0]  # status codes
    assert len(answers["Span events of recent traces"]) == 8


@pytest.mark.unit
def test_limits_are_checked():
    with pytest.raises(BadInput, match="row limit"):
        sql_console.run(None, "SELECT 1", limit=0)  # type: ignore[arg-type]


@pytest.mark.unit
def test_nested_values_become_text():
    frame = pd.DataFrame({"n": [1, 2], "m": [{"a": "1"}, {}], "s": ["x", "y"]})
    shown = sql_console.displayable(frame)
    assert shown["m"].tolist() == ["{'a': '1'}", "{}"]
    assert shown["n"].tolist() == [1, 2] and shown["s"].tolist() == ["x", "y"]

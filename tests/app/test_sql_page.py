"""The SQL page on a seeded chDB store: examples run, writes are refused, results download."""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.insights import sql_console
from grpc_overhead.analyzer.sql_examples import EXAMPLES
from tests.analyzer.seed import BASE_NS, MS, Truth, insert_spans, synthetic_call
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit


def seed(store, calls: int = 5) -> None:
    spans = []
    for index in range(calls):
        spans += synthetic_call(Truth(start=BASE_NS + index * MS, processing=(index + 1) * MS))
    insert_spans(store, spans)


def run_sql(text: str, limit: int | None = None):
    at = run_page("sql_console")
    at.text_area(key="sql_text").input(text)
    if limit is not None:
        at.number_input[0].set_value(limit)
    return at.button[0].click().run()


def test_a_query_shows_its_rows_and_offers_csv(served_store):
    seed(served_store)
    at = run_sql("SELECT method, count() AS calls FROM grpc_calls FINAL GROUP BY method;")
    assert not at.exception and not at.error
    result = at.dataframe[0].value
    assert result.to_dict("records") == [{"method": "Predict", "calls": 5}]
    assert "1 rows" in at.caption[-1].value
    [download] = at.get("download_button")
    assert download.proto.label == "Download CSV"


def test_every_example_runs(served_store):
    seed(served_store)
    at = run_page("sql_console")
    examples = sql_console.examples()
    assert at.selectbox(key="sql_example").options[1:] == list(examples)
    for title, statement in examples.items():
        at.selectbox(key="sql_example").set_value(title).run()
        assert at.text_area(key="sql_text").value == statement
        at.button[0].click().run()
        assert not at.exception and not at.error, title
    at.selectbox(key="sql_example").set_value(EXAMPLES[1][0]).run()  # p50 / p99 per method
    at.button[0].click().run()
    table = at.dataframe[0].value
    assert table["calls"].tolist() == [5]
    expected = Truth(processing=3 * MS).expected_phases_us()["total"]
    assert table["total_p50_us"].tolist() == [expected]


@pytest.mark.parametrize(
    "statement",
    [
        "DROP TABLE grpc_calls",
        "INSERT INTO grpc_calls (TraceId) VALUES ('x')",
        "TRUNCATE otel_traces",
    ],
)
def test_writes_are_refused_with_a_clear_message(served_store, statement):
    seed(served_store)
    at = run_sql(statement)
    assert not at.exception
    assert at.error[0].value == sql_console.READ_ONLY_REFUSAL
    assert int(served_store.query("SELECT count() AS n FROM grpc_calls FINAL")["n"][0]) == 5


def test_a_syntax_error_points_at_the_users_text(served_store):
    at = run_sql("SELECT method FROMM grpc_calls")
    assert not at.exception
    message = at.error[0].value
    assert message.startswith("Syntax error: failed at position 21")
    assert message.endswith("Fix the SQL and run it again")


def test_the_row_limit_bounds_the_result_and_says_so(served_store):
    at = run_sql("SELECT number FROM numbers(50)", limit=10)
    assert not at.exception
    assert at.dataframe[0].value["number"].tolist() == list(range(10))
    assert "Showing the first 10 rows" in at.warning[0].value


def test_nested_columns_are_shown_as_text(served_store):
    seed(served_store, calls=1)
    at = run_sql("SELECT SpanKind, Events.Attributes FROM otel_traces ORDER BY SpanKind")
    assert not at.exception and not at.error
    attributes = at.dataframe[0].value["Events.Attributes"].tolist()
    assert all(isinstance(value, str) for value in attributes)
    assert "rpc.message.uncompressed_size" in attributes[0]


def test_empty_store_still_answers(served_store):
    at = run_sql("SELECT count() AS n FROM grpc_calls")
    assert not at.exception
    assert at.dataframe[0].value["n"].tolist() == [0]


def test_the_caption_points_to_the_phase_view_not_final(served_store):
    seed(served_store, calls=1)
    at = run_page("sql_console")
    caption = " ".join(element.value for element in at.caption)
    assert "`grpc_call_phases`" in caption and "no `FINAL` needed" in caption
    assert "read it with `FINAL`" not in caption


def test_the_caption_states_the_limits_the_page_enforces(served_store):
    """30 s and the row limit, as the README says: not the 1,000,000-row ceiling of `sql`,
    which the page's own row limit always undercuts."""
    seed(served_store, calls=1)
    at = run_page("sql_console")
    caption = " ".join(element.value for element in at.caption)
    assert "(30 s, 4 GiB, the row limit (at most 100,000 rows))" in caption
    assert "1,000,000" not in caption

"""Streams on the pages: no bar left of 0 (Overview, Phases), their own per-message figures,
and the call explorer drawing a stream as its messages. Real calls of every shape from an
instrumented echo server (ours), in a real chDB store."""

from __future__ import annotations

import pytest

from grpc_overhead.analyzer.stream_phases import UNARY_ONLY
from tests.analyzer.seed import insert_rows, readable_span_rows, real_spans
from tests.app.charts import figures, metrics, values
from tests.app.conftest import run_page

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def spans():
    return readable_span_rows(real_spans(calls=2, bidi=True))


def seed(store, spans) -> dict[str, str]:
    """Echo (unary), Split (server streaming), Join (client streaming), Chat (bidi, 4 each
    way). Returns a trace id per method."""
    insert_rows(store, spans)
    found = store.query(
        "SELECT rpc_method, any(trace_id) AS trace FROM grpc_call_phases GROUP BY 1"
    )
    return dict(zip(found["rpc_method"], found["trace"], strict=True))


def bars_start_at_or_after_zero(figure: dict) -> bool:
    """Every bar of the figure lies right of 0: its base (where drawn from) and its length."""
    for trace in figure["data"]:
        if trace.get("type") != "bar":
            continue
        axis = "x" if trace.get("orientation") == "h" else "y"
        lengths = values(trace.get(axis, []))
        bases = values(trace.get("base", [])) if "base" in trace else [0] * len(lengths)
        numbers = [v for v in [*lengths, *bases] if isinstance(v, int | float)]
        if any(v < 0 for v in numbers):
            return False
    return True


def test_the_overview_stacks_no_stream_and_gives_streams_their_own_figure(served_store, spans):
    seed(served_store, spans)
    at = run_page("overview")
    assert not at.exception and not at.error
    drawn = figures(at)
    stacked = drawn["overview_phases_by_method"]
    labels = {y for trace in stacked["data"] for y in values(trace.get("y", []))}
    assert labels == {"test.Echo/Echo"}  # streams have no one-message-each-way split
    assert bars_start_at_or_after_zero(stacked)
    streams = drawn["overview_streams"]
    assert bars_start_at_or_after_zero(streams)
    facets = {a["text"] for a in streams["layout"]["annotations"]}
    assert facets == {
        "test.Echo/Split (server_streaming)",
        "test.Echo/Join (client_streaming)",
        "test.Echo/Chat (bidi_streaming)",
    }
    assert any("Streams, per message" in header.value for header in at.subheader)
    # Streams carry their events: they are not "calls without transport events".
    assert not any("no transport events" in caption.value for caption in at.caption)


#: Signed by definition: the tail table's slowest unary calls' mean minus the median ones'
#: (a phase the slowest calls spend less on is below 0). No stream is in either band: the
#: thresholds rank unary calls only (CI's stop 48 saw -1,004 µs here when the connection's
#: first call was the slowest of the two Echo calls).
DIFFERENCES = {"extra_us"}


def test_the_phases_page_shows_no_negative_value_for_a_stream(served_store, spans):
    seed(served_store, spans)
    at = run_page("phases")
    assert not at.exception and not at.error
    for name, figure in figures(at).items():
        assert bars_start_at_or_after_zero(figure), name
    for table in at.dataframe:
        frame = table.value
        for column in frame.columns:
            if column in DIFFERENCES:
                continue
            if str(column).endswith("_us") or "µs" in str(column):
                numbers = frame[column].dropna()
                assert not (numbers.astype(float) < 0).any(), column


def test_the_explorer_draws_a_stream_as_its_messages(served_store, spans):
    ids = seed(served_store, spans)
    at = run_page("explorer", {"trace": ids["Chat"]})
    assert not at.exception and not at.error
    shown = metrics(at)
    assert "Time to first response" in shown and "Stream duration" in shown
    assert "Processing" not in shown
    drawn = figures(at)
    waterfall = drawn["explorer_waterfall"]
    # No unary phase bar for a stream: spans and events only.
    assert not {t.get("name") for t in waterfall["data"]} & set(UNARY_ONLY)
    timeline = drawn["explorer_message_timeline"]
    assert bars_start_at_or_after_zero(timeline)
    parts = {trace["name"]: values(trace["y"]) for trace in timeline["data"]}
    assert set(parts) == {"serialize", "transfer", "deserialize"}
    assert sorted(set(parts["transfer"])) == sorted(
        [f"request {k}" for k in range(1, 5)] + [f"response {k}" for k in range(1, 5)]
    )


def test_a_unary_call_keeps_its_waterfall(served_store, spans):
    ids = seed(served_store, spans)
    at = run_page("explorer", {"trace": ids["Echo"]})
    assert not at.exception and not at.error
    assert "Processing" in metrics(at)
    assert "explorer_message_timeline" not in figures(at)
    names = {t.get("name") for t in figures(at)["explorer_waterfall"]["data"]}
    assert {"processing", "request_network"} <= names

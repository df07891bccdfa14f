"""The app's shell: sidebar filters and the URL, cached loads, empty states, no store."""

from __future__ import annotations

import time

import pytest
from streamlit.testing.v1 import AppTest

from grpc_overhead.app import runtime
from tests.analyzer.seed import BASE_NS, MS, Truth, insert_spans, synthetic_call
from tests.app.conftest import PAGE_TIMEOUT_S

pytestmark = pytest.mark.unit


def probe_page() -> None:
    """A minimal page: the filters, the empty state, then the matching calls' count."""
    import streamlit as st

    from grpc_overhead.analyzer.insights import catalog
    from grpc_overhead.app import cached, empty_states, sidebar

    filters = sidebar.filters()
    empty_states.require_calls(filters)
    choices = cached.load(catalog.filter_choices, filters)  # time filter only
    for column, wanted in (("method", filters.method), ("run_id", filters.run_id)):
        if wanted:
            choices = choices[choices[column] == wanted]
    st.metric("calls", int(choices["calls"].sum()))
    st.write(f"service={filters.service} method={filters.method} run={filters.run_id}")


def shown_calls_page() -> None:
    """The calls every page shows (half-arrived ones held back), as of the page run's snapshot."""
    import streamlit as st

    from grpc_overhead.analyzer.insights import rows
    from grpc_overhead.app import cached, sidebar

    st.metric("calls", int(cached.load(rows.sides, sidebar.filters())["calls"].iloc[0]))


def run_probe(query_params: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_function(probe_page, default_timeout=PAGE_TIMEOUT_S)
    for key, value in (query_params or {}).items():
        at.query_params[key] = value
    return at.run()


def seed(store, calls: int, method: str, run_id: str = "run-1") -> None:
    spans = []
    for index in range(calls):
        spans += synthetic_call(Truth(start=BASE_NS + index * MS), method=method, run_id=run_id)
    insert_spans(store, spans)


def test_empty_store_says_how_to_send_data(served_store):
    at = run_probe()
    assert not at.exception
    assert any("No calls stored yet" in info.value for info in at.info)
    assert not at.metric


def test_counts_and_choices_come_from_the_store(served_store):
    seed(served_store, 3, "Predict")
    seed(served_store, 2, "PredictBatch", run_id="run-2")
    at = run_probe()
    assert not at.exception
    assert at.metric[0].value == "5"
    method_box = at.sidebar.selectbox(key="filter_method")
    assert method_box.options == ["(all)", "Predict", "PredictBatch"]
    assert at.sidebar.selectbox(key="filter_run").options == ["(all)", "run-1", "run-2"]


def test_filters_come_from_and_go_to_the_url(served_store):
    seed(served_store, 3, "Predict")
    seed(served_store, 2, "PredictBatch", run_id="run-2")
    at = run_probe({"method": "PredictBatch"})
    assert not at.exception
    assert at.metric[0].value == "2"
    assert at.sidebar.selectbox(key="filter_method").value == "PredictBatch"
    assert "method=PredictBatch" in at.markdown[0].value
    at.sidebar.selectbox(key="filter_run").set_value("run-1").run()
    assert at.query_params["run"] == "run-1"
    assert any("No calls match the filters" in info.value for info in at.info)


def test_a_time_range_excludes_old_calls(served_store):
    seed(served_store, 2, "Predict")  # 2026-09-21: long before "the last hour"
    at = run_probe({"range": "1h"})
    assert any("No calls match the filters" in info.value for info in at.info)
    at.sidebar.selectbox(key="filter_range").set_value("all").run()
    assert "range" not in at.query_params
    assert at.metric[0].value == "2"


def test_custom_range_and_bad_input_in_the_url(served_store):
    seed(served_store, 2, "Predict")
    at = run_probe({"range": "custom", "since": "yesterday"})
    assert not at.exception
    assert any("is not a date and time" in error.value for error in at.sidebar.error)
    assert at.metric[0].value == "2"  # a bad bound is ignored, and said so
    at = run_probe({"range": "custom", "since": "2026-09-22T00:00:00"})
    assert any("No calls match the filters" in info.value for info in at.info)
    at = run_probe({"range": "fortnight"})
    assert any("Unknown time range" in warning.value for warning in at.sidebar.warning)


def test_no_store_attached_says_how_to_start_one():
    runtime.unregister()
    at = run_probe()
    assert not at.exception
    assert any("grpc-overhead serve" in error.value for error in at.error)


def test_answers_are_not_reused_across_stores(served_store):
    seed(served_store, 1, "Predict")
    assert run_probe().metric[0].value == "1"
    seed(served_store, 1, "Predict")
    runtime.register(runtime.Served(served_store))  # a new registration: a new cache key
    assert run_probe().metric[0].value == "2"


def test_live_pages_read_the_store_as_of_the_intakes_latest_batch(served_store):
    """With the intake's counter (inside serve), a page run reads the store as of the
    snapshot taken after the latest stored batch: kept while the counter stays put (reruns
    share cached answers) and taken anew, not rounded to a whole second, once it moves."""
    batches = [0]
    seed(served_store, 2, "Predict")
    runtime.register(runtime.Served(served_store, live=True, changes=lambda: batches[0]))
    assert run_probe().metric[0].value == "2"
    seed(served_store, 1, "Predict")  # stored, and the counter does not say so yet
    assert run_probe().metric[0].value == "2"
    batches[0] += 1
    assert run_probe().metric[0].value == "3"
    seed(served_store, 1, "Predict")
    batches[0] += 1
    assert run_probe().metric[0].value == "4"


def test_a_one_sided_call_shows_once_its_grace_has_passed_with_nothing_else_arriving(
    served_store, monkeypatch
):
    """The snapshot is kept while the intake's counter stays put; a call whose only half
    came in the latest batch is held back as of it, and must show once its grace has passed
    (it stayed hidden for good, reloads too, while nothing else arrived)."""
    grace_s = 4.0
    monkeypatch.setenv("GRPC_OVERHEAD_HOLD_BACK_S", str(grace_s))
    runtime.register(runtime.Served(served_store, live=True, changes=lambda: 1))
    _client, server = synthetic_call(Truth(start=time.time_ns() - 20 * MS))
    insert_spans(served_store, [server])  # a server whose caller is not instrumented
    stored = time.monotonic()
    shown = AppTest.from_function(shown_calls_page, default_timeout=PAGE_TIMEOUT_S)
    shown.run()
    ran = time.monotonic()  # the run's snapshot was taken before: the call is decided by then
    if ran - stored < grace_s:  # a run that ended inside the grace held it back
        assert shown.metric[0].value == "0", "a half-arrived call was shown before its grace"
    time.sleep(max(0.0, ran + grace_s - time.monotonic()))
    assert shown.run().metric[0].value == "1"


def test_auto_refresh_is_on_for_live_stores_and_kept_in_the_url(served_store):
    seed(served_store, 1, "Predict")
    runtime.register(runtime.Served(served_store, live=True))
    at = run_probe()
    assert not at.exception
    assert at.sidebar.toggle(key="filter_refresh").value is True
    assert "refresh" not in at.query_params  # the default needs no parameter
    at.sidebar.toggle(key="filter_refresh").set_value(False).run()
    assert at.query_params["refresh"] == "0"
    assert run_probe({"refresh": "0"}).sidebar.toggle(key="filter_refresh").value is False
    runtime.register(runtime.Served(served_store))
    assert run_probe().sidebar.toggle(key="filter_refresh").value is False
    assert run_probe({"refresh": "1"}).sidebar.toggle(key="filter_refresh").value is True

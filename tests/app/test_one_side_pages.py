"""Calls seen from one side only (one side attached) on the Overview, Phases and Findings
pages: counted, said so, and never shown with made-up phases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.analyzer.seed import BASE_NS, MS, Truth, insert_spans, synthetic_call
from tests.app.charts import metrics
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit


def seed_sides(store) -> None:
    """4 calls with both halves, 3 with the server half only, 2 with the client half only."""
    spans = []
    for index in range(9):
        client, server = synthetic_call(replace(Truth(), start=BASE_NS + index * 10 * MS))
        if index < 4:
            spans += [client, server]
        elif index < 7:
            spans.append(server)
        else:
            spans.append(client)
    insert_spans(store, spans)


def _captions(at) -> str:
    return " ".join(caption.value for caption in at.caption)


def test_overview_counts_and_names_one_side_calls(served_store):
    seed_sides(served_store)
    at = run_page("overview")
    assert not at.exception and not at.error
    assert metrics(at)["Calls"] == "9"
    shown = _captions(at)
    assert "Server side only: 3 calls" in shown
    assert "Client side only: 2 calls" in shown
    assert "no transport events" not in shown  # one-side calls are not "without events"


def test_phases_page_says_which_calls_lack_the_other_side(served_store):
    seed_sides(served_store)
    at = run_page("phases")
    assert not at.exception and not at.error
    shown = _captions(at)
    assert "Server side only: 3 calls" in shown and "Client side only: 2 calls" in shown
    table = at.dataframe[0].value.set_index("phase")
    assert table.loc["request_network", "calls"] == 4  # needs both halves
    assert table.loc["processing", "calls"] == 7  # server phases: with and without a client
    assert table.loc["client_serialize", "calls"] == 6  # client phases: with and without a server
    assert table.loc["total", "calls"] == 6


def test_findings_page_says_which_calls_lack_the_other_side(served_store):
    seed_sides(served_store)
    at = run_page("findings")
    assert not at.exception and not at.error
    shown = _captions(at)
    assert "Server side only: 3 calls" in shown and "Client side only: 2 calls" in shown

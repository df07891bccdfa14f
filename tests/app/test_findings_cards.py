"""The Findings page's cards: each draws the numbers its finding rests on."""

from __future__ import annotations

from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from tests.analyzer.seed import BASE_NS, MS, US, Truth, insert_spans, synthetic_call
from tests.app.charts import figures, traces
from tests.app.conftest import APP_DIR, PAGE_TIMEOUT_S

pytestmark = pytest.mark.unit

CALLS = 240


def seed_a_saturated_pool(store) -> None:
    """Calls that wait ~3 ms for a server thread: a ``server_pool_saturated`` finding."""
    spans = []
    for index in range(CALLS):
        spread = (index * 7919) % 401
        truth = replace(
            Truth(),
            start=BASE_NS + index * 10 * MS,
            processing=2 * MS + spread * US,
            pool_wait=3 * MS + spread * US,
            server_queue=3 * MS + 60 * US + spread * US,
        )
        spans += list(synthetic_call(truth))
    insert_spans(store, spans)


def test_a_wait_card_charts_its_phase_and_the_total_from_its_evidence(served_store):
    seed_a_saturated_pool(served_store)
    # Through the app's navigation: a card links to the page that shows the rest.
    at = AppTest.from_file(str(APP_DIR / "main.py"), default_timeout=PAGE_TIMEOUT_S).run()
    at = at.switch_page("pages/findings.py").run()
    assert not at.exception and not at.error
    first = at.subheader[0].value
    assert first.startswith("1. server pool saturated"), first
    drawn = figures(at)
    assert "finding_evidence_0" in drawn, sorted(drawn)  # the card's own numbers
    assert not any(key.startswith("finding_phases_") for key in drawn)  # no query of its own
    bars = traces(drawn["finding_evidence_0"])
    assert set(bars) == {"p5", "p50", "p99"}
    assert bars["p5"]["x"] == ["pool_wait"] and bars["p50"]["x"] == ["pool_wait", "total"]
    # The wait's p50, which the finding's saving rests on (~3.2 ms), and the total's.
    assert 2_900 <= bars["p50"]["y"][0] <= 3_500, bars["p50"]
    assert bars["p50"]["y"][1] > bars["p50"]["y"][0]  # the total holds the wait

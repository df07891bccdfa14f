"""Calls traced by other instrumentations on the pages: the explorer names each side's
language and instrumentation and says where each phase comes from (or why it is empty);
the Phases page notes which phases the selected calls cannot have."""

from __future__ import annotations

import pytest

from tests.analyzer.other_spans import a72_call, semconv_call
from tests.analyzer.seed import insert_spans, synthetic_call
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit


def test_the_explorer_shows_an_a72_call(served_store):
    spans = a72_call(attempts=2, ids=21)
    insert_spans(served_store, spans)
    at = run_page("explorer", {"trace": spans[0].trace_id})
    assert not at.exception and not at.error
    captions = " ".join(caption.value for caption in at.caption)
    assert "client: go, grpc A72 (scope grpc-go)" in captions
    assert "2 attempts" in captions
    origins = at.dataframe[3].value.set_index("phase")
    assert origins.loc["client_pre_send", "value_us"] == 30
    assert origins.loc["client_pre_send", "from"].startswith("client: Attempt. span start")
    assert "one event per message" in origins.loc["client_serialize", "unavailable"]
    # grpc-go sends the headers before serializing: no request_network, request_receive.
    assert "headers before serializing" in origins.loc["request_network", "unavailable"]
    assert origins.loc["request_receive", "value_us"] == 270
    # The chosen attempt's and the server's A72 events, with their message numbers.
    events = at.dataframe[2].value
    assert set(events["event"]) == {"Outbound message", "Inbound message"}
    assert "message 1, 900 B" in set(events["detail"])
    assert set(events["lane"]) == {"client", "server"}


@pytest.mark.parametrize("page", ["phases", "overview"])
def test_the_page_notes_what_other_sources_lack(served_store, page):
    # The Overview takes the sources from its own query's grouping set, Phases asks for them.
    insert_spans(served_store, [*synthetic_call(), *semconv_call(ids=22), *semconv_call(ids=23)])
    at = run_page(page)
    assert not at.exception and not at.error
    notes = [info.value for info in at.info if "traced by" in info.value]
    assert len(notes) == 1
    assert notes[0].startswith("2 calls here are traced by semconv message events (client)")
    assert "client_serialize" in notes[0] and "processing" in notes[0]


@pytest.mark.parametrize("page", ["phases", "overview"])
def test_no_note_when_every_call_is_ours(served_store, page):
    insert_spans(served_store, list(synthetic_call()))
    at = run_page(page)
    assert not at.exception and not at.error
    assert not [info for info in at.info if "traced by" in info.value]

"""``shapes.any_streams``: the cheap check that lets a page skip merging every call to find
stream methods when there is none. It must never say "none" when a stream is there, from
either half alone, and stream answers must not change because of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.trace import SpanKind

from grpc_overhead.analyzer.insights import streams
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.analyzer.shapes import any_streams, method_shapes
from tests.analyzer import seed
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def spans():
    """Real calls (ours): 2 unary Echo, one server-streaming Split, one client-streaming Join."""
    return seed.real_spans(calls=2)


def stream_spans(spans, kind: SpanKind | None = None) -> list:
    return [
        span
        for span in spans
        if span.attributes.get("rpc.method") != "Echo" and kind in (None, span.kind)
    ]


def test_no_stream_stored_says_no_and_the_page_answer_is_empty(store, spans):
    unary = [span for span in spans if span.attributes.get("rpc.method") == "Echo"]
    assert len(unary) == 4
    seed.insert_rows(store, seed.readable_span_rows(unary))
    assert not any_streams(store)
    assert streams.stream_methods(store).empty
    assert set(method_shapes(store)["shape"]) == {"unary"}


def test_streams_stored_say_yes_and_the_page_shows_them(store, spans):
    seed.insert_rows(store, seed.readable_span_rows(spans))
    assert any_streams(store)
    found = streams.stream_methods(store)
    assert set(found["method"]) == {"Split", "Join"}
    assert set(found["shape"]) == {"server_streaming", "client_streaming"}


@pytest.mark.parametrize("kind", [SpanKind.CLIENT, SpanKind.SERVER], ids=["client", "server"])
def test_either_half_alone_is_enough(store, spans, kind):
    half = stream_spans(spans, kind)
    assert len(half) == 2
    seed.insert_rows(store, seed.readable_span_rows(half))
    settled = CallFilters().at_rest()  # a one-sided call is shown once nothing more can come
    assert any_streams(store, settled)
    shapes = method_shapes(store, settled).set_index("method")["shape"]
    assert shapes.to_dict() == {"Join": "client_streaming", "Split": "server_streaming"}
    assert set(streams.stream_methods(store, settled)["method"]) == {"Split", "Join"}


def test_a_time_range_without_the_streams_says_no(store, spans):
    seed.insert_rows(store, seed.readable_span_rows(spans))
    first = min(span.start_time for span in spans)
    before = datetime.fromtimestamp(first / 1e9, tz=UTC) - timedelta(hours=2)
    earlier = CallFilters(since=before - timedelta(hours=1), until=before)
    assert not any_streams(store, earlier)
    assert streams.stream_methods(store, earlier).empty
    assert any_streams(store, CallFilters(since=before))

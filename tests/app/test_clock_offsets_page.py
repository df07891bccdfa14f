"""The Clock offsets page on a seeded chDB store: offsets, bands and corrected calls."""

from __future__ import annotations

import pytest

from tests.analyzer.seed import (
    BASE_NS,
    MS,
    US,
    Truth,
    calls_across_hosts,
    insert_spans,
    synthetic_call,
)
from tests.app.charts import figures, metrics, values
from tests.app.conftest import run_page

pytestmark = pytest.mark.unit

SKEW = 37 * MS
REQUEST, RESPONSE = 3 * MS, 1 * MS
MINUTE = 60_000 * MS


def seed(store) -> None:
    """host-a -> host-b (server clock 37 ms ahead, paths 3 ms / 1 ms) in two minutes,
    and 4 calls within host-a."""
    spans = []
    for start in (BASE_NS, BASE_NS + MINUTE):
        for pair in calls_across_hosts(
            10,
            server_offset=SKEW,
            request_network=REQUEST,
            response_network=RESPONSE,
            start=start,
        ):
            spans += pair
    for index in range(4):
        spans += synthetic_call(Truth(start=BASE_NS + index * MS))
    insert_spans(store, spans)


def test_offsets_bands_and_counts_come_from_the_calls(served_store):
    seed(served_store)
    at = run_page("clock_offsets")
    assert not at.exception and not at.error
    shown = metrics(at)
    assert shown["Host pairs"] == "2"
    assert shown["Cross-host pairs"] == "1"
    assert shown["Calls corrected"] == "20"
    # The estimate is off by the path asymmetry, (3 - 1) / 2 ms, and its band says so.
    assert shown["Largest |offset|"] == "38 ms"
    pairs = at.dataframe[0].value.set_index("pair")
    remote = pairs.loc["host-a → host-b"]
    assert remote["offset_us"] == (SKEW + (REQUEST - RESPONSE) / 2) / 1000
    assert remote["uncertainty_us"] == (REQUEST + RESPONSE) / 2 / 1000
    assert (remote["calls"], remote["corrected"], remote["from_own_window"]) == (20, 20, 20)
    assert remote["windows"] == 2
    local = pairs.loc["host-a → host-a"]
    assert (local["offset_us"], local["same_clock"], local["corrected"]) == (0.0, 4, 0)


def test_the_band_holds_the_true_offset(served_store):
    seed(served_store)
    at = run_page("clock_offsets")
    high, low, offset = figures(at)["clock_offsets_timeline"]["data"]
    assert offset["name"] == "host-a → host-b" and low["fill"] == "tonexty"
    assert values(offset["y"]) == [38_000.0, 38_000.0]  # one estimate per minute
    for lower, upper in zip(values(low["y"]), values(high["y"]), strict=True):
        assert (lower, upper) == (36_000.0, 40_000.0)
        assert lower <= SKEW / 1000 <= upper


def test_corrected_calls_show_raw_next_to_corrected(served_store):
    seed(served_store)
    at = run_page("clock_offsets")
    assert "clock_offsets_corrected" in figures(at)
    sample = at.dataframe[1].value
    assert len(sample) == 10  # the latest window's calls
    assert set(sample["pair"]) == {"host-a → host-b"}
    assert (sample["request_network_raw_us"] == (REQUEST + SKEW) / 1000).all()
    assert (sample["request_network_corrected_us"] == (REQUEST + RESPONSE) / 2 / 1000).all()
    assert sample["explore"].str.startswith("explorer?trace=").all()


def test_same_host_only_says_nothing_needed_correcting(served_store):
    insert_spans(served_store, synthetic_call(Truth()))
    at = run_page("clock_offsets")
    assert not at.exception
    assert metrics(at)["Calls corrected"] == "0"
    assert any("nothing needed correcting" in info.value for info in at.info)


def test_calls_without_a_server_half_cannot_be_estimated(served_store):
    client, _ = synthetic_call(Truth(request_network=500 * US))
    insert_spans(served_store, [client])
    at = run_page("clock_offsets")
    assert not at.exception
    assert any("no clock offset can be estimated" in info.value for info in at.info)


def test_empty_store_shows_how_to_send_data(served_store):
    at = run_page("clock_offsets")
    assert any("No calls stored yet" in info.value for info in at.info)

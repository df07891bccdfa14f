"""Pages read settled minutes from ``grpc_settled_calls`` and show what a raw pass shows.

Calls over four minutes (two host pairs, one with a 37 ms clock offset; two
methods; gzip, zstd and none; some failed), answers computed raw first, then
the first two minutes settled: every page's analyzer function must give the
same frame, for whole-range filters, filters cutting a minute, and an
OpenTelemetry service filter.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pandas as pd
import pytest

from grpc_overhead.analyzer import call_rollup, rollup
from grpc_overhead.analyzer.insights import (
    clock_offsets,
    explorer,
    instances,
    overview,
    payload,
    phases,
    rows,
    sources,
)
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.store.base import table_exists
from tests.analyzer import seed
from tests.analyzer.seed import module_store_fixture, store_fixture  # noqa: F401
from tests.analyzer.test_phases_rollup import MINUTE, MS, START, at

pytestmark = pytest.mark.e2e

FILTERS = (
    CallFilters(),
    # Edges inside minutes, a method, and a filter the phase rollup cannot answer.
    CallFilters(
        since=at(START + MINUTE // 2),
        until=at(START + 3 * MINUTE + MINUTE // 3),
        method="Predict",
        otel_service="load-generator",
    ),
)
#: A lighter set where the code paths are the same as above.
CORE = ("overview mean", "sides", "instances", "slowest", "call 0", "call 1")


#: (trace id, client span id) of each call, in start order.
FIRST_CALLS: list[tuple[str, str]] = []


def calls_over_four_minutes(store, late_server_half: bool = False) -> list[seed.Span]:
    """48 calls, 12 a minute; returns the server half of the first call when it is held
    back (``late_server_half``: it arrives after its minute settled)."""
    spans, held = [], []
    FIRST_CALLS.clear()
    for index in range(48):
        truth = replace(
            seed.Truth(),
            start=START + index * (MINUTE // 12) + 7 * MS,
            processing=(1 + index % 5) * MS,
            server_offset=(37 if index % 2 else 0) * MS,
        )
        client, server = seed.synthetic_call(
            truth,
            method="Predict" if index % 3 else "Health",
            server_host="host-b" if index % 2 else "host-a",
            request_bytes=1024 * (1 + index % 4),
        )
        seed.compress_with(("gzip", "zstd", "none")[index % 3], client, server)
        FIRST_CALLS.append((client.trace_id, client.span_id))
        if index % 7 == 0:
            client.attributes["rpc.grpc.status_code"] = "14"
            server.attributes["rpc.grpc.status_code"] = "14"
        if late_server_half and index == 0:
            held.append(server)
            spans.append(client)
        else:
            spans += [client, server]
    seed.insert_spans(store, spans)
    return held


def answers(store, filters: CallFilters, only: tuple[str, ...] = ()) -> dict[str, pd.DataFrame]:
    """What each page asks for, under ``filters`` (``only``: these answers)."""
    asked = {
        "overview mean": lambda: overview.overview(store, filters, "mean"),
        "overview p50": lambda: overview.overview(store, filters, "p50"),
        "sides": lambda: rows.sides(store, filters),
        "tail": lambda: phases.tail(store, filters, slowest=0.1),
        "by algorithm": lambda: payload.by_algorithm(store, filters),
        "payload sample": lambda: payload.payload_sample(store, filters, 30),
        "instances": lambda: instances.instance_load(store, filters),
        "slowest": lambda: explorer.find_calls(store, filters, limit=20),
        "window calls": lambda: clock_offsets.window_calls(store, filters),
        "sources": lambda: sources.source_mix(store, filters),
        "corrected": lambda: clock_offsets.corrected_calls(
            store, filters, window_start=at(START + MINUTE)
        ),
        # The first two calls (minute 0): one clock, then two clocks 37 ms apart.
        **{
            f"call {index}": lambda index=index: explorer.call_summary(
                store, FIRST_CALLS[index][0], FIRST_CALLS[index][1]
            )
            for index in (0, 1)
        },
    }
    return {name: answer() for name, answer in asked.items() if not only or name in only}


def assert_same(got: dict[str, pd.DataFrame], wanted: dict[str, pd.DataFrame]) -> None:
    assert got.keys() == wanted.keys()
    for name, frame in wanted.items():
        assert not frame.empty or name in ("corrected",), name
        pd.testing.assert_frame_equal(
            got[name].reset_index(drop=True),
            frame.reset_index(drop=True),
            check_dtype=False,
            rtol=1e-9,
            obj=name,
        )


def test_every_page_reads_the_same_numbers_from_settled_calls(store):
    calls_over_four_minutes(store)
    raw = [answers(store, filters) for filters in FILTERS]
    assert "grpc_settled_calls" not in rows.rows_for(store, CallFilters())[0]
    # Two minutes settled: stored rows for them, the two others computed raw.
    assert rollup.settle(store, now_ns=START + 2 * MINUTE, delay=timedelta(0)) == 2
    sql = rows.rows_for(store, CallFilters())[0]
    assert "grpc_settled_calls" in sql and "UNION ALL" in sql
    stored = store.query("SELECT count() AS n FROM grpc_settled_calls")["n"].iloc[0]
    assert stored == 24
    for filters, expected in zip(FILTERS, raw, strict=True):
        assert_same(answers(store, filters), expected)
    # Everything settled: stored rows alone.
    assert rollup.settle(store, now_ns=START + 10 * MINUTE, delay=timedelta(0)) == 8
    assert "UNION ALL" not in rows.rows_for(store, CallFilters())[0]
    assert_same(answers(store, CallFilters()), raw[0])


def test_a_late_half_re_rolls_its_minute(store):
    held = calls_over_four_minutes(store, late_server_half=True)
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 4
    seed.insert_spans(store, held)  # the first call's server half, after its minute settled
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 0
    settled = answers(store, CallFilters(), CORE)
    store.command("TRUNCATE TABLE grpc_phase_rollup")  # no watermark: everything raw
    assert "grpc_settled_calls" not in rows.rows_for(store, CallFilters())[0]
    raw = answers(store, CallFilters(), CORE)
    assert_same(settled, raw)
    sides = raw["sides"].iloc[0]
    assert (sides["calls"], sides["server_only_calls"], sides["client_only_calls"]) == (48, 0, 0)


def test_rollups_of_another_version_are_rebuilt(store):
    calls_over_four_minutes(store)
    raw = answers(store, CallFilters(), ("overview mean",))
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 4
    # A store settled by the previous version: no version table, no settled calls.
    store.command(f"DROP TABLE {call_rollup.VERSION_TABLE}")
    store.command(f"DROP TABLE {call_rollup.SETTLED_CALLS_TABLE}")
    assert call_rollup.ensure_version(store, CallsOptions(), ["grpc_phase_rollup"])
    assert not table_exists(store, "grpc_phase_rollup")  # the next settle rebuilds it
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 4
    assert store.query("SELECT count() AS n FROM grpc_settled_calls")["n"].iloc[0] == 48
    assert_same(answers(store, CallFilters(), ("overview mean",)), raw)
    # The same version again: nothing dropped, nothing counted twice.
    assert not call_rollup.ensure_version(store, CallsOptions(), ["grpc_phase_rollup"])
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 0
    assert store.query("SELECT count() AS n FROM grpc_settled_calls")["n"].iloc[0] == 48


def test_settled_calls_are_stored_with_the_chosen_zstd_level(store):
    calls_over_four_minutes(store)
    assert rollup.settle(store, now_ns=START + 4 * MINUTE, delay=timedelta(0)) == 4
    codecs = store.query(
        "SELECT name, compression_codec FROM system.columns"
        " WHERE table = 'grpc_settled_calls' AND database = currentDatabase()"
    ).set_index("name")["compression_codec"]
    assert codecs["call_start_ns"] == ""  # the sorting key keeps the default
    others = codecs.drop("call_start_ns")
    assert len(others) > 100
    assert set(others) == {f"CODEC(ZSTD({call_rollup.CODEC_LEVEL}))"}
    assert call_rollup.CODEC_LEVEL > 1  # level 3: 15 % smaller than 1 on a demo's calls
    # What is stored reads back: the pages' answers over it are checked above.
    parts = store.query(
        "SELECT sum(rows) AS n FROM system.parts WHERE active AND table = 'grpc_settled_calls'"
    )
    assert int(parts["n"].iloc[0]) == 48

"""The fault-injection suite (harness/fault_suite.py), reduced; make bench runs it in full.

A flood with short deadlines, poison and KILL attempts against a real intake,
then ``serve`` and ``collector run`` as processes, each killed with SIGKILL
and restarted under load, then an unauthenticated flood beside senders with the
token. Checked: acknowledged ⊆ stored, refused ∩ stored = ∅, poison never stored,
no span stored twice on any path, nothing unauthenticated stored, and
``report``/``sql`` still read the store. Every path twice: OTLP/gRPC and OTLP/HTTP.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.fault_suite import QUICK, run_suite

pytestmark = pytest.mark.e2e


def test_faults_lose_nothing_acknowledged_and_store_nothing_refused(
    tmp_path: Path, collector_bin: Path
) -> None:
    figures = run_suite(QUICK, str(tmp_path))
    flood, crash = figures["flood"], figures["crash"]

    numbers = flood["invariants"]
    assert numbers["spans_acknowledged"] > 0 and numbers["poison_spans"] > 0
    assert flood["requests"].get("refused", 0) > 0, "the flood never made the intake refuse"
    assert (numbers["lost"], numbers["refused_but_stored"]) == (0, 0), flood
    assert (numbers["poison_stored"], numbers["duplicates"]) == (0, 0), flood
    assert flood["intake_spans_stored_counter"] == flood["stored_rows"]
    assert flood["kill_attempts"]["tried"] == flood["kill_attempts"]["refused"] > 0
    assert flood["reports_readable"]
    # The same senders over OTLP/HTTP (gzip'd protobuf and JSON), at the same time.
    over_http = flood["http"]
    assert over_http["spans_acknowledged"] > 0 and over_http["poison_spans"] > 0
    assert over_http["requests"].get("refused", 0) > 0, over_http
    assert over_http["attempts"].get("http-429", 0) > 0, over_http
    assert any(kind.startswith("garbage-http-4") for kind in over_http["attempts"]), over_http
    assert (over_http["lost"], over_http["refused_but_stored"]) == (0, 0), over_http
    assert (over_http["poison_stored"], over_http["duplicates"]) == (0, 0), over_http

    assert crash["faults"] == {"serve_killed": QUICK.kills, "collector_killed": QUICK.kills}
    direct, through = crash["direct"], crash["through_collector"]
    assert direct["spans_acknowledged"] > 0 and through["spans_acknowledged"] > 0
    assert (direct["lost"], direct["refused_but_stored"], direct["poison_stored"]) == (0, 0, 0)
    # The collector's on-disk queue: what it acknowledged survives its kill -9.
    assert (through["lost"], through["refused_but_stored"], through["poison_stored"]) == (0, 0, 0)
    # A kill -9 between a commit and its answer, and a collector resending re-cut batches
    # after its own kill -9: the intake stores each span once all the same.
    assert (direct["duplicates"], through["duplicates"]) == (0, 0), crash
    for path in ("direct_http", "through_collector_http"):
        numbers = crash[path]
        assert numbers["spans_acknowledged"] > 0, (path, numbers)
        assert (numbers["lost"], numbers["refused_but_stored"]) == (0, 0), (path, numbers)
        assert (numbers["poison_stored"], numbers["duplicates"]) == (0, 0), (path, numbers)
    assert crash["reports_readable"]

    # An unauthenticated flood beside senders with the token: nothing of it stored, and
    # every authenticated request acknowledged, none refused, each span stored once.
    unauthenticated = figures["unauthenticated"]
    flooded, authenticated = unauthenticated["unauthenticated"], unauthenticated["authenticated"]
    assert flooded["spans_sent"] > 0 and flooded["stored"] == 0, unauthenticated
    assert flooded["requests"] == {"refused": flooded["requests"].get("refused", 0)}, flooded
    assert unauthenticated["intake_unauthenticated_counter"] == sum(flooded["requests"].values()), (
        unauthenticated
    )
    assert authenticated["requests"] == {"acknowledged": (QUICK.senders // 2) * QUICK.requests}
    assert (authenticated["lost"], authenticated["duplicates"]) == (0, 0), authenticated
    assert unauthenticated["stored_rows"] == authenticated["spans_acknowledged"]

"""Findings on a real chDB store seeded with one run per injected cause, plus healthy runs.

One store for the module, every scenario a run of its own, settled once (as the
``findings`` command's store is): each test reads ``findings`` for its run. Every
scenario's calls vary deterministically (``jitter``), so estimates have a spread
and confidence is earned, not given by identical calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from grpc_overhead.analyzer.findings import KIND_NAMES, Findings, findings
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer import seed
from tests.analyzer.seed import BASE_NS, MS, US, Truth, module_store_fixture  # noqa: F401

pytestmark = pytest.mark.unit

CALLS = 240
SECOND = 1_000 * MS


def jitter(index: int, spread: int) -> int:
    """A deterministic spread of 0..spread across calls (a prime stride)."""
    return (index * 7919) % (spread + 1)


def _calls(run: int, name: str, scenario: Scenario) -> list[seed.Span]:
    spans = []
    for index in range(CALLS):
        start = BASE_NS + run * 60 * SECOND + index * 10 * MS
        request_bytes, response_bytes = scenario.sizes(index)
        host = f"host-{scenario.instance(index)}"
        client, server = seed.synthetic_call(
            replace(scenario.truth(index), start=start),
            run_id=name,
            request_bytes=request_bytes,
            response_bytes=response_bytes,
            server_host=host,
            client_host=host,
        )
        server.resource["service.instance.id"] = scenario.instance(index)
        if scenario.dispatch is not None:  # below 1 s: wait = client - server budget + 0.5 ms
            budget = "grpc_overhead.deadline_budget_ns"
            client.attributes[budget] = str(500 * MS)
            server.attributes[budget] = str(500 * MS - scenario.dispatch(index) + MS // 2)
        spans += [client, server]
    return spans


def healthy(i: int) -> Truth:
    return Truth(
        processing=2 * MS + jitter(i, 500 * US), request_network=300 * US + jitter(i, 50 * US)
    )


def one_instance(i: int) -> str:
    return "s-1"


def small(i: int) -> tuple[int, int]:
    return 1024, 512


@dataclass(frozen=True)
class Scenario:
    """Per call: its timeline, its server instance, its (request, response) bytes."""

    truth: Callable[[int], Truth]
    instance: Callable[[int], str] = one_instance
    sizes: Callable[[int], tuple[int, int]] = small
    #: The server's dispatch wait (GIL, serving thread), told by the deadline budgets.
    dispatch: Callable[[int], int] | None = None


def with_healthy(**changes: Callable[[int], int]) -> Callable[[int], Truth]:
    """``healthy`` with some phases replaced, each a function of the call's index."""
    return lambda i: replace(healthy(i), **{name: f(i) for name, f in changes.items()})


def tail_over_spread(i: int, cured: bool = False) -> Truth:
    slow = 25 * MS if i % 25 == 0 and not cured else 0
    queue = 6 * MS if i % 33 == 1 else jitter(i, 300 * US)
    return replace(healthy(i), processing=2 * MS + slow + jitter(i, 500 * US), server_queue=queue)


def upload_sizes(i: int) -> tuple[int, int]:
    return 100_000 + jitter(i, 1_900_000), 512


def download_sizes(i: int) -> tuple[int, int]:
    return 1024, 100_000 + jitter(i, 1_900_000)


def per_kb(size: int) -> int:
    """20 µs per KB: 20,000 µs/MB (50 MB/s), a narrow path."""
    return size * 20 * US // 1000


def hot(i: int) -> str:
    return "s-1" if i % 10 < 7 else f"s-{2 + i % 2}"


SCENARIOS: dict[str, Scenario] = {
    "healthy": Scenario(
        healthy, lambda i: f"s-{1 + i % 2}", lambda i: (1024 + jitter(i, 3000), 512)
    ),
    "healthy_large": Scenario(healthy, sizes=lambda i: (50_000 + jitter(i, 20_000), 800)),
    "pool": Scenario(
        with_healthy(
            pool_wait=lambda i: 3 * MS + jitter(i, 400 * US),
            server_queue=lambda i: 3 * MS + 60 * US + jitter(i, 400 * US),
        )
    ),
    "post": Scenario(with_healthy(post_processing=lambda i: 1500 * US + jitter(i, 200 * US))),
    "connect": Scenario(with_healthy(client_connect=lambda i: 2 * MS + jitter(i, 300 * US))),
    "client_busy": Scenario(
        with_healthy(client_dispatch=lambda i: 1500 * US + jitter(i, 300 * US))
    ),
    # The wait is inside the request gap: the truth's request_network holds it.
    "dispatch": Scenario(
        with_healthy(request_network=lambda i: 300 * US + 2 * MS + jitter(i, 300 * US)),
        dispatch=lambda i: 2 * MS + jitter(i, 300 * US),
    ),
    "serialization": Scenario(
        with_healthy(
            client_serialize=lambda i: 400 * US,
            request_deserialize=lambda i: 500 * US,
            response_serialize=lambda i: 300 * US + jitter(i, 100 * US),
            client_deserialize=lambda i: 300 * US,
        )
    ),
    "network": Scenario(
        with_healthy(
            processing=lambda i: 500 * US,
            request_network=lambda i: 3 * MS + jitter(i, 300 * US),
            response_network=lambda i: 3 * MS,
        )
    ),
    # A client busy in 2 % of the calls only (client_busy at p99 alone) on a far path.
    "network_busy_tail": Scenario(
        with_healthy(
            processing=lambda i: 500 * US,
            request_network=lambda i: 3 * MS + jitter(i, 300 * US),
            response_network=lambda i: 3 * MS,
            client_dispatch=lambda i: 8 * MS if i % 50 == 0 else 0,
        )
    ),
    # The body's arrival lands in server_queue after the pool's short wait.
    "upload": Scenario(
        with_healthy(server_queue=lambda i: 60 * US + per_kb(upload_sizes(i)[0])),
        sizes=upload_sizes,
    ),
    "download": Scenario(
        with_healthy(response_network=lambda i: 250 * US + per_kb(download_sizes(i)[1])),
        sizes=download_sizes,
    ),
    "imbalance": Scenario(
        with_healthy(processing=lambda i: (4 if hot(i) == "s-1" else 2) * MS + jitter(i, 300 * US)),
        hot,
    ),
    "tail": Scenario(
        with_healthy(processing=lambda i: (22 if i % 10 == 0 else 2) * MS + jitter(i, 200 * US)),
        lambda i: "s-2" if i % 10 == 0 else "s-1",
    ),
    # 1 call in 25 waits 25 ms more in its handler; 1 in 33 queues 6 ms (the cure keeps it).
    "tail_over_spread": Scenario(tail_over_spread),
}


@pytest.fixture(scope="module")
def seeded(module_store: Store) -> Iterator[Store]:
    spans = []
    for run, (name, scenario) in enumerate(SCENARIOS.items()):
        spans += _calls(run, name, scenario)
    across = seed.calls_across_hosts(
        CALLS,
        server_offset=5 * MS,
        request_network=100 * US,
        response_network=900 * US,
        jitter=300 * US,
        start=BASE_NS + len(SCENARIOS) * 60 * SECOND,
    )
    for client, server in across:
        for span in (client, server):
            span.attributes["grpc_overhead.run_id"] = "clock"
        spans += [client, server]
    seed.insert_spans(module_store, spans)
    settle(module_store, CallsOptions())  # as the command does: pages and findings read it
    yield module_store


_answers: dict[str, Findings] = {}


def answer(store: Store, run: str) -> Findings:
    """``findings`` for one run, computed once per module."""
    if run not in _answers:
        _answers[run] = findings(store, CallFilters(run_id=run).at_rest())
    return _answers[run]


@pytest.mark.parametrize(
    ("run", "kind", "saving_p50_us", "instance"),
    [
        ("pool", "server_pool_saturated", 3200 - 100, None),
        ("post", "post_processing", 1600, None),
        ("connect", "connection_setup", 2150, None),
        ("client_busy", "client_busy", 1650, None),
        ("dispatch", "server_cpu_saturated", 2150, None),
        ("serialization", "serialization_cost", 1550, None),
        ("network", "network_latency", 6150 - 200, None),
        ("network_busy_tail", "network_latency", 6150 - 200, None),
        ("upload", "slow_upload", 19_000 * 1.05, None),
        ("download", "slow_download", 19_000 * 1.05, None),
        # Spread evenly, s-1 still serves a third of the calls at its 4 ms: per call on
        # average 0.7 x 4 + 0.3 x 2 ms now against (4 + 2 + 2) / 3 ms.
        ("imbalance", "load_imbalance", (0.7 * 4000 + 0.3 * 2000) - 8000 / 3, "s-1"),
    ],
)
def test_the_injected_cause_ranks_first_with_its_saving(
    seeded: Store, run: str, kind: str, saving_p50_us: float, instance: str | None
) -> None:
    top = answer(seeded, run).findings[0]
    assert top.kind == kind, [(f.kind, f.saving_p50_us) for f in answer(seeded, run).findings]
    assert top.saving_p50_us == pytest.approx(saving_p50_us, rel=0.15)
    assert top.confidence in ("high", "medium")
    assert top.instance == instance
    assert kind not in {entry.kind for entry in answer(seeded, run).checked}


def test_an_upload_is_not_taken_for_a_saturated_pool(seeded: Store) -> None:
    """The body's arrival lands in server_queue; pool_wait stays short: no pool finding."""
    kinds = {f.kind for f in answer(seeded, "upload").findings}
    assert "server_pool_saturated" not in kinds
    fit = answer(seeded, "upload").findings[0].evidence
    assert fit["fitted"] and fit["us_per_mb"] == pytest.approx(20_000, rel=0.05)


def test_a_client_busy_in_its_tail_alone_does_not_explain_the_typical_network_time(
    seeded: Store,
) -> None:
    """A client_busy found at p99 alone (saving 0 at p50) is kept beside network_latency:
    only a client busy in the typical call spills into the typical call's network time."""
    found = {f.kind: f for f in answer(seeded, "network_busy_tail").findings}
    assert found["client_busy"].saving_p50_us == 0
    assert found["client_busy"].saving_p99_us > 0
    assert "network_latency" in found


def test_the_tail_names_its_phase_and_instance(seeded: Store) -> None:
    tail = next(f for f in answer(seeded, "tail").findings if f.kind == "tail")
    assert tail.phases == ("processing",)
    assert tail.instance == "s-2"
    assert tail.saving_p50_us == 0
    assert tail.saving_p99_us == pytest.approx(20_000, rel=0.15)
    assert tail.evidence["correlates_with"]["instance"]["share_of_slow"] == 1.0


def test_the_tail_saves_what_its_cure_would_at_p99(seeded: Store) -> None:
    """p99 now minus p99 without the handler's wait (from the seeded truth)."""
    tail = next(f for f in answer(seeded, "tail_over_spread").findings if f.kind == "tail")
    assert tail.phases == ("processing",)
    p99s = [  # the rank quantileExact takes: floor(0.99 n)
        sorted(tail_over_spread(i, cured).expected_phases_us()["total"] for i in range(CALLS))[
            int(0.99 * CALLS)
        ]
        for cured in (False, True)
    ]
    truth = p99s[0] - p99s[1]
    assert tail.saving_p99_us == pytest.approx(truth, rel=0.05)
    spread = tail.evidence["total_p99_us"] - tail.evidence["total_p50_us"]  # queue's tail too
    assert tail.evidence["phase_share_of_tail"] * spread > 1.1 * truth  # the replaced estimate


def test_clocks_that_cannot_split_the_network_are_flagged(seeded: Store) -> None:
    found = next(f for f in answer(seeded, "clock").findings if f.kind == "clock_uncertain")
    assert found.evidence["uncertainty_p50_us"] == pytest.approx(500, rel=0.05)
    assert found.evidence["uncertainty_p50_us"] > 0.5 * found.evidence["request_network_p50_us"]
    assert found.instance == "host-b"
    assert (found.saving_p50_us, found.saving_p99_us) == (0, 0)


@pytest.mark.parametrize("run", ["healthy", "healthy_large"])
def test_healthy_calls_have_no_finding_above_low(seeded: Store, run: str) -> None:
    result = answer(seeded, run)
    assert [f.kind for f in result.findings if f.confidence != "low"] == []
    checked = {entry.kind: entry.why_not for entry in result.checked}
    assert set(checked) == set(KIND_NAMES)  # every kind looked for, and said so
    assert all(any(ch.isdigit() for ch in why) for why in checked.values()), checked


def test_json_is_the_contract_and_ranked(seeded: Store) -> None:
    document = json.loads(json.dumps(answer(seeded, "tail").to_json()))
    assert set(document) == {"findings", "checked"}
    keys = {
        "kind",
        "service",
        "method",
        "instance",
        "phases",
        "calls",
        "evidence",
        "saving_us",
        "saving_basis",
        "confidence",
        "action",
        "verify",
    }
    for finding in document["findings"]:
        assert set(finding) == keys and set(finding["saving_us"]) == {"p50", "p99"}
        assert finding["confidence"] in ("high", "medium", "low") and finding["kind"] in KIND_NAMES
    for entry in document["checked"]:
        assert set(entry) == {"kind", "why_not"}
    ranks = [(f["saving_us"]["p50"], f["saving_us"]["p99"]) for f in document["findings"]]
    assert ranks == sorted(ranks, reverse=True)


@pytest.mark.parametrize(
    ("run", "column", "evidence"),
    [
        ("pool", lambda row: row["server_pool_saturated__value_q"][1], lambda f: f["p50_us"]),
        ("download", lambda row: row["slow_download__us_per_mb"], lambda f: f["us_per_mb"]),
        (
            "imbalance",
            lambda row: row["total_q"][0],
            lambda f: f["instances"]["s-1"]["total_p50_us"],
        ),
    ],
)
def test_a_findings_query_reproduces_its_numbers_from_the_view(
    seeded: Store, run: str, column: Callable[..., float], evidence: Callable[..., float]
) -> None:
    """The "show the query" SQL over grpc_call_phases gives the finding's own numbers."""
    top = answer(seeded, run).findings[0]
    rows = seeded.query(top.sql, top.parameters, readonly=True)
    calls = rows.iloc[0].get(f"{top.kind}__calls", rows["calls"].sum())  # instances: all rows
    assert int(calls) == top.calls
    if "instance" in rows.columns:
        rows = rows[rows["instance"] == top.instance]
    assert float(column(rows.iloc[0])) == pytest.approx(evidence(top.evidence), rel=0.01)


def test_no_calls_is_an_answer_not_an_error(seeded: Store) -> None:
    result = findings(seeded, CallFilters(run_id="no-such-run").at_rest())
    assert result.findings == []
    checked = {entry.kind: entry.why_not for entry in result.checked}
    assert set(checked) == set(KIND_NAMES)
    assert checked["tail"] == "tail: 0 unary calls with a total"
    assert "0 of 0 calls" in checked["server_pool_saturated"]


def test_the_findings_page_reads_the_same_answer_as_a_frame(seeded: Store):
    from grpc_overhead.analyzer.insights import findings_cards

    frame = findings_cards.cards(seeded, CallFilters(run_id="imbalance").at_rest())
    assert tuple(frame.columns) == findings_cards.CARD_COLUMNS
    contract = answer(seeded, "imbalance").to_json()
    shown = frame[frame["found"]]
    assert list(shown["kind"]) == [f["kind"] for f in contract["findings"]]
    top = shown.iloc[0]
    assert top["kind"] == "load_imbalance" and top["instance"] == "s-1"
    assert json.loads(top["evidence"]) == contract["findings"][0]["evidence"]
    assert top["saving_p50_us"] == contract["findings"][0]["saving_us"]["p50"]
    assert findings_cards.evidence_view(top["kind"]) == ("instances", "instances")
    assert top["sql"].strip() and json.loads(top["parameters"])
    checked = frame[~frame["found"]]
    assert sorted(checked["kind"]) == sorted(c["kind"] for c in contract["checked"])
    assert checked["why_not"].str.len().min() > 0
    healthy_frame = findings_cards.cards(seeded, CallFilters(run_id="healthy").at_rest())
    assert not healthy_frame["found"].any()
    assert set(healthy_frame["kind"]) == set(KIND_NAMES)


def test_a_card_charts_the_numbers_its_finding_rests_on(seeded: Store):
    """Waits and the tail chart their own evidence (no query of their own); the kinds whose
    evidence is not a handful of quantiles keep their view's chart (None)."""
    from grpc_overhead.analyzer.insights import findings_cards

    pool = frame_of(seeded, "pool", "server_pool_saturated")
    bars = findings_cards.evidence_bars(pool["kind"], pool["evidence"], pool["phases"])
    evidence = json.loads(pool["evidence"])
    shown = {(row.bar, row.series): row.us for row in bars.itertuples()}
    assert shown == {
        ("pool_wait", "p5"): evidence["p5_us"],
        ("pool_wait", "p50"): evidence["p50_us"],
        ("pool_wait", "p99"): evidence["p99_us"],
        ("total", "p50"): evidence["total_p50_us"],
        ("total", "p99"): evidence["total_p99_us"],
    }
    tail = next(f for f in answer(seeded, "tail").findings if f.kind == "tail")
    bars = findings_cards.evidence_bars("tail", json.dumps(tail.evidence), "processing")
    assert bars["bar"].iloc[0] == "processing"  # the phase the finding names, tallest first
    assert set(bars["series"]) == {findings_cards.TAIL_SERIES}
    assert dict(zip(bars["bar"], bars["us"], strict=True)) == tail.evidence["phase_parts_us"]
    imbalance = frame_of(seeded, "imbalance", "load_imbalance")
    assert findings_cards.evidence_bars("load_imbalance", imbalance["evidence"], "") is None


def frame_of(store: Store, run: str, kind: str):
    from grpc_overhead.analyzer.insights import findings_cards

    frame = findings_cards.cards(store, CallFilters(run_id=run).at_rest())
    return frame[frame["kind"] == kind].iloc[0]


@pytest.mark.parametrize("run", ["pool", "network", "serialization", "healthy"])
def test_the_grafana_panel_finds_what_the_command_finds(seeded: Store, run: str):
    """The findings dashboard's SQL (Grafana's macros expanded as its datasource does) finds
    the same wait kinds, with the same savings, as ``findings`` for the run."""
    from grpc_overhead.analyzer.findings import waits
    from grpc_overhead.analyzer.grafana.findings import findings as dashboard
    from tests.dashboards import seeded as dashboards_seeded
    from tests.dashboards.datasource import expand

    raw = dashboard()["panels"][0]["targets"][0]["rawSql"]
    sql = expand(raw, dashboards_seeded.variables(run=run), dashboards_seeded.CONTEXT)
    rows = seeded.query(sql, readonly=True)
    assert set(rows["kind"]) == {kind.kind for kind in waits.KINDS}  # every kind, checked
    panel = {r.kind: r for r in rows.itertuples(index=False) if r.found}
    wait_kinds = {kind.kind for kind in waits.KINDS}
    ours = {f.kind: f for f in answer(seeded, run).findings if f.kind in wait_kinds}
    assert set(panel) == set(ours), (run, set(panel), set(ours))
    for kind, finding in ours.items():
        assert panel[kind].saving_p50_us == pytest.approx(finding.saving_p50_us, rel=0.05)


def test_a_kinds_query_runs_over_only_the_phases_it_reads(seeded: Store) -> None:
    """The engine analyzes every phase expression of a query: a kind's query runs over
    the calls with only the phases it names (and what they are computed from), with the
    same values as over every phase."""
    from grpc_overhead.analyzer.findings.source import Source, per_method, phases_named

    build = per_method(["quantileExact(0.5)(request_network_us) AS request_network_p50"])
    assert phases_named(build("calls")) == {"request_network", "total"}
    source = Source.run(seeded, CallFilters(), None, CallsOptions())
    narrow = source.narrowed(phases_named(build("calls")))
    assert narrow.narrowed is None  # narrowed once
    assert "request_network_us" in narrow.sql and "client_serialize_us" not in narrow.sql
    every = seeded.query(build(source.sql), source.parameters)
    only = seeded.query(build(narrow.sql), narrow.parameters)
    assert int(every["stored_calls"].sum()) > 0 and every["request_network_p50"].notna().all()
    assert only.equals(every)

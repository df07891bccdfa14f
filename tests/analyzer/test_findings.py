"""Findings on a real chDB store seeded with one run per injected cause, plus healthy runs.

One store for the module, every scenario a run of its own, settled once (as the
``findings`` command's store is): each test reads ``findings`` for its run. Every
scenario's calls vary deterministically (``jitter``), so estimates have a spread
and confidence is earned, not given by identical calls.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest

from grpc_overhead.analyzer.calls import CallFilters, CallsOptions
from grpc_overhead.analyzer.findings import KIND_NAMES, Findings, findings
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store.base import Store
from tests.analyzer import seed
from tests.analyzer.seed import BASE_NS, MS, US, Truth

pytestmark = pytest.mark.unit

CALLS = 240
SECOND = 1_000 * MS


def jitter(index: int, spread: int) -> int:
    """A deterministic spread of 0..spread across calls (a prime stride)."""
    return (index * 7919) % (spread + 1)


def _calls(
    run: int,
    truth: Callable[[int], Truth],
    *,
    instance: Callable[[int], str] = lambda i: "s-1",
    sizes: Callable[[int], tuple[int, int]] = lambda i: (1024, 512),
) -> list[seed.Span]:
    spans = []
    for index in range(CALLS):
        start = BASE_NS + run * 60 * SECOND + index * 10 * MS
        request_bytes, response_bytes = sizes(index)
        client, server = seed.synthetic_call(
            replace(truth(index), start=start),
            run_id=SCENARIO_NAMES[run],
            request_bytes=request_bytes,
            response_bytes=response_bytes,
            server_host=f"host-{instance(index)}",
            client_host=f"host-{instance(index)}",
        )
        server.resource["service.instance.id"] = instance(index)
        spans += [client, server]
    return spans


def healthy(i: int) -> Truth:
    return Truth(
        processing=2 * MS + jitter(i, 500 * US), request_network=300 * US + jitter(i, 50 * US)
    )


def _upload_sizes(i: int) -> tuple[int, int]:
    return 100_000 + jitter(i, 1_900_000), 512


def _upload(i: int) -> Truth:
    body = _upload_sizes(i)[0] * 20 * US // 1000  # 20 µs per KB: 20,000 µs/MB (50 MB/s)
    return replace(healthy(i), server_queue=60 * US + body)


def _download_sizes(i: int) -> tuple[int, int]:
    return 1024, 100_000 + jitter(i, 1_900_000)


def _download(i: int) -> Truth:
    return replace(healthy(i), response_network=250 * US + _download_sizes(i)[1] * 20 * US // 1000)


def _hot(i: int) -> str:
    return "s-1" if i % 10 < 7 else f"s-{2 + i % 2}"


#: run name -> (truth per call, instance per call, sizes per call)
SCENARIOS: dict[str, tuple[Callable[[int], Truth], Callable[[int], str], Any]] = {
    "healthy": (healthy, lambda i: f"s-{1 + i % 2}", lambda i: (1024 + jitter(i, 3000), 512)),
    "healthy_large": (healthy, lambda i: "s-1", lambda i: (50_000 + jitter(i, 20_000), 800)),
    "pool": (
        lambda i: replace(
            healthy(i),
            pool_wait=3 * MS + jitter(i, 400 * US),
            server_queue=3 * MS + 60 * US + jitter(i, 400 * US),
        ),
        lambda i: "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
    "post": (
        lambda i: replace(healthy(i), post_processing=1500 * US + jitter(i, 200 * US)),
        lambda i: "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
    "connect": (
        lambda i: replace(healthy(i), client_connect=2 * MS + jitter(i, 300 * US)),
        lambda i: "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
    "client_busy": (
        lambda i: replace(healthy(i), client_dispatch=1500 * US + jitter(i, 300 * US)),
        lambda i: "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
    "serialization": (
        lambda i: replace(
            healthy(i),
            client_serialize=400 * US,
            request_deserialize=500 * US,
            response_serialize=300 * US + jitter(i, 100 * US),
            client_deserialize=300 * US,
        ),
        lambda i: "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
    "network": (
        lambda i: replace(
            healthy(i),
            processing=500 * US,
            request_network=3 * MS + jitter(i, 300 * US),
            response_network=3 * MS,
        ),
        lambda i: "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
    "upload": (_upload, lambda i: "s-1", _upload_sizes),
    "download": (_download, lambda i: "s-1", _download_sizes),
    "imbalance": (
        lambda i: replace(
            healthy(i), processing=(4 * MS if _hot(i) == "s-1" else 2 * MS) + jitter(i, 300 * US)
        ),
        _hot,
        lambda i: (1024, 512),
    ),  # fmt: skip
    "tail": (
        lambda i: replace(
            healthy(i), processing=(22 if i % 10 == 0 else 2) * MS + jitter(i, 200 * US)
        ),
        lambda i: "s-2" if i % 10 == 0 else "s-1",
        lambda i: (1024, 512),
    ),  # fmt: skip
}
SCENARIO_NAMES = list(SCENARIOS)


@pytest.fixture(scope="module")
def seeded(module_store: Store) -> Iterator[Store]:
    spans = []
    for run, (truth, instance, sizes) in enumerate(SCENARIOS.values()):
        spans += _calls(run, truth, instance=instance, sizes=sizes)
    clock_run = BASE_NS + len(SCENARIOS) * 60 * SECOND
    for client, server in seed.calls_across_hosts(
        CALLS, server_offset=5 * MS, request_network=100 * US, response_network=900 * US,
        jitter=300 * US, start=clock_run,
    ):  # fmt: skip
        client.attributes["grpc_overhead.run_id"] = server.attributes["grpc_overhead.run_id"] = (
            "clock"
        )
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


from tests.analyzer.seed import module_store_fixture  # noqa: E402, F401


@pytest.mark.parametrize(
    ("run", "kind", "saving_p50_us", "instance"),
    [
        ("pool", "server_pool_saturated", 3200 - 100, None),
        ("post", "post_processing", 1600, None),
        ("connect", "connection_setup", 2150, None),
        ("client_busy", "client_busy", 1650, None),
        ("serialization", "serialization_cost", 1550, None),
        ("network", "network_latency", 6150 - 200, None),
        ("upload", "slow_upload", 19_000 * 1.05, None),
        ("download", "slow_download", 19_000 * 1.05, None),
        ("imbalance", "load_imbalance", 0.7 * 2000, "s-1"),
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


def test_the_tail_names_its_phase_and_instance(seeded: Store) -> None:
    tail = next(f for f in answer(seeded, "tail").findings if f.kind == "tail")
    assert tail.phases == ("processing",)
    assert tail.instance == "s-2"
    assert tail.saving_p50_us == 0
    assert tail.saving_p99_us == pytest.approx(20_000, rel=0.15)
    assert tail.evidence["correlates_with"]["instance"]["share_of_slow"] == 1.0


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
    estimated = {kind: why for kind, why in checked.items() if "not estimated yet" not in why}
    assert all(any(ch.isdigit() for ch in why) for why in estimated.values()), checked
    assert set(checked) - set(estimated) == {"compression_would_help", "compression_costs_more"}


def test_json_is_the_contract_and_ranked(seeded: Store) -> None:
    document = json.loads(json.dumps(answer(seeded, "tail").to_json()))
    assert set(document) == {"findings", "checked"}
    keys = {"kind", "service", "method", "instance", "phases", "calls", "evidence", "saving_us",
            "saving_basis", "confidence", "action", "verify"}  # fmt: skip
    for finding in document["findings"]:
        assert set(finding) == keys and set(finding["saving_us"]) == {"p50", "p99"}
        assert finding["confidence"] in ("high", "medium", "low") and finding["kind"] in KIND_NAMES
    for entry in document["checked"]:
        assert set(entry) == {"kind", "why_not"}
    ranks = [(f["saving_us"]["p50"], f["saving_us"]["p99"]) for f in document["findings"]]
    assert ranks == sorted(ranks, reverse=True)


def test_a_findings_query_reproduces_its_numbers_from_the_view(seeded: Store) -> None:
    """The "show the query" SQL over grpc_call_phases gives the finding's own numbers."""
    top = answer(seeded, "pool").findings[0]
    row = seeded.query(top.sql, top.parameters, readonly=True).iloc[0]
    column = f"{top.kind}__value_q"
    assert int(row[f"{top.kind}__calls"]) == top.calls
    assert float(row[column][1]) == pytest.approx(top.evidence["p50_us"], rel=0.01)
    assert float(row[column][2]) == pytest.approx(top.evidence["p99_us"], rel=0.01)

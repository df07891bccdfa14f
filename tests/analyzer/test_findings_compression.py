"""compression_would_help / compression_costs_more on a real chDB store, one run per scenario.

Each scenario's truth is known per MB of message: the path's price (seeded into the
path phases), the sampled ratio and CPU (span attributes, as our instrumentation
writes them), so the saving each kind should report follows from the module's
formula and the calls' sizes. One store for the module, settled once, as the
``findings`` command reads it.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
import yaml

from grpc_overhead.analyzer.findings import Finding, Findings, findings
from grpc_overhead.analyzer.findings.compression import COSTS, HELP, MIN_SAMPLES
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.rollup import settle
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.cli.experiment_spec import parse
from tests.analyzer import seed
from tests.analyzer.seed import BASE_NS, MS, US, Truth, module_store_fixture  # noqa: F401

pytestmark = pytest.mark.unit

CALLS = 200
#: One call in this many carries a sampled message (25 samples per run).
SAMPLE_EVERY = 8
PREFIX = "grpc_overhead.compressibility."


def jitter(index: int, spread: int) -> int:
    """A deterministic spread of 0..spread across calls (a prime stride)."""
    return (index * 7919) % (spread + 1)


def large(i: int) -> int:
    return 100_000 + jitter(i, 1_900_000)


def medium(i: int) -> int:
    return 100_000 + jitter(i, 400_000)


def tiny(i: int) -> int:
    return 1024 + jitter(i, 3000)


@dataclass(frozen=True)
class Scenario:
    """One method's calls: which direction carries the bytes, their size, the path's µs
    per MB of message, gRPC's compression, and the sampled gzip ratio and CPU (None: no
    sample)."""

    direction: str
    size: Callable[[int], int]
    path_us_per_mb: float
    compression: str = ""
    ratio: float | None = 0.2
    compress_ns_per_mb: int = 5_000_000
    decompress_ns_per_mb: int = 1_000_000
    samples: int = CALLS // SAMPLE_EVERY


SCENARIOS: dict[str, Scenario] = {
    # 20,000 µs/MB on the wire; gzip keeps 20 % at 6,000 µs/MB of CPU: saves 10,000 µs/MB.
    "would_help": Scenario("request", large, 20_000.0),
    # The same calls, nobody sampling: no guess.
    "unsampled": Scenario("request", large, 20_000.0, ratio=None),
    # ... and with one sample short of the rule.
    "few_samples": Scenario("request", large, 20_000.0, samples=MIN_SAMPLES - 1),
    # Gzip on noise (it grows: sent as is, no decompression) over a 1,000 µs/MB path: the
    # path pays 1,000 + 25,000 µs/MB of CPU; turning it off saves 25,000 µs/MB.
    "costs_more": Scenario(
        "response", medium, 1_000.0 + 25_000.0, "gzip", 1.0004, 25_000_000, 1_500_000
    ),
    # Compressible but on a fast path: 800 µs/MB saved on the wire < 6,000 µs/MB of CPU.
    "fast_path": Scenario("request", large, 1_000.0),
    "healthy": Scenario("request", tiny, 1_000.0),
}


def _sample(span: seed.Span, scenario: Scenario, size: int, index: int) -> None:
    assert scenario.ratio is not None
    span.attributes[PREFIX + "direction"] = scenario.direction
    span.attributes[PREFIX + "message_bytes"] = str(size)
    span.attributes[PREFIX + "measured_bytes"] = str(min(size, 256 * 1024))
    ratio = scenario.ratio * (1 + (jitter(index, 20) - 10) / 1000)  # +-1 %, median exact
    for algorithm in ("gzip", "deflate"):
        span.attributes[f"{PREFIX}{algorithm}.ratio"] = repr(ratio)
        span.attributes[f"{PREFIX}{algorithm}.compress_ns_per_mb"] = str(
            scenario.compress_ns_per_mb
        )
        span.attributes[f"{PREFIX}{algorithm}.decompress_ns_per_mb"] = str(
            scenario.decompress_ns_per_mb
        )


def _calls(run: int, name: str, scenario: Scenario) -> list[seed.Span]:
    spans = []
    for index in range(CALLS):
        size = scenario.size(index)
        path_ns = int(size * scenario.path_us_per_mb / 1000)  # µs/MB = ns per 1,000 bytes
        truth = Truth(
            start=BASE_NS + run * 60 * 1_000 * MS + index * 10 * MS,
            processing=2 * MS + jitter(index, 500 * US),
        )
        if scenario.direction == "request":  # the body lands in server_queue (grpcio)
            truth = replace(truth, server_queue=60 * US + path_ns)
            sizes = {"request_bytes": size, "response_bytes": 512}
        else:
            truth = replace(truth, response_network=250 * US + path_ns)
            sizes = {"request_bytes": 1024, "response_bytes": size}
        client, server = seed.synthetic_call(truth, run_id=name, **sizes)
        if scenario.compression:
            for span in (client, server):
                span.attributes["grpc.compression"] = scenario.compression
        sampled = index % SAMPLE_EVERY == 0 and index // SAMPLE_EVERY < scenario.samples
        if scenario.ratio is not None and sampled:
            _sample(client if scenario.direction == "request" else server, scenario, size, index)
        spans += [client, server]
    return spans


@pytest.fixture(scope="module")
def seeded(module_store: Store) -> Store:
    seed.insert_spans(
        module_store,
        [span for run, name in enumerate(SCENARIOS) for span in _calls(run, name, SCENARIOS[name])],
    )
    settle(module_store, CallsOptions())  # the command's store is settled
    return module_store


@pytest.fixture(scope="module")
def answer(seeded: Store) -> Callable[[str], Findings]:
    """``findings`` of one run (a scenario), computed once for the module."""
    return functools.cache(lambda run: findings(seeded, CallFilters(run_id=run).at_rest()))


def the(result: Findings, kind: str) -> Finding:
    found = [f for f in result.findings if f.kind == kind]
    assert len(found) == 1, [(f.kind, f.saving_p50_us) for f in result.findings]
    return found[0]


def why_not(result: Findings, kind: str) -> str:
    return next(entry.why_not for entry in result.checked if entry.kind == kind)


def expected_saving(run: str, us_per_mb: float) -> float:
    """The injected saving at p50: µs per MB saved x the calls' median MB."""
    return us_per_mb * statistics.median(SCENARIOS[run].size(i) for i in range(CALLS)) / 1e6


def test_large_compressible_calls_on_a_slow_path_would_gain_from_gzip(
    answer: Callable[[str], Findings],
) -> None:
    result = answer("would_help")
    found = the(result, HELP)
    assert found.saving_p50_us == pytest.approx(expected_saving("would_help", 10_000), rel=0.1)
    assert found.saving_p99_us > found.saving_p50_us
    assert found.confidence == "high"  # 200 calls, a tight fit, 25 samples
    assert found.phases == ("request_network", "server_queue")
    evidence = found.evidence
    assert evidence["samples"] == CALLS // SAMPLE_EVERY
    assert evidence["ratio_p50"] == pytest.approx(0.2)
    assert evidence["path_us_per_mb"] == pytest.approx(20_000, rel=0.05)
    assert evidence["cpu_us_per_mb"] == pytest.approx(6_000)
    assert evidence["compress_ns_per_mb"] == 5_000_000
    median = statistics.median(large(i) for i in range(CALLS))
    assert evidence["message_bytes_p50"] == pytest.approx(median, rel=0.05)
    # The narrow path is a finding too, and ranks above: a faster path saves more.
    assert [f.kind for f in result.findings] == ["slow_upload", HELP]
    assert COSTS in {entry.kind for entry in result.checked}
    text = found.verify.split("\n", 1)[1].split("then `grpc-overhead compare`")[0]
    experiment = parse(yaml.safe_load(text))  # what the finding says to run must run
    assert len(experiment.cells) == 2 and experiment.cells[0].config["bandwidth_kb_s"] == 50_000
    assert {cell.config["compression"] for cell in experiment.cells} == {"none", "gzip"}
    assert "grpc.Compression.Gzip" in found.action and "UseCompressor" in found.action
    document = json.loads(json.dumps(result.to_json()))  # the contract, evidence plain
    assert document["findings"][1]["evidence"]["samples"] == CALLS // SAMPLE_EVERY


def test_compressing_what_does_not_compress_on_a_fast_path_costs_more(
    answer: Callable[[str], Findings],
) -> None:
    result = answer("costs_more")
    top = result.findings[0]
    assert top.kind == COSTS, [(f.kind, f.saving_p50_us) for f in result.findings]
    assert top.saving_p50_us == pytest.approx(expected_saving("costs_more", 25_000), rel=0.1)
    assert top.confidence == "high"
    assert top.phases == ("response_network",)
    assert top.evidence["algorithm"] == "gzip"
    assert top.evidence["path_us_per_mb"] == pytest.approx(1_000, rel=0.3)
    assert top.evidence["cpu_us_per_mb"] == pytest.approx(25_000)  # grew: no decompression
    # The CPU inside the path is not a narrow path: slow_download says so, with its number.
    assert "slow_download" not in {f.kind for f in result.findings}
    assert "compression CPU" in why_not(result, "slow_download")
    assert why_not(result, HELP).startswith(f"0 of {CALLS:,} calls are uncompressed")
    assert "compare before after" in top.verify  # the service cannot play large responses


@pytest.mark.parametrize(("run", "samples"), [("unsampled", 0), ("few_samples", MIN_SAMPLES - 1)])
def test_too_few_samples_no_guess(
    answer: Callable[[str], Findings], run: str, samples: int
) -> None:
    result = answer(run)
    assert HELP not in {f.kind for f in result.findings}
    line = why_not(result, HELP)
    assert line.startswith(f"{samples} sampled messages") and f"{MIN_SAMPLES} needed" in line
    assert "GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S" in line


@pytest.mark.parametrize(
    ("run", "help_says"),
    [
        ("fast_path", "a loss, not a saving"),  # CPU above what the bytes cost
        ("healthy", "bytes at p50, under 16 KiB"),
    ],
)
def test_healthy_calls_find_neither_and_say_why_with_a_number(
    answer: Callable[[str], Findings], run: str, help_says: str
) -> None:
    result = answer(run)
    kinds = {f.kind for f in result.findings}
    assert not kinds & {HELP, COSTS}
    assert help_says in why_not(result, HELP)
    assert why_not(result, COSTS).startswith(f"0 of {CALLS:,} calls are compressed")
    for kind in (HELP, COSTS):
        assert any(ch.isdigit() for ch in why_not(result, kind))


def test_the_shown_query_reproduces_the_finding_from_the_view(
    seeded: Store, answer: Callable[[str], Findings]
) -> None:
    """The "show the query" SQL over grpc_call_phases: the calls, fit and samples."""
    for run, kind in (("would_help", HELP), ("costs_more", COSTS)):
        found = the(answer(run), kind)
        rows = seeded.query(found.sql, found.parameters, readonly=True)
        prefix = f"{kind}__{found.evidence['direction']}__"
        row = rows.iloc[0]
        assert int(row[prefix + "calls"]) == found.calls
        assert int(row["samples"]) == found.evidence["samples"]
        assert float(row["ratio_p50"]) == pytest.approx(found.evidence["ratio_p50"])
        slope = float(row[prefix + "us_per_mb"])
        assert slope == pytest.approx(found.evidence["fitted_us_per_mb"], rel=0.01)

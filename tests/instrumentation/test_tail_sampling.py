"""Tail-aware sampling: every slow and failed call kept, the rest at the base rate, and the
weights on the kept spans estimating all calls (counts and quantiles)."""

from __future__ import annotations

import logging
import random
import statistics
from collections.abc import Callable
from typing import Any

import pytest
from google.protobuf.wrappers_pb2 import BytesValue
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.instrumentation import (
    Sampling,
    SpanPipeline,
)
from grpc_overhead.instrumentation.client_calls import PeerTrailers, peer_trailers
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.tail_sampling import (
    TailSampler,
    bucket,
    bucket_floor,
)
from grpc_overhead.instrumentation.vocabulary import (
    ABANDONED,
    RESOURCE_INSTANCE_ID,
    SAMPLING_REASON,
    SAMPLING_SERVER_INSTANCE,
    SAMPLING_WEIGHT,
)
from harness.known_mix import (
    exact_quantile,
    kinds,
    make_calls,
    mixed_pair,
    spread_trace_ids,
    weighted_quantile,
)


@pytest.mark.unit
def test_a_bucket_holds_its_durations_and_buckets_grow_with_them():
    previous = -1
    for duration in [*range(0, 300), *(int(1.07**k) for k in range(100, 600))]:
        index = bucket(duration)
        assert bucket_floor(index) <= duration < bucket_floor(index + 1)
        assert index >= previous
        previous = index
    # Four buckets an octave: never wider than a quarter of their floor.
    assert all(bucket_floor(i + 1) - bucket_floor(i) <= bucket_floor(i) / 4 for i in range(8, 250))


@pytest.mark.unit
def test_the_adaptive_threshold_finds_the_slowest_twentieth_and_follows_a_change():
    rng = random.Random(7)
    sampler = TailSampler(0.0)
    durations = [int(rng.lognormvariate(13, 0.6)) for _ in range(20_000)]
    for duration in durations:
        threshold = sampler.threshold("/m", duration)
    true_p95 = sorted(durations)[int(0.95 * len(durations))]
    assert 0.75 * true_p95 <= threshold <= true_p95
    slow_share = sum(d >= threshold for d in durations) / len(durations)
    assert 0.05 <= slow_share <= 0.10
    # The service gets 10x slower: within a few thousand calls the threshold follows.
    for _ in range(8_000):
        threshold = sampler.threshold("/m", int(rng.lognormvariate(13, 0.6)) * 10)
    assert threshold >= 5 * true_p95
    assert sampler.threshold("/other", 5) == 0  # each method on its own, warming up


def _record(recorder: Recorder, trace_id: int, *, status: int = 0) -> CallRecord:
    record = CallRecord(recorder, True, "/m", "unary_unary", trace_id, 1, 0, 1_000)
    record.status_code = status
    return record


@pytest.mark.unit
def test_each_reason_keeps_its_call_with_the_weight_it_stands_for():
    recorder = Recorder(SpanPipeline(exporter=InMemorySpanExporter()))
    sampler = TailSampler(0.01, slow_ns=1_000_000)
    under, over = 1, (1 << 63)  # trace ids in and out of the 1 % base
    decided = {}
    cases = {
        "fast, outside the base": (_record(recorder, over), 10, False, ""),
        "fast, in the base": (_record(recorder, under), 10, True, ("base", 100.0)),
        "slow": (_record(recorder, over), 2_000_000, True, ("slow", 1.0)),
        "slow, in the base": (_record(recorder, under), 2_000_000, True, ("slow", 1.0)),
        "failed": (_record(recorder, over, status=14), 10, True, ("failed", 1.0)),
    }
    for name, (record, duration, kept, expected) in cases.items():
        decided[name] = sampler.decide(record, duration)
        assert decided[name] is kept, name
        assert (
            (record.sampling_reason, record.sampling_weight) == expected
            if kept
            else record.sampling_reason == ""
        ), name
    abandoned = _record(recorder, over)
    abandoned.attributes = {ABANDONED: True}
    assert sampler.decide(abandoned, 10) and abandoned.sampling_reason == "failed"
    # The server kept it (its trailer): the client keeps it with the server's weight ...
    told = _record(recorder, over)
    told.peer_weight = 1.0
    assert sampler.decide(told, 10) and (told.sampling_reason, told.sampling_weight) == (
        "server",
        1.0,
    )
    # ... unless its own base says it is worth less: the smaller weight wins.
    both = _record(recorder, under)
    both.peer_weight = 1.0
    assert sampler.decide(both, 10) and both.sampling_weight == 1.0
    asked = _record(recorder, over)
    asked.parent_sampled = True
    assert sampler.decide(asked, 10) and asked.sampling_reason == "parent"
    warming = TailSampler(0.01)
    assert warming.decide(_record(recorder, over), 10)  # no threshold known yet
    recorder.pipeline.shutdown()


@pytest.mark.unit
@pytest.mark.parametrize(
    ("variables", "expected", "warned"),
    [
        ({"GRPC_OVERHEAD_SAMPLING": "tail"}, Sampling(0.01, True, tail=True), False),
        (
            {
                "GRPC_OVERHEAD_SAMPLING": "Tail",
                "GRPC_OVERHEAD_SAMPLING_RATE": "0.1",
                "GRPC_OVERHEAD_SLOW_MS": "2.5",
            },
            Sampling(0.1, True, tail=True, slow_ns=2_500_000),
            False,
        ),
        ({"GRPC_OVERHEAD_SAMPLING": "head"}, Sampling(0.01, True), False),
        ({"GRPC_OVERHEAD_SAMPLING": "always"}, Sampling(1.0, True), False),
        (
            {"GRPC_OVERHEAD_SAMPLING": "tail", "GRPC_OVERHEAD_SAMPLING_RATE": "2"},
            Sampling(0.01, True, tail=True),
            True,
        ),
        (
            {"GRPC_OVERHEAD_SAMPLING": "tail", "GRPC_OVERHEAD_SLOW_MS": "soon"},
            Sampling(0.01, True, tail=True),
            True,
        ),
        (
            {
                "GRPC_OVERHEAD_SAMPLING": "sometimes",
                "OTEL_TRACES_SAMPLER": "traceidratio",
                "OTEL_TRACES_SAMPLER_ARG": "0.5",
            },
            Sampling(0.5, False),
            True,
        ),
    ],
)
def test_the_sampling_variables(monkeypatch, caplog, variables, expected, warned):
    for name in ("OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with caplog.at_level(logging.WARNING):
        assert Sampling.from_environment() == expected
    assert bool(caplog.records) is warned
    if warned:  # the message names the variable and what was used instead
        assert any(
            "GRPC_OVERHEAD" in r.getMessage() or "OTEL" in r.getMessage() for r in caplog.records
        )


@pytest.mark.e2e
def test_a_known_mix_keeps_every_slow_and_failed_call_and_its_weights_estimate_all_calls():
    """10,000 calls, 1.25 % slow by the handler (so that the p99 is a slow call, not the
    edge between the two groups), 1 % failing, a 10 % base rate, the adaptive threshold.
    The calls' trace ids are spread evenly over their range in random order (W3C ids are
    uniform), so the base is exactly 10 % of the calls: what is tested is the decision
    and the weights, not the luck of a draw. Which calls each side finds slow still moves
    the estimate (a slow call in the base counts 1, not 10): by ~1.2 / sqrt(calls), 2.1 %
    at 3,000 calls, 1.2 % at 10,000. Tolerance as the issue's: 5 % or 200 µs."""
    calls, rate = 10_000, 0.1
    sampling = Sampling(rate, True, tail=True)
    mix = kinds(calls)
    measured, client_spans, server_spans = _served(
        sampling, sampling, lambda look: make_calls(look, mix, spread_trace_ids(calls))
    )
    kept = {span.context.trace_id: span for span in client_spans}
    assert len(kept) == len(client_spans)
    # Every slow and every failed call is kept, on both sides.
    server_kept = {span.context.trace_id for span in server_spans}
    for trace_id, (kind, _) in measured.items():
        if kind != "ok":
            assert trace_id in kept and trace_id in server_kept, kind
    _every_call_is_kept_or_dropped_for_its_reason(measured, client_spans, server_spans, rate)
    # Most calls dropped: warm-up (~3 %), failures (1 %), the base (10 %) and the calls
    # slower than the running p95 on either side (~5-9 % each when the machine is steady;
    # a loaded machine's bursts make more calls slow, and those are kept as they should
    # be; that share on a known series is the adaptive threshold's unit test's).
    assert len(kept) < 0.5 * calls
    # The weights estimate every call: the count, and the client's own p50 and p99.
    weighted = [(measured[t][1], span.attributes[SAMPLING_WEIGHT]) for t, span in kept.items()]
    assert sum(weight for _, weight in weighted) == pytest.approx(calls, rel=0.05)
    everything = [seconds for _, seconds in measured.values()]
    for quantile in (0.5, 0.99):
        truth = exact_quantile(everything, quantile)
        estimate = weighted_quantile(weighted, quantile)
        assert estimate == pytest.approx(truth, rel=0.05, abs=200e-6), quantile


def _every_call_is_kept_or_dropped_for_its_reason(
    measured: dict[int, tuple[str, float]], client_spans: list, server_spans: list, rate: float
) -> None:
    """Each side's spans, reason by reason, against what the calls were (made one by one,
    in ``measured``'s order): the failed calls, the warm-up (the first 99 calls of the
    method on each side: the 100th is judged by the threshold its histogram yields), the
    calls the server kept as slow (client: weight 1, the smaller), the base (exactly the
    calls under the trace-id bound that no earlier reason kept); every other call dropped. The slow
    keeps, which depend on the machine's timing, are checked to be the slow ones."""
    bound = round(rate * (1 << 64))
    order = list(measured)
    warmup = {trace_id for trace_id in order[:99] if measured[trace_id][0] != "fail"}
    failed = {trace_id for trace_id, (kind, _) in measured.items() if kind == "fail"}
    for side, spans in (("server", server_spans), ("client", client_spans)):
        reasons = {span.context.trace_id: span.attributes[SAMPLING_REASON] for span in spans}
        weights = {span.context.trace_id: span.attributes[SAMPLING_WEIGHT] for span in spans}
        assert {t for t, reason in reasons.items() if reason == "failed"} == failed, side
        assert {t for t, reason in reasons.items() if reason == "warmup"} == warmup, side
        server_slow = {
            s.context.trace_id for s in server_spans if s.attributes[SAMPLING_REASON] == "slow"
        }
        for trace_id in order:
            reason = reasons.get(trace_id)
            if reason in ("failed", "warmup", "slow"):
                assert weights[trace_id] == 1.0, (side, reason)
            elif side == "client" and trace_id in server_slow:  # the smaller weight
                assert (reason, weights[trace_id]) == ("server", 1.0), side
            elif (trace_id & ((1 << 64) - 1)) < bound:
                assert (reason, weights[trace_id]) == ("base", 1 / rate), side
            else:
                assert reason is None, (side, reason)  # dropped
        # What a side kept as slow took longer there than what it dropped.
        durations = {span.context.trace_id: span.end_time - span.start_time for span in spans}
        slow = [durations[t] for t, reason in reasons.items() if reason == "slow"]
        assert slow, side
        if side == "client":  # the dropped calls' durations: the caller's own clock
            dropped = [seconds for t, (_, seconds) in measured.items() if t not in reasons]
            assert statistics.median(slow) / 1e9 > statistics.median(dropped), side


def _served(
    server_sampling: Sampling, client_sampling: Sampling, calls: Callable[[Callable], Any]
) -> tuple[Any, list, list]:
    """(what ``calls`` returned, client spans, server spans): ``calls`` makes its calls
    with the method of a real server and channel, each instrumented with its own
    sampling; every record is finished (the server's workers done) and flushed before
    the spans are read."""
    server_exporter, client_exporter = InMemorySpanExporter(), InMemorySpanExporter()
    server_pipeline = SpanPipeline(exporter=server_exporter, sampling=server_sampling)
    client_pipeline = SpanPipeline(exporter=client_exporter, sampling=client_sampling)
    with mixed_pair(server_pipeline, client_pipeline) as look:
        made = calls(look)
    clients, servers = client_exporter.get_finished_spans(), server_exporter.get_finished_spans()
    return made, list(clients), list(servers)


def _fast_calls(count: int) -> Callable[[Callable], None]:
    def make(look: Callable) -> None:
        for _ in range(count):
            look(BytesValue(value=b"ok"), timeout=10)

    return make


@pytest.mark.e2e
def test_a_call_the_server_keeps_as_slow_is_kept_by_the_client_too():
    """The server finds every call slow (a 1 ns threshold), the client none (1000 s) and
    neither samples a base: the client keeps exactly what the server told it it kept."""
    _, clients, servers = _served(
        Sampling(0.0, True, tail=True, slow_ns=1),
        Sampling(0.0, True, tail=True, slow_ns=10**12),
        _fast_calls(20),
    )
    assert len(servers) == 20 and len(clients) == 20
    assert {span.attributes[SAMPLING_REASON] for span in servers} == {"slow"}
    assert {span.attributes[SAMPLING_REASON] for span in clients} == {"server"}
    assert {span.attributes[SAMPLING_WEIGHT] for span in clients} == {1.0}
    assert {s.context.trace_id for s in clients} == {s.context.trace_id for s in servers}


@pytest.mark.e2e
def test_a_call_slow_only_for_the_client_keeps_its_client_half_alone_with_the_residence():
    server_instance = SpanPipeline(exporter=InMemorySpanExporter()).resource.attributes[
        RESOURCE_INSTANCE_ID
    ]
    _, clients, servers = _served(
        Sampling(0.0, True, tail=True, slow_ns=10**12),
        Sampling(0.0, True, tail=True, slow_ns=1),
        _fast_calls(20),
    )
    assert servers == []  # dropped by design, not lost
    assert len(clients) == 20
    for span in clients:
        assert span.attributes[SAMPLING_REASON] == "slow"
        assert span.attributes["grpc_overhead.server_residence_ns"] > 0
        # ... and names the server instance that dropped its half (its trailer).
        assert span.attributes[SAMPLING_SERVER_INSTANCE] == server_instance


@pytest.mark.unit
@pytest.mark.parametrize(
    ("trailer", "expected"),
    [
        ((("x-grpc-overhead-instance", "a1b2"),), "a1b2"),
        ((("other", "x"), ("x-grpc-overhead-instance", "i-7")), "i-7"),
        ((), None),
        ((("x-grpc-overhead-instance", ""),), None),
        ((("x-grpc-overhead-instance", "x" * 257),), None),  # longer than any id
        ((("x-grpc-overhead-instance", "bad\nline"),), None),
        ((("x-grpc-overhead-instance", b"bytes"),), None),
    ],
)
def test_the_instance_a_server_names_in_its_trailer_is_taken_only_when_it_is_one(trailer, expected):
    assert peer_trailers(trailer).dropped_by == expected


@pytest.mark.unit
@pytest.mark.parametrize(
    ("trailer", "expected"),
    [
        (None, PeerTrailers(-1, 0.0, None)),
        ((), PeerTrailers(-1, 0.0, None)),
        (
            (
                ("x-server-residence-ns", "1234"),
                ("x-grpc-overhead-kept", "100.0"),
                ("x-grpc-overhead-instance", "i-1"),
            ),
            PeerTrailers(1234, 100.0, "i-1"),
        ),
        # the first of a repeated key counts, even when it is no value
        ((("x-server-residence-ns", "x"), ("x-server-residence-ns", "5")), PeerTrailers()),
        ((("x-grpc-overhead-kept", "0.5"), ("x-grpc-overhead-kept", "3")), PeerTrailers()),
        ((("x-grpc-overhead-kept", "1e10"),), PeerTrailers()),  # above any weight
        ((("x-grpc-overhead-kept", "nan"),), PeerTrailers()),
        ((("x-grpc-overhead-instance", ""), ("x-grpc-overhead-instance", "i-2")), PeerTrailers()),
        ((("other", "7"), ("x-grpc-overhead-kept", "1")), PeerTrailers(-1, 1.0, None)),
    ],
)
def test_the_trailers_are_read_in_one_pass_each_value_checked(trailer, expected):
    assert peer_trailers(trailer) == expected

"""Sampled compressibility: bounded on the hot path, measured like zlib off it, never fatal."""

from __future__ import annotations

import os
import zlib

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from grpc_overhead.instrumentation import SpanPipeline, compressibility
from grpc_overhead.instrumentation.compressibility import (
    ALGORITHMS,
    ATTRIBUTE_KEYS,
    MAX_METHODS,
    MAX_SAMPLES_PER_INTERVAL,
    Sampler,
    measure,
    sample_attributes,
)
from grpc_overhead.instrumentation.environment import (
    COMPRESSIBILITY_INTERVAL_S,
    COMPRESSIBILITY_MAX_BYTES,
)
from grpc_overhead.instrumentation.otlp import encode_request, encode_resource
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.records import CallRecord
from grpc_overhead.instrumentation.spans import SpanBuilder

pytestmark = pytest.mark.unit

S = 1_000_000_000
RESOURCE = Resource({"service.name": "svc"})
COMPRESSIBLE = b"feature=0.0;" * 4000
INCOMPRESSIBLE = os.urandom(48_000)


@pytest.fixture(scope="module")
def pipeline():
    pipeline = SpanPipeline(exporter=InMemorySpanExporter(), resource=RESOURCE)
    yield pipeline
    pipeline.shutdown()


def recorder(pipeline, monkeypatch, interval_s: str = "5", max_bytes: str = "") -> Recorder:
    monkeypatch.setenv(COMPRESSIBILITY_INTERVAL_S, interval_s)
    monkeypatch.setenv(COMPRESSIBILITY_MAX_BYTES, max_bytes)
    return Recorder(pipeline)


def call(rec: Recorder, sent: int, payload: bytes, method: str = "/pkg.Svc/Get", client=True):
    record = CallRecord(rec, client, method, "unary_unary", 5, sent, 0, sent - 100)
    record.outbound(sent - 50, sent, payload)
    record.finished = True  # not submitted: inspected directly
    record.end = sent + 10
    return record


def test_at_most_one_message_per_method_per_interval(pipeline, monkeypatch):
    rec = recorder(pipeline, monkeypatch)
    kept = [
        call(rec, t, COMPRESSIBLE).compress_sample is not None
        for t in (S, S + 1, 2 * S, 6 * S - 1, 6 * S, 6 * S + 1)
    ]
    assert kept == [True, False, False, False, True, False]
    # Another method has its own slot; a stream keeps at most one message per call.
    assert call(rec, S + 2, COMPRESSIBLE, method="/pkg.Svc/Put").compress_sample is not None
    stream = call(rec, 20 * S, COMPRESSIBLE, method="/pkg.Svc/Stream")
    first = stream.compress_sample
    stream.outbound(40 * S, 40 * S + 1, INCOMPRESSIBLE)
    assert stream.compress_sample is first is COMPRESSIBLE  # a reference, never a copy


def test_the_sampler_remembers_a_bounded_number_of_methods():
    sampler = Sampler(interval_s=1, max_bytes=100)
    for index in range(MAX_METHODS):
        sampler.keep(f"/m/{index}", S)  # remembered, kept or not (the process's budget)
    assert not sampler.keep("/m/one-too-many", S)
    assert sampler.keep("/m/0", 3 * S)  # known methods keep their slot
    assert len(sampler.next_at) == MAX_METHODS


@pytest.fixture(autouse=True)
def _fresh_budget(monkeypatch):
    """Each test starts with the process-wide budget unspent (tests use made-up clocks)."""
    monkeypatch.setattr(compressibility, "_budget", [0, 0])


def test_the_process_keeps_a_bounded_number_of_samples_per_interval():
    samplers = [Sampler(interval_s=1, max_bytes=100) for _ in range(2)]  # two channels
    kept = [samplers[i % 2].keep(f"/m/{i}", S + i) for i in range(3 * MAX_SAMPLES_PER_INTERVAL)]
    assert sum(kept) == MAX_SAMPLES_PER_INTERVAL == sum(kept[:MAX_SAMPLES_PER_INTERVAL])
    assert sum(s.skipped for s in samplers) == 2 * MAX_SAMPLES_PER_INTERVAL
    assert samplers[0].keep("/m/0", 2 * S + 1)  # a new interval, a new budget


@pytest.mark.parametrize(("interval_s", "max_bytes"), [("0", ""), ("5", "0")])
def test_zero_turns_sampling_off(pipeline, monkeypatch, interval_s, max_bytes):
    rec = recorder(pipeline, monkeypatch, interval_s, max_bytes)
    assert rec.compressibility is None
    assert call(rec, S, COMPRESSIBLE).compress_sample is None


def test_bad_settings_fall_back_to_the_defaults(pipeline, monkeypatch):
    rec = recorder(pipeline, monkeypatch, "often", "lots")
    assert rec.compressibility.interval_ns == 5 * S
    assert rec.compressibility.max_bytes == 256 * 1024


@pytest.mark.parametrize("payload", [COMPRESSIBLE, INCOMPRESSIBLE], ids=["text", "random"])
def test_ratios_are_zlibs_at_grpc_cores_level(payload):
    attributes = measure(payload, "request", 1 << 20)
    assert ALGORITHMS == ("gzip", "deflate")  # grpcio 1.85 offers no zstd
    expected = {"gzip": zlib.compress(payload, wbits=31), "deflate": zlib.compress(payload)}
    for algorithm in ALGORITHMS:
        prefix = f"grpc_overhead.compressibility.{algorithm}."
        assert attributes[prefix + "ratio"] == len(expected[algorithm]) / len(payload)
        assert attributes[prefix + "compress_ns_per_mb"] > 0
        assert attributes[prefix + "decompress_ns_per_mb"] > 0
    assert attributes["grpc_overhead.compressibility.message_bytes"] == len(payload)
    assert set(attributes) == set(ATTRIBUTE_KEYS)


def test_large_messages_are_measured_by_a_bounded_prefix():
    attributes = measure(INCOMPRESSIBLE, "response", 1000)
    assert attributes["grpc_overhead.compressibility.message_bytes"] == len(INCOMPRESSIBLE)
    assert attributes["grpc_overhead.compressibility.measured_bytes"] == 1000
    assert attributes["grpc_overhead.compressibility.direction"] == "response"
    assert attributes["grpc_overhead.compressibility.gzip.ratio"] > 1  # random: bigger


def test_both_encoders_carry_the_sample_once_measured(pipeline, monkeypatch):
    rec, server = recorder(pipeline, monkeypatch), recorder(pipeline, monkeypatch)
    records = [
        call(rec, S, COMPRESSIBLE),
        call(rec, S + 1, COMPRESSIBLE),
        call(server, S, INCOMPRESSIBLE, client=False),
    ]  # one recorder per channel/server
    wire = encode_request(records, encode_resource(RESOURCE))
    spans = ExportTraceServiceRequest.FromString(wire).resource_spans[0].scope_spans[0].spans
    found = [{a.key: a.value for a in span.attributes} for span in spans]
    assert found[0]["grpc_overhead.compressibility.direction"].string_value == "request"
    assert not any(key.startswith("grpc_overhead.compressibility") for key in found[1])
    assert found[2]["grpc_overhead.compressibility.direction"].string_value == "response"
    gzip = found[2]["grpc_overhead.compressibility.gzip.ratio"].double_value
    assert gzip == len(zlib.compress(INCOMPRESSIBLE, wbits=31)) / len(INCOMPRESSIBLE)
    # The SDK path renders the very same measurement (measured once per record).
    built = SpanBuilder(RESOURCE).build(records[0]).attributes
    assert built["grpc_overhead.compressibility.gzip.ratio"] == (
        found[0]["grpc_overhead.compressibility.gzip.ratio"].double_value
    )
    assert rec.compressibility.measured == server.compressibility.measured == 1


def test_a_failed_measurement_is_counted_and_the_span_still_goes(pipeline, monkeypatch):
    rec = recorder(pipeline, monkeypatch)
    record = call(rec, S, COMPRESSIBLE)
    record.compress_sample = object()  # not bytes: measuring raises
    assert sample_attributes(record) is None
    assert rec.compressibility.failed == 1
    wire = encode_request([record], encode_resource(RESOURCE))
    [span] = ExportTraceServiceRequest.FromString(wire).resource_spans[0].scope_spans[0].spans
    assert not any(a.key.startswith("grpc_overhead.compressibility") for a in span.attributes)

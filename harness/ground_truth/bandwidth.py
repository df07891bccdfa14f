"""A rate-limited path (toxiproxy bandwidth toxic) with growing payloads, and compression on it.

* ``bandwidth``: responses limited (downstream): the whole transfer lies
  between the server's serializer exit and the client's deserializer start,
  so response_network must grow by size / rate. Requests limited (upstream):
  grpcio's server starts a call when the request *headers* arrive, which
  toxiproxy forwards with the first chunk (<= 32 KiB); the body's arrival is
  only visible as the deserializer starting. So request_network holds the
  first chunk's share and server_queue the rest: the harness checks the sum
  (request_network + server_queue, the request path) and reports the split.
* ``compression``: large requests on a slow request path, sent plain, with
  gRPC's gzip (whole message, compressed in gRPC core: invisible to Python, so
  its CPU lands in the network phases) and with application-level zstd of the
  packed feature blob (compressed once when the load generator builds its
  payloads, like a feature store serving pre-compressed blobs; its cost per
  call is measured here and added for an end-to-end comparison).

Truth: each toxic's transfer time calibrated on raw TCP through an identical
proxy (``calibration.probe`` with the same byte count), minus the same probe
without the toxic.
"""

from __future__ import annotations

import statistics
import time
import zlib
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from grpc_overhead.prediction import codec as codecs
from grpc_overhead.prediction import payload as payloads
from grpc_overhead.prediction.protos import prediction_pb2 as pb
from harness.ground_truth.calibration import EchoServer, probe
from harness.ground_truth.checks import ScenarioResult, check, p50, p50s
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile
from harness.ground_truth.toxiproxy import DOWNSTREAM, UPSTREAM, Proxy, Toxiproxy

RATE_KB_S = 5_000  # 5 MB/s
FIRST_CHUNK = 32 * 1024  # toxiproxy reads (and forwards) at most this much at a time


def _request_path(body: dict[str, Any]) -> float:
    return p50(body, "request_network") + p50(body, "server_queue")


def _packed_response_bytes(entities: int) -> int:
    response = pb.PredictResponse(
        request_id="v0", model_version="m" * 20, server_instance_id="0" * 36
    )
    codecs.encode_scores(response, np.zeros(entities, dtype=np.float32), "packed")
    return response.ByteSize()


def _transfer_us(
    probe_address: str,
    toxiproxy: Toxiproxy,
    probe_proxy,
    toxics,
    nbytes: int,
    stream: str,
    probes: int,
) -> float:
    """Calibrated time the toxic adds to moving ``nbytes`` one way (µs)."""
    request, reply = (nbytes, 16) if stream == UPSTREAM else (16, nbytes)
    toxiproxy.clear_toxics(probe_proxy)
    bare = probe(probe_address, probes, request, reply)
    toxiproxy.set_toxics(probe_proxy, toxics)
    slowed = probe(probe_address, probes, request, reply)
    toxiproxy.clear_toxics(probe_proxy)
    if stream == UPSTREAM:
        return slowed.upstream_us - bare.upstream_us
    return slowed.downstream_us - bare.downstream_us


@contextmanager
def _proxied_service(pipeline: Pipeline) -> Iterator[tuple[Toxiproxy, Proxy, Proxy]]:
    """The pipeline, a two-worker service and an echo server, both behind toxiproxy: yields
    (toxiproxy, the service's proxy, the echo probe's proxy) so one toxic slows both alike."""
    with ExitStack() as stack:
        toxiproxy = stack.enter_context(Toxiproxy())
        echo = stack.enter_context(EchoServer())
        stack.enter_context(pipeline)
        service = stack.enter_context(pipeline.service("--workers", "2"))
        yield toxiproxy, toxiproxy.proxy(service.target), toxiproxy.proxy(echo.address)


def bandwidth(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    result = ScenarioResult("bandwidth", profile.name)
    # Packed float32, 1 feature: the response is 4 bytes per entity; 64 features: the
    # request ~270 bytes per entity.
    cases = {
        DOWNSTREAM: [16_000, 64_000] + ([128_000] if profile.full else []),
        UPSTREAM: [250, 1_000] + ([4_000] if profile.full else []),
    }
    features = {DOWNSTREAM: 1, UPSTREAM: 64}
    calls = 10 if not profile.full else 20
    toxics = {stream: {f"bandwidth:{stream}": {"rate": RATE_KB_S}} for stream in cases}
    pipeline = Pipeline(workdir / "store")
    runs: dict[tuple[str, int, bool], str] = {}
    sizes: dict[tuple[str, int], int] = {}
    truth: dict[tuple[str, int], list[float]] = {}
    with _proxied_service(pipeline) as (toxiproxy, grpc_proxy, probe_proxy):
        for _ in range(profile.rounds):
            for stream, entity_counts in cases.items():
                for entities in entity_counts:
                    for limited in (False, True):
                        run_id = f"bw-{stream}-{entities}-{'limited' if limited else 'free'}"
                        runs[(stream, entities, limited)] = run_id
                        toxiproxy.set_toxics(grpc_proxy, toxics[stream] if limited else {})
                        summary = pipeline.load(
                            grpc_proxy.listen,
                            run_id,
                            "--calls",
                            str(calls),
                            "--concurrency",
                            "1",
                            "--entities",
                            str(entities),
                            "--features",
                            str(features[stream]),
                            "--encoding",
                            "packed",
                        )
                        sizes[(stream, entities)] = (
                            summary["payload"]["request_bytes"]
                            if stream == UPSTREAM
                            else _packed_response_bytes(entities)
                        )
                    nbytes = sizes[(stream, entities)]
                    truth.setdefault((stream, entities), []).append(
                        _transfer_us(
                            probe_proxy.listen,
                            toxiproxy,
                            probe_proxy,
                            toxics[stream],
                            nbytes,
                            stream,
                            max(3, profile.probes // 10),
                        )
                    )
                    toxiproxy.clear_toxics(grpc_proxy)
    bodies = pipeline.reports(sorted(set(runs.values())))
    for (stream, entities), measured_truth in truth.items():
        free = bodies[runs[(stream, entities, False)]]
        limited = bodies[runs[(stream, entities, True)]]
        injected = statistics.mean(measured_truth)
        nbytes = sizes[(stream, entities)]
        label = f"{stream}_{nbytes / 1e3:,.0f}KB"
        result.phases[f"{label}_free"] = p50s(free)
        result.phases[f"{label}_limited"] = p50s(limited)
        result.observations[label] = {
            "message_bytes": nbytes,
            "rate_kb_s": RATE_KB_S,
            "nominal_us": round(nbytes / RATE_KB_S * 1e3, 1),
            "calibrated_us": round(injected, 1),
        }
        quantity = f"{nbytes / 1e3:,.0f} KB at {RATE_KB_S / 1e3:g} MB/s"
        if stream == DOWNSTREAM:
            measured = p50(limited, "response_network") - p50(free, "response_network")
            result.checks.append(
                check(result.name, label, quantity, "response_network", injected, measured)
            )
            continue
        network = p50(limited, "request_network") - p50(free, "request_network")
        path = _request_path(limited) - _request_path(free)
        result.checks.append(
            check(result.name, label, quantity, "request_network + server_queue", injected, path)
        )
        result.checks.append(
            check(
                result.name,
                label,
                quantity,
                "request_network",
                injected,
                network,
                limit=(
                    "grpcio starts a server call when the request headers arrive and exposes "
                    "the body's arrival only as the deserializer starting: request_network "
                    f"holds the first chunk's share (~{min(nbytes, FIRST_CHUNK) / RATE_KB_S * 1e3:,.0f} us "  # noqa: E501
                    "here), server_queue the rest"
                ),
            )
        )
    result.seconds = time.monotonic() - started
    return result


# -- compression -----------------------------------------------------------------------------
VARIANTS = {
    "none": ("--encoding", "repeated", "--compression", "none"),
    "grpc_gzip": ("--encoding", "repeated", "--compression", "gzip"),
    "zstd": ("--encoding", "packed", "--compression", "zstd"),
}
PER_PHASE = (
    "client_serialize",
    "request_network",
    "server_queue",
    "request_deserialize",
    "processing",
    "response_network",
    "client_deserialize",
    "total",
)


def _wire_bytes(variant: str, entities: int, features: int) -> tuple[int, float]:
    """Request bytes on the wire and the client-side compression µs (zstd: per call, not in
    the call since payloads are pre-built; gzip: inside gRPC core, already in the call)."""
    rng = np.random.default_rng(0)
    encoding, codec = VARIANTS[variant][1], VARIANTS[variant][3]
    app_codec = codec if codec == "zstd" else "none"
    request = payloads.make_request(rng, entities, features, encoding, app_codec, "v0")
    data = request.SerializeToString()
    if variant == "grpc_gzip":
        compressor = zlib.compressobj(wbits=31)  # gzip framing, zlib's default level, as core
        return len(compressor.compress(data) + compressor.flush()), 0.0
    if variant == "zstd":
        matrix = payloads.make_features(rng, entities, features)
        times = []
        for _ in range(5):
            begin = time.perf_counter_ns()
            codecs.pack_matrix(matrix, "zstd")
            times.append((time.perf_counter_ns() - begin) / 1e3)
        return len(data), statistics.median(times)
    return len(data), 0.0


def compression(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    result = ScenarioResult("compression", profile.name)
    entities, features = (1_000, 64) if not profile.full else (4_000, 64)
    rate = RATE_KB_S
    calls = 10 if not profile.full else 20
    toxics = {f"bandwidth:{UPSTREAM}": {"rate": rate}}
    wire = {variant: _wire_bytes(variant, entities, features) for variant in VARIANTS}
    pipeline = Pipeline(workdir / "store")
    truth: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    with _proxied_service(pipeline) as (toxiproxy, grpc_proxy, probe_proxy):
        for _ in range(profile.rounds):
            for variant, flags in VARIANTS.items():
                for limited in (False, True):
                    toxiproxy.set_toxics(grpc_proxy, toxics if limited else {})
                    pipeline.load(
                        grpc_proxy.listen,
                        f"cmp-{variant}-{int(limited)}",
                        "--calls",
                        str(calls),
                        "--concurrency",
                        "1",
                        "--entities",
                        str(entities),
                        "--features",
                        str(features),
                        *flags,
                    )
                truth[variant].append(
                    _transfer_us(
                        probe_proxy.listen,
                        toxiproxy,
                        probe_proxy,
                        toxics,
                        wire[variant][0],
                        UPSTREAM,
                        3,
                    )
                )
                toxiproxy.clear_toxics(grpc_proxy)
    bodies = pipeline.reports([f"cmp-{v}-{i}" for v in VARIANTS for i in (0, 1)])
    end_to_end = {}
    for variant in VARIANTS:
        free, limited = bodies[f"cmp-{variant}-0"], bodies[f"cmp-{variant}-1"]
        nbytes, compress_us = wire[variant]
        injected = statistics.mean(truth[variant])
        result.phases[f"{variant}_free"] = p50s(free)
        result.phases[f"{variant}_limited"] = p50s(limited)
        end_to_end[variant] = p50(limited, "total") + compress_us
        result.observations[variant] = {
            "request_wire_bytes": nbytes,
            "client_compress_outside_call_us": round(compress_us, 1),
            "total_p50_us": round(p50(limited, "total"), 1),
            "end_to_end_us": round(end_to_end[variant], 1),
            "per_phase_p50_us": {ph: round(p50(limited, ph), 1) for ph in PER_PHASE},
        }
        path = _request_path(limited) - _request_path(free)
        quantity = f"{nbytes / 1e3:,.0f} KB at {rate / 1e3:g} MB/s"
        if variant == "grpc_gzip":
            # gRPC core gzips after the serializer exit and gunzips before the deserializer
            # entry, out of Python's sight: that CPU (tens of ms for ~0.5 MB, noisy on a
            # shared machine) sits inside request_network/server_queue with or without the
            # toxic, so the difference of two such runs is no measurement of the link.
            result.observations[variant] |= {
                "request_path_delta_us": round(path, 1),
                "calibrated_transfer_us": injected,
                "gzip_in_network_phases_free_us": round(
                    _request_path(free) - _request_path(bodies["cmp-none-0"]), 1
                ),
            }
            continue
        result.checks.append(
            check(result.name, variant, quantity, "request_network + server_queue", injected, path)
        )
    winner = min(end_to_end, key=end_to_end.get)
    result.observations["winner_end_to_end"] = winner
    result.observations["request_raw_feature_bytes"] = entities * features * 4
    result.seconds = time.monotonic() - started
    return result

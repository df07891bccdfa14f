"""Server queuing and (de)serialization: causes inside the processes, not on the wire.

* ``server_queue``: one handler thread (``--workers 1``), a fixed model cost,
  closed-loop clients. With C clients each waiting for its answer before the
  next call, W workers busy S per call and Z spent per cycle outside the
  server, the server saturates and each client's cycle is C*S/W; the wait in
  the queue is then ``C*S/W - (S + Z)``. Both terms come from the load
  generator's own throughput, never from spans: C/X_C (cycle under load) and
  1/X_1 (the cycle of a lone client, which never queues). The report must put
  the wait in server_queue, and processing must stay what it is alone.
* ``serialization``: payloads from a few KB to several MB. The truth for each
  (de)serialize phase is the protobuf call itself (``SerializeToString`` /
  ``FromString``, median), timed by ``serialize_probe``: a plain grpcio client
  making the same calls right after each load run, so that, like the load
  generator, it serializes into fresh memory from a worker thread at the same
  machine load (a warm loop on one message in this process skipped the page
  faults and preemption that make up most of an MB-sized call's time).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from grpc_overhead.processes import offline_env
from harness.ground_truth.checks import ScenarioResult, check, mean, p50, p50s, tolerance_us
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile
from harness.ground_truth.serialize_probe import PHASES as SERIALIZE_PHASES
from harness.ground_truth.serialize_probe import summary


def server_queue(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    cost_ms, workers = 6.0, 1
    clients = (4, 8) if profile.full else (4,)
    calls = max(profile.calls * 2, 40)
    result = ScenarioResult("server_queue", profile.name)
    pipeline = Pipeline(workdir / "store")
    summaries: dict[int, list[dict]] = {c: [] for c in (1, *clients)}
    with (
        pipeline,
        pipeline.service("--workers", str(workers), "--model-cost-ms", str(cost_ms)) as service,
    ):
        for _ in range(profile.rounds):
            for concurrency in summaries:
                summaries[concurrency].append(
                    pipeline.load(
                        service.target,
                        f"queue-c{concurrency}",
                        "--calls",
                        str(calls),
                        "--concurrency",
                        str(concurrency),
                        "--entities",
                        "20",
                        "--features",
                        "8",
                    )
                )
    bodies = pipeline.reports([f"queue-c{c}" for c in summaries])
    per_call_s = {c: statistics.mean(1 / s["rps"] for s in found) for c, found in summaries.items()}
    alone = bodies["queue-c1"]
    result.phases = {f"c{c}": p50s(bodies[f"queue-c{c}"]) for c in summaries}
    result.observations = {
        "workers": workers,
        "model_cost_ms": cost_ms,
        "calls_per_run": calls,
        "client_cycle_ms_by_clients": {c: round(c * v * 1e3, 3) for c, v in per_call_s.items()},
        # Saturated: X_C = W / S, so S = W / X_C.
        "service_time_ms_from_throughput": {
            c: round(per_call_s[c] * workers * 1e3, 3) for c in clients
        },
    }
    latency_ms = {
        c: {stat: statistics.mean(s["latency_ms"][stat] for s in found) for stat in ("p50", "mean")}
        for c, found in summaries.items()
    }
    result.observations["client_latency_ms"] = latency_ms
    for concurrency in clients:
        body = bodies[f"queue-c{concurrency}"]
        case = f"{concurrency}_clients_{workers}_worker"
        quantity = f"queueing wait (C={concurrency}, W={workers}, S~{cost_ms:g} ms)"
        # Queueing theory (closed loop, saturated): a client's cycle under load (C / X_C)
        # minus a lone client's (1 / X_1), from the load generator's throughput.
        theory_us = (concurrency * per_call_s[concurrency] - per_call_s[1]) * 1e6
        result.observations[f"theory_mean_wait_us_c{concurrency}"] = round(theory_us, 1)
        # Truth: the mean latency the clients saw grow (their own clock, no spans). The
        # closed-loop wait is a mean-value result (Little's law); its spread is wide (who
        # waits behind whom varies), so quantiles of the parts do not add up to quantiles of
        # the whole: p50s are reported, the check is on means.
        extra_us = (latency_ms[concurrency]["mean"] - latency_ms[1]["mean"]) * 1e3
        measured = mean(body, "server_queue") - mean(alone, "server_queue")
        result.checks.append(
            check(result.name, case, quantity, "server_queue (mean)", extra_us, measured)
        )
        result.observations[f"p50_us_c{concurrency}"] = {
            "client_latency_increase": round(
                (latency_ms[concurrency]["p50"] - latency_ms[1]["p50"]) * 1e3, 1
            ),
            "server_queue_increase": round(
                p50(body, "server_queue") - p50(alone, "server_queue"), 1
            ),
        }
        # Processing must not absorb the wait (tolerance: 10 % of it). It does grow a little
        # with C+1 busy processes on 2 cores: the model burns CPU time, so wall time stretches.
        result.checks.append(
            check(
                result.name,
                case,
                "no extra work (queueing only)",
                "processing",
                0.0,
                p50(body, "processing") - p50(alone, "processing"),
                tolerance_us(extra_us),
            )
        )
    result.notes.append(
        "truth: the client-observed mean latency increase over a lone client (load "
        "generator's clock); theory_mean_wait_us = C/X_C - 1/X_1 from its throughput (the "
        "closed-loop mean wait C*S/W - (S + Z)); both independent of spans"
    )
    result.seconds = time.monotonic() - started
    return result


# -- serialization ---------------------------------------------------------------------------
# Whether an MB-sized (de)serialization writes into fresh memory (~1 minor page fault per
# 4 KiB, most of its time on these cores) or into recycled memory depends on glibc malloc's
# history in each process: it raises its mmap threshold as big blocks are freed, and trims a
# heap whose free top grew past its trim threshold. The same 1.1 MB request faulted on every
# call in one client process and on none after the 7th in another; the same 1.1 MB request
# deserialized with 0 faults in the service and 307 per call in a probe thread. Fixing both
# thresholds turns that history off, in the service, the load generator and the probe alike:
# blocks of 128 KiB or more (upb's encode buffer, the bytes object) are fresh memory on every
# call, as they are by default for the biggest messages; smaller ones (upb's decode arena
# blocks) are recycled, as they are by default in a long-running server.
PINNED_MALLOC = {
    "GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=131072:glibc.malloc.trim_threshold=1073741824"
}


def client_probe(target: str, entities: int, features: int, calls: int) -> dict:
    """``serialize_probe`` (a plain grpcio client timing protobuf) against ``target``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.ground_truth.serialize_probe",
            target,
            str(entities),
            str(features),
            str(calls),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env=offline_env(**PINNED_MALLOC),
        cwd=Path(__file__).resolve().parents[2],
    )
    if done.returncode != 0:
        raise RuntimeError(f"serialize_probe failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


OTHER_PHASES = ("request_network", "server_queue", "pool_wait", "processing", "response_network")


MB_ROUNDS, MB_CALLS = 3, 20


def serialization(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    # (entities, features), repeated encoding: ~2.6 KB, ~68 KB, ~277 KB; full adds ~1.1, ~2.2
    # and ~4.4 MB.
    sizes = [(16, 32), (250, 64), (1000, 64)]
    if profile.full:
        sizes += [(4000, 64), (8000, 64), (16000, 64)]
    calls = 12 if not profile.full else 30
    # An MB-sized serialization is a CPU burst of several ms, which this shared machine
    # preempts a varying number of times (its wall time was 1.1x-5x its CPU time from one
    # round to the next): those sizes alternate load and probe in more, shorter rounds, so
    # both sides see the same machine load (MB_ROUNDS x rounds of MB_CALLS calls each).
    big = {size for size in sizes if size[0] * size[1] >= 4000 * 64}
    result = ScenarioResult("serialization", profile.name)
    pipeline = Pipeline(workdir / "store")
    run = {size: f"serialization-{size[0]}x{size[1]}" for size in sizes}
    probes: dict[tuple[int, int], list[dict]] = {size: [] for size in sizes}
    with pipeline, pipeline.service("--workers", "2", env=PINNED_MALLOC) as service:
        for round_index in range(profile.rounds * MB_ROUNDS):
            for (entities, features), run_id in run.items():
                size = (entities, features)
                if round_index >= profile.rounds and size not in big:
                    continue
                count = MB_CALLS if size in big else calls
                pipeline.load(
                    service.target,
                    run_id,
                    "--calls",
                    str(count),
                    "--concurrency",
                    "1",
                    "--entities",
                    str(entities),
                    "--features",
                    str(features),
                    "--max-message-mb",
                    "64",
                    env=PINNED_MALLOC,
                )
                # The truth right after, same payloads, same machine load (see serialize_probe).
                probes[size].append(client_probe(service.target, entities, features, count))
    bodies = pipeline.reports(list(run.values()))
    smallest = bodies[run[sizes[0]]]
    for size, run_id in run.items():
        found = probes[size]
        truth = {p: summary([s for f in found for s in f["samples"][p]]) for p in SERIALIZE_PHASES}
        request_bytes = found[0]["request_bytes"]
        label = f"{request_bytes / 1e3:,.0f}KB_request"
        result.phases[label] = p50s(bodies[run_id])
        for phase in SERIALIZE_PHASES:
            injected, measured = truth[phase]["p50_us"], p50(bodies[run_id], phase)
            result.checks.append(
                check(result.name, label, "protobuf (de)serialization", phase, injected, measured)
            )
        result.observations[label] = {
            "request_bytes": request_bytes,
            "response_bytes": found[0]["response_bytes"],
            "truth_p50_us": {p: t["p50_us"] for p, t in truth.items()},
            "truth_cpu_p50_us": {p: t["cpu_p50_us"] for p, t in truth.items()},
            "truth_minor_faults_p50": {p: t["minor_faults_p50"] for p, t in truth.items()},
            "truth_p50_us_by_round": {
                p: [summary(f["samples"][p])["p50_us"] for f in found] for p in SERIALIZE_PHASES
            },
            "growth_vs_smallest_us": {
                phase: round(p50(bodies[run_id], phase) - p50(smallest, phase), 1)
                for phase in (*SERIALIZE_PHASES, *OTHER_PHASES)
            },
        }
    result.notes.append(
        "other phases that grow with size do real size-dependent work, not serialization: "
        "processing decodes the features into numpy and scores every entity; server_queue "
        "includes the request body arriving after its headers (grpcio starts the call on "
        "headers); the network phases copy MBs through loopback and HTTP/2 flow control"
    )
    result.seconds = time.monotonic() - started
    return result

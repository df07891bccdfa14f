"""What the instrumentation costs: bare grpcio, opentelemetry-instrumentation-grpc and ours,
side by side in one run.

Six configurations of the same echo service (protobuf ``BytesValue``, unary-unary):

- ``bare``: grpcio alone;
- ``propagation-only``: W3C trace context only (bench/instrumentation_propagation.py);
- ``official``: ``server_interceptor()`` / ``client_interceptor()`` of
  opentelemetry-instrumentation-grpc, an SDK ``TracerProvider`` and ``BatchSpanProcessor``;
- ``ours``, ``ours 10%``, ``ours 1%``: ``instrumented_server`` + ``instrument_channel`` with
  a ``SpanPipeline``, at parent-based sampling ratios 100%, 10% and 1% (the standard
  ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` / ``OTEL_TRACES_SAMPLER_ARG``).

Both instrumented configurations pay for export the same way: the SDK's OTLP/gRPC
exporter (same batch size, queue and interval) sending to a real OTLP sink that
runs in its own process and discards what it receives (after counting spans).
Ours uses the exporter it ships (``CallRecordOTLPExporter``: that same exporter
class, with its translation step replaced by direct encoding of call records).

Every configuration has its own server process and its own client process, all
alive for the whole run, so each side's CPU is read from its own process clock
(all threads: gRPC's, the handler pool's, the export worker's). The export
worker's thread clock, plus whatever a flush costs the flushing thread, is
reported apart as "export". After every block both sides flush, so a block pays
for exporting its own spans and nothing else.

Blocks are interleaved: every round runs, for each payload and each kind of
block (sequential calls: CPU and latency; 8 client threads in a closed loop:
throughput), all configurations in a shuffled order. Reported numbers
are medians over rounds; "added" CPU is computed per round against that
round's bare block, then the median is taken.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.common import (
    Worker,
    log,
    machine_info,
    percentile,
    publish,
)
from bench.instrumentation_hotpath import in_call_us, tight_loop_us
from bench.instrumentation_processes import (
    CONFIGS,
    FULL,
    INSTRUMENTED,
    NAME,
    OURS,
    QUICK,
    SAMPLED,
    SATURATION,
    SEQUENTIAL,
    SIDES,
    TAIL,
    Payload,
    Plan,
    _client_process,
    _per_call_us,
    _server_process,
    _sink_process,
)
from bench.instrumentation_report import (
    render_markdown,
    summarize,
)


# -- the run ------------------------------------------------------------------------------------
def _measure(
    plan: Plan, payload: Payload, kind: str, client: Worker, server: Worker
) -> dict[str, Any]:
    """One block: the client's calls, then both sides flush; CPU per call by side and role."""
    calls = payload.sequential_calls if kind == SEQUENTIAL else payload.saturation_calls
    server_before = server.call("snapshot")
    result = client.call(
        "block",
        kind,
        payload.size,
        calls,
        plan.threads,
        plan.block_timeout_s,
        timeout_s=plan.block_timeout_s + 60,
    )
    server_after = server.call("flush")
    done = max(result["calls"], 1)
    block: dict[str, Any] = {
        "calls": result["calls"],
        "errors": result["errors"],
        "wall_s": round(result["wall_ns"] / 1e9, 3),
        "cpu_us": {
            "client": result["cpu_us"],
            "server": _per_call_us(server_before, server_after, done),
        },
    }
    if kind == SEQUENTIAL:
        latencies = result["latencies_ns"]
        block["latency_p50_us"] = round(percentile(latencies, 50) / 1e3, 1)
        block["latency_p99_us"] = round(percentile(latencies, 99) / 1e3, 1)
    else:
        block["throughput_calls_s"] = round(result["calls"] / (result["wall_ns"] / 1e9), 1)
    return block


def run(plan: Plan, seed: int | None = None) -> dict[str, Any]:
    """Start the processes, run the interleaved rounds, return the raw blocks and counts."""
    shuffler = random.Random(seed)
    started = time.monotonic()
    workers: list[Worker] = []
    try:
        sink = Worker("otlp-sink", _sink_process)
        workers.append(sink)
        sink_port = sink.wait_ready()
        servers = {
            config: Worker(f"server-{config}", _server_process, config, sink_port)
            for config in CONFIGS
        }
        workers += servers.values()
        ports = {config: server.wait_ready() for config, server in servers.items()}
        clients = {
            config: Worker(f"client-{config}", _client_process, config, ports[config], sink_port)
            for config in CONFIGS
        }
        workers += clients.values()
        for client in clients.values():
            client.wait_ready()

        log(f"warming up ({plan.warmup_calls} calls per configuration and payload)")
        calls_made = dict.fromkeys(CONFIGS, 0)
        for config in CONFIGS:
            for payload in plan.payloads:
                calls = max(plan.warmup_calls // max(payload.size // 1024, 1), 5)
                warmup = Payload(payload.label, payload.size, calls, calls)
                for kind in (SEQUENTIAL, SATURATION):
                    block = _measure(plan, warmup, kind, clients[config], servers[config])
                    calls_made[config] += block["calls"]

        blocks: list[dict[str, Any]] = []
        rounds_done = 0
        for round_index in range(plan.rounds):
            if rounds_done and time.monotonic() - started > plan.budget_s:
                log(f"time budget reached: stopping after {rounds_done} rounds")
                break
            for payload in plan.payloads:
                for kind in (SEQUENTIAL, SATURATION):
                    order = list(CONFIGS)
                    shuffler.shuffle(order)
                    for position, config in enumerate(order):
                        block = _measure(plan, payload, kind, clients[config], servers[config])
                        calls_made[config] += block["calls"]
                        blocks.append(
                            {
                                "round": round_index,
                                "payload": payload.label,
                                "kind": kind,
                                "config": config,
                                "position": position,
                                **block,
                            }
                        )
            rounds_done += 1
            log(f"round {rounds_done}/{plan.rounds} done at {time.monotonic() - started:.0f} s")

        counts: dict[str, Any] = {
            f"{side}-{config}": {"calls": calls_made[config], **worker.call("counts")}
            for config in INSTRUMENTED
            for side, worker in (("client", clients[config]), ("server", servers[config]))
        }
        counts["sink"] = sink.call("counts")
        exported = sum(counts[f"{s}-{c}"]["exported_spans"] for s in SIDES for c in INSTRUMENTED)
        # Every call of an unsampled configuration is exported by both sides; a head-sampled
        # one keeps both halves of the calls it keeps (the server follows the client's
        # decision); tail-aware sampling may keep a client half alone (slow only there).
        counts["complete"] = exported == counts["sink"]["spans"] and all(
            c in TAIL
            or (
                counts[f"client-{c}"]["exported_spans"] == counts[f"server-{c}"]["exported_spans"]
                and (
                    SAMPLED.get(c, 1.0) < 1
                    or calls_made[c] == counts[f"client-{c}"]["exported_spans"]
                )
            )
            for c in INSTRUMENTED
        )
        for config in OURS:
            kept = counts[f"client-{config}"]["exported_spans"] / max(calls_made[config], 1)
            counts[f"client-{config}"]["sampled_fraction"] = round(kept, 4)
        log("timing our client functions in place, inside calls to the bare server")
        in_call = in_call_us(f"127.0.0.1:{ports['bare']}", calls=plan.payloads[0].sequential_calls)
        return {
            "in_call_us": in_call,
            "rounds": rounds_done,
            "blocks": blocks,
            "export_counts": counts,
            "runtime_s": round(time.monotonic() - started, 1),
        }
    finally:
        for worker in reversed(workers):
            worker.stop()


def _source_digest() -> str:
    """Which instrumentation code was measured."""
    import grpc_overhead.instrumentation as package

    digest = hashlib.sha256()
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench.instrumentation", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a short smoke run (2 rounds)")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--seed", type=int, help="seed of the block order shuffle")
    options = parser.parse_args(argv)
    plan = QUICK if options.quick else FULL
    if options.rounds:
        plan = replace(plan, rounds=options.rounds)
    info = machine_info(
        (
            "grpcio",
            "protobuf",
            "opentelemetry-sdk",
            "opentelemetry-instrumentation-grpc",
            "grpc-overhead",
        )
    )
    info["instrumentation_source_sha256"] = _source_digest()
    raw = run(plan, options.seed)
    info["load_average_1m_at_end"] = os.getloadavg()[0]
    # Our per-call code alone, warm, in this process: compare with the per-thread table.
    raw["tight_loop_us"] = tight_loop_us(calls=4_000 if options.quick else 20_000)
    summary = summarize(raw, plan)
    markdown = render_markdown(summary, info, raw)
    data = {
        "benchmark": NAME,
        "machine": info,
        "plan": asdict(plan),
        **summary,
        "export_counts": raw["export_counts"],
        "runtime_s": raw["runtime_s"],
        "rounds_completed": raw["rounds"],
        "tight_loop_us": raw["tight_loop_us"],
        "in_call_us": raw["in_call_us"],
        "raw_blocks": raw["blocks"],
    }
    return publish(NAME, data, markdown, quick=options.quick)


if __name__ == "__main__":
    sys.exit(main())

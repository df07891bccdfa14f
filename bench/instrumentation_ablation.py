"""Where a sampled server call's added CPU goes: ours with one piece switched off at a time,
against bare grpcio, in ONE server process (``python -m bench.instrumentation_ablation``).

``bench.instrumentation`` compares configurations that run in different processes. Two
processes running identical code can differ by 20% in CPU per call for a whole run (seen
here: two propagation-only clients, one per server, 125 vs 157 µs), a bias that no number
of rounds averages away, and larger than the few µs one piece of our code costs. So here
one process hosts both a bare ``grpc.server`` and an ``instrumented_server`` (each with its
own handler pool), and the pieces of our per-call work are switched between blocks:

- ``full``: everything, as shipped;
- ``no wrapping``: interceptor, record, executor pickup, but the handler is not wrapped and
  nothing is exported (the floor of attaching at all);
- ``no trailer`` / ``no context`` / ``no peer, deadline``: the residence trailer, making
  the server span current for the handler, reading peer and deadline, each left out;
- ``export at batch end``: records queued until a batch is full, then encoded (the
  pipeline before it encoded records early);
- ``no export``: records dropped at submit.

One client process (a propagation-only client, the same for both servers) calls either
server; per block the server process's CPU and its garbage-collection time are read, and
each variant's added CPU is the median over rounds of its difference to that round's bare
block. These are measurements, not a test: variants leave out work the product needs.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time
from concurrent import futures
from multiprocessing.connection import Connection
from types import SimpleNamespace
from typing import Any

import grpc
from google.protobuf.wrappers_pb2 import BytesValue

from bench.common import Worker, log, machine_info, markdown_table, process_cpu_ns, publish
from bench.common import serve_commands as _serve_commands
from bench.instrumentation_processes import (
    _OPTIONS,
    METHOD,
    SERVER_WORKERS,
    _echo_handler,
    _saturation,
    _sequential,
    _sink_process,
    _Telemetry,
)
from bench.instrumentation_propagation import injecting

NAME = "instrumentation_ablation"
VARIANTS = (
    "full",
    "no wrapping",
    "no trailer",
    "no context",
    "no peer, deadline",
    "export at batch end",
    "no export",
)


def _variants(pipeline: Any) -> dict[str, Any]:
    """variant -> function that switches the server's per-call code to it."""
    from grpc_overhead.instrumentation import server, server_calls

    names = ("_set_residence_trailer", "_activate", "otel_context", "_peer", "read_deadline")
    shipped = {name: getattr(server_calls, name) for name in names}
    wrap, encode, wake_at = server.wrap_handler, pipeline._encode, pipeline._wake_at

    def residence_only(record: Any, sent: int) -> None:
        record.context = None
        record.residence_ns = sent - record.start

    def unwrapped(handler: Any, record: Any, aio: bool) -> Any:
        record.finished = True  # never exported
        return handler

    def switch(wrapper: Any = wrap, early: bool = True, drop: bool = False, **patch: Any) -> Any:
        def apply() -> None:
            for name, value in shipped.items():
                setattr(server_calls, name, patch.get(name, value))
            server.wrap_handler = wrapper
            pipeline._encode, pipeline._wake_at = (
                (encode, wake_at) if early else (None, pipeline.export_batch_size)
            )
            if drop:
                pipeline.submit = lambda record: None
            else:
                pipeline.__dict__.pop("submit", None)

        return apply

    no_detach = SimpleNamespace(detach=lambda token: None)
    return {
        "full": switch(),
        "no wrapping": switch(wrapper=unwrapped),
        "no trailer": switch(_set_residence_trailer=residence_only),
        "no context": switch(_activate=lambda record: None, otel_context=no_detach),
        "no peer, deadline": switch(
            _peer=lambda context: None, read_deadline=lambda record, context: None
        ),
        "export at batch end": switch(early=False),
        "no export": switch(drop=True),
    }


def _server_process(connection: Connection, sink_port: int) -> None:
    telemetry = _Telemetry("ours", "server", sink_port)
    from grpc_overhead.instrumentation import instrumented_server

    bare = grpc.server(
        futures.ThreadPoolExecutor(max_workers=SERVER_WORKERS),
        handlers=[_echo_handler()],
        options=_OPTIONS,
    )
    ours = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=SERVER_WORKERS),
        handlers=[_echo_handler()],
        pipeline=telemetry.pipeline,
        options=_OPTIONS,
    )
    ports = [bare.add_insecure_port("127.0.0.1:0"), ours.add_insecure_port("127.0.0.1:0")]
    bare.start()
    ours.start()
    variants = _variants(telemetry.pipeline)
    collected = {"ns": 0, "started": 0}

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            collected["started"] = time.perf_counter_ns()
        else:
            collected["ns"] += time.perf_counter_ns() - collected["started"]

    gc.callbacks.append(on_gc)

    def snapshot() -> tuple[int, int]:
        return process_cpu_ns(), collected["ns"]

    def flush() -> tuple[int, int]:
        telemetry.pipeline.force_flush()
        return snapshot()

    connection.send(ports)
    _serve_commands(
        connection,
        {"snapshot": snapshot, "flush": flush, "variant": lambda name: variants[name]()},
    )
    bare.stop(grace=1).wait()
    ours.stop(grace=1).wait()
    telemetry.shutdown()


def _client_process(connection: Connection, ports: list[int]) -> None:
    calls = []
    for port in ports:
        channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=_OPTIONS)
        echo = channel.unary_unary(
            METHOD,
            request_serializer=BytesValue.SerializeToString,
            response_deserializer=BytesValue.FromString,
            _registered_method=True,
        )
        calls.append(injecting(echo))
    request = BytesValue(value=b"x" * 1024)

    def block(server: int, saturation: bool, count: int) -> dict[str, int]:
        deadline = time.monotonic() + 60
        if saturation:
            return _saturation(calls[server], request, count, 8, deadline)
        result = _sequential(calls[server], request, count, deadline)
        result.pop("latencies_ns")
        return result

    connection.send(os.getpid())
    _serve_commands(connection, {"block": block})


def run(rounds: int, calls: int) -> dict[str, Any]:
    configs = ("bare", *VARIANTS)
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    gc_us: dict[str, list[float]] = {c: [] for c in configs}
    throughput: dict[str, list[float]] = {c: [] for c in configs}
    sink = Worker("otlp-sink", _sink_process)
    workers = [sink]
    try:
        sink_port = sink.wait_ready()
        server = Worker("server", _server_process, sink_port)
        workers.append(server)
        ports = server.wait_ready()
        client = Worker("client", _client_process, ports)
        workers.append(client)
        client.wait_ready()
        for round_index in range(rounds + 1):  # round 0 warms up
            order = list(configs)
            random.shuffle(order)
            for config in order:
                target = 0 if config == "bare" else 1
                if target:
                    server.call("variant", config)
                before = server.call("snapshot")
                done = client.call("block", target, False, calls)["calls"]
                after = server.call("flush")
                saturated = client.call("block", target, True, calls)
                server.call("flush")
                if round_index:
                    cpu[config].append((after[0] - before[0]) / done / 1e3)
                    gc_us[config].append((after[1] - before[1]) / done / 1e3)
                    throughput[config].append(saturated["calls"] / saturated["wall_ns"] * 1e9)
            log(f"round {round_index}/{rounds} done")
    finally:
        for worker in reversed(workers):
            worker.stop()
    return {"cpu_us": cpu, "gc_us": gc_us, "throughput": throughput}


def summarize(raw: dict[str, Any]) -> list[dict[str, Any]]:
    cpu, bare = raw["cpu_us"], raw["cpu_us"]["bare"]
    rows = []
    for config in cpu:
        added = [value - base for value, base in zip(cpu[config], bare, strict=True)]
        quartiles = statistics.quantiles(added, n=4) if len(added) > 1 else [added[0]] * 3
        ratio = [
            t / b for t, b in zip(raw["throughput"][config], raw["throughput"]["bare"], strict=True)
        ]
        rows.append(
            {
                "config": config,
                "server_cpu_us": round(statistics.median(cpu[config]), 1),
                "added_us": round(statistics.median(added), 1),
                "added_q1_us": round(quartiles[0], 1),
                "added_q3_us": round(quartiles[2], 1),
                "gc_us": round(statistics.median(raw["gc_us"][config]), 2),
                "throughput_vs_bare": round(statistics.median(ratio), 3),
            }
        )
    return rows


HEADERS = (
    "configuration",
    "server CPU µs/call",
    "added µs",
    "quartiles",
    "GC µs/call",
    "throughput vs bare",
)


def render(rows: list[dict[str, Any]], info: dict[str, Any], rounds: int, calls: int) -> str:
    title = (
        f"### Server ablation ({info['date'][:10]}; {info['cpu_count']} CPUs; load average "
        f"{info['load_average_1m_at_start']:.1f} at start, "
        f"{info['load_average_1m_at_end']:.1f} at end)"
    )
    text = (
        f"{title}\n\nOne server process hosting bare grpcio and ours; {rounds} rounds of "
        f"{calls} sequential 1 KB calls per configuration (then {calls} at saturation, 8 "
        "client threads), shuffled; medians of per-round differences to bare "
        "(bench/instrumentation_ablation.py).\n\n"
    )
    return text + markdown_table(
        HEADERS,
        [
            (
                r["config"],
                r["server_cpu_us"],
                r["added_us"],
                f"{r['added_q1_us']} .. {r['added_q3_us']}",
                f"{r['gc_us']:.2f}",
                f"{r['throughput_vs_bare']:.2f}x",
            )
            for r in rows
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.instrumentation_ablation")
    parser.add_argument("--quick", action="store_true", help="a short smoke run (2 rounds)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=1000)
    options = parser.parse_args(argv)
    rounds, calls = (2, 200) if options.quick else (options.rounds, options.calls)
    info = machine_info(("grpcio", "opentelemetry-sdk", "grpc-overhead"))
    raw = run(rounds, calls)
    info["load_average_1m_at_end"] = os.getloadavg()[0]
    rows = summarize(raw)
    data = {
        "benchmark": NAME,
        "machine": info,
        "rounds": rounds,
        "calls": calls,
        "rows": rows,
        "raw": raw,
    }
    return publish(NAME, data, render(rows, info, rounds, calls), quick=options.quick)


if __name__ == "__main__":
    sys.exit(main())

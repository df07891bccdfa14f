"""How exact are the phases gRPC's own tracing (gRFC A72) and otelgrpc's message events
give? Ground truth injected into a real grpc-go client and server (``make grpc-go-peer``):

* one-way delay: a toxiproxy latency toxic per direction between them, calibrated on raw
  TCP through a second proxy with the same toxics (toxiproxy overshoots a little);
* serialization cost: ``-marshal-delay`` spins the CPU inside the codec's Marshal, on
  the client (request) and on the server (response).

Each source runs a baseline and the injected case, interleaved over rounds; a phase's
error is (its p50 with the injection - its p50 without) - the injected amount. The gRFC
warns that event timestamps are only ordered, not exact: this measures by how much.

    python -m bench.run event_accuracy [-- --quick]

Writes bench/results/event_accuracy.{json,md}.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from grpc_overhead.cli.processes import ServiceProcess, free_port, offline_env, run_load
from harness import peers
from harness.ground_truth.calibration import EchoServer, probe
from harness.ground_truth.pipeline import ServeProcess
from harness.ground_truth.toxiproxy import Toxiproxy

RESULTS = Path(__file__).parent / "results"
UP_MS, DOWN_MS = 6, 3
MARSHAL_MS = 2
WARMUP_CALLS = 20
CASES = ("baseline", "delay", "marshal")
#: (case, phase or "a+b", the injected amounts it must grow by against the baseline).
CHECKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("delay", "request_network", ("up",)),
    ("delay", "response_network", ("down",)),
    ("delay", "response_receive", ("down",)),
    ("delay", "network_round_trip", ("up", "down")),
    ("delay", "total", ("up", "down")),
    ("delay", "server_receive", ()),
    ("marshal", "client_serialize", ("marshal",)),
    ("marshal", "client_pre_send", ("marshal",)),
    ("marshal", "server_handler", ("marshal",)),
    ("marshal", "response_serialize", ("marshal",)),
    ("marshal", "request_network", ()),
    ("marshal", "request_network+server_receive", ()),
    ("marshal", "server_tail", ()),
    ("marshal", "server_queue", ()),
    ("marshal", "response_network", ()),
)
#: source -> the peer's tracing mode; "ours" is the Python service and load generator.
SOURCES = {"ours": "", "A72 Go": "a72", "A72 Java": "java", "otelgrpc": "otelgrpc"}


def _value(call: dict, phase: str) -> float | None:
    values = [call[f"{part}_us"] for part in phase.split("+")]
    return None if any(value is None for value in values) else sum(values)


def _p50(calls: list[dict], phase: str) -> float | None:
    values = [value for call in calls if (value := _value(call, phase)) is not None]
    return statistics.median(values) if values else None


def _server(stack: ExitStack, source: str, case: str, response: Path, endpoint: dict):
    env = offline_env(OTEL_SERVICE_NAME=f"server-{source}-{case}", **endpoint)
    if source == "ours":
        return stack.enter_context(ServiceProcess(["--workers", "2"], env=env))
    if source == "A72 Java":
        delay_us = str(MARSHAL_MS * 1000 if case == "marshal" else 0)
        return stack.enter_context(
            peers.JavaServer(response, env=env, extra=["--marshal-delay-us", delay_us])
        )
    delay = f"{MARSHAL_MS}ms" if case == "marshal" else "0s"
    return stack.enter_context(peers.GoServer(
        response, tracing=SOURCES[source], extra=["-marshal-delay", delay], env=env
    ))  # fmt: skip


def _client(
    source: str, run: str, case: str, target: str, request: Path, calls: int, endpoint: dict
):
    env = offline_env(OTEL_SERVICE_NAME=run, **endpoint)
    if source == "ours":
        done = run_load("--target", target, "--calls", str(calls), "--concurrency", "1",
                        "--entities", "20", "--features", "8", "--json", env=env)  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        return
    if source == "A72 Java":
        delay_us = str(MARSHAL_MS * 1000 if case == "marshal" else 0)
        peers.run_java_client(target, request, calls=calls, env=env,
                              extra=["--marshal-delay-us", delay_us])  # fmt: skip
        return
    delay = f"{MARSHAL_MS}ms" if case == "marshal" else "0s"
    peers.run_client(target, request, calls=calls, tracing=SOURCES[source], env=env,
                       extra=["-marshal-delay", delay])  # fmt: skip


def measure(calls: int, rounds: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="event-accuracy-"))
    request, response = peers.write_messages(work)
    store, intake_port = work / "store", free_port()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{intake_port}"}
    probes: dict[str, list] = {"baseline": [], "delay": []}
    toxics = {"latency:upstream": {"latency": UP_MS, "jitter": 0},
              "latency:downstream": {"latency": DOWN_MS, "jitter": 0}}  # fmt: skip
    serve = ServeProcess(store, intake_port)
    try:
        with ExitStack() as stack:
            toxiproxy = stack.enter_context(Toxiproxy())
            echo = stack.enter_context(EchoServer())
            probe_proxy = toxiproxy.proxy(echo.address)
            proxies = {}
            for source in SOURCES:
                plain = _server(stack, source, "baseline", response, endpoint)
                proxies[source, "baseline"] = proxies[source, "delay"] = toxiproxy.proxy(
                    plain.target
                )
                marshal = _server(stack, source, "marshal", response, endpoint)
                proxies[source, "marshal"] = toxiproxy.proxy(marshal.target)
            for round_number in range(rounds):
                for case in CASES:
                    if case in probes:
                        toxiproxy.set_toxics(probe_proxy, toxics if case == "delay" else {})
                        probes[case].append(probe(probe_proxy.listen, 50))
                    for source in SOURCES:
                        if source == "ours" and case == "marshal":
                            continue  # no serialization cost can be injected into ours here
                        proxy = proxies[source, case]
                        toxiproxy.set_toxics(proxy, toxics if case == "delay" else {})
                        run = f"{source}-{case}-r{round_number}"
                        _client(source, run, case, proxy.listen, request,
                                WARMUP_CALLS + calls, endpoint)  # fmt: skip
                        toxiproxy.clear_toxics(proxy)
    finally:
        serve.stop()
    runs: dict[str, list[dict]] = {}
    for call in peers.read_calls(store):  # in call start order
        runs.setdefault(call["client_service"], []).append(call)
    found: dict[str, list[dict]] = {}
    for run, run_calls in runs.items():
        # Each run is a new client process: its first calls connect and (JVM) warm up.
        found.setdefault(run.rsplit("-r", 1)[0], []).extend(run_calls[WARMUP_CALLS:])

    def shift(direction: str) -> float:
        return statistics.mean(getattr(p, direction) for p in probes["delay"]) - statistics.mean(
            getattr(p, direction) for p in probes["baseline"]
        )

    truth = {"up": shift("upstream_us"), "down": shift("downstream_us"),
             "marshal": MARSHAL_MS * 1000.0}  # fmt: skip
    results: dict = {"truth_us": truth, "calls_per_run": calls, "rounds": rounds,
                     "load_average": os.getloadavg()[0], "sources": {}}  # fmt: skip
    ours_change: dict[tuple[str, str], float | None] = {}
    for source in SOURCES:
        rows = []
        base = found.get(f"{source}-baseline", [])
        for case, phase, parts in CHECKS:
            injected = found.get(f"{source}-{case}", [])
            before, after = _p50(base, phase), _p50(injected, phase)
            expected = sum(truth[part] for part in parts)
            measured = None if before is None or after is None else after - before
            if source == "ours":
                ours_change[case, phase] = measured
            reference = ours_change.get((case, phase))
            rows.append({
                "vs_ours_us": None if measured is None or reference is None or source == "ours"
                else round(measured - reference, 1),
                "case": case, "phase": phase, "baseline_p50_us": before,
                "expected_delta_us": round(expected, 1),
                "measured_delta_us": None if measured is None else round(measured, 1),
                "error_us": None if measured is None else round(measured - expected, 1),
                "undefined": injected != [] and after is None,
            })  # fmt: skip
        results["sources"][source] = rows
    return results


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:+,.0f}"


def write(results: dict) -> str:
    truth = results["truth_us"]
    lines = [
        "# Event accuracy per source: ours, A72 (grpc-go v1.85.0, grpc-java 1.85.1),"
        " otelgrpc v0.66.0",
        "",
        f"Injected against a baseline: request +{truth['up']:,.0f} us and response"
        f" +{truth['down']:,.0f} us one-way delay (toxiproxy, calibrated on raw TCP), or"
        f" {MARSHAL_MS} ms of serialization CPU in each side's codec (the Go and Java peers);"
        f" {results['calls_per_run']} calls x {results['rounds']} rounds per case (after"
        f" {WARMUP_CALLS} warm-up calls per client process), p50s; load average"
        f" {results['load_average']:.1f} on 2 CPUs at the end. 'vs ours': the change minus"
        " the change our own instrumentation measured for the same phase and injection"
        " (ours is checked against ground truth in docs/benchmarks.md).",
        "",
        "| source | injected | phase | expected change (us) | measured change (us) | error (us)"
        " | vs ours (us) |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for source, rows in results["sources"].items():
        for row in rows:
            if row["measured_delta_us"] is None and not row["undefined"]:
                continue  # not run for this source
            measured = "undefined" if row["undefined"] else _cell(row["measured_delta_us"])
            lines.append(
                f"| {source} | {row['case']} | {row['phase']} | {row['expected_delta_us']:,.0f}"
                f" | {measured} | {_cell(row['error_us'])} | {_cell(row['vs_ours_us'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    results = measure(*((20, 1) if quick else (100, 3)))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "event_accuracy.json").write_text(json.dumps(results, indent=2) + "\n")
    text = write(results)
    (RESULTS / "event_accuracy.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

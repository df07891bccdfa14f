"""How exact are the phases gRPC's own tracing (gRFC A72) and otelgrpc's message events
give? Ground truth injected into a real grpc-go client and server (``make grpc-go-peer``):

* one-way delay: a toxiproxy latency toxic per direction between them, calibrated on raw
  TCP through a second proxy with the same toxics (toxiproxy overshoots a little);
* serialization cost: ``-marshal-delay`` spins the CPU inside the codec's Marshal, on
  the client (request) and on the server (response).

Every server is warmed before the first baseline and every client process makes
warm-up calls before the measured ones (``WARMUP_CALLS``, per source: a JVM needs a few
hundred before its JIT settles), and the cases run interleaved over rounds, their order
rotating each round, so the table measures the source, not a JVM warming up. A phase's
error is (its p50 with the injection - its p50 without) - the injected amount. The gRFC
warns that event timestamps are only ordered, not exact: this measures by how much. A
phase a source's events cannot bound is "not defined" with the reason (``phase_bounds``),
and every call's every phase is checked: none may be negative (same host: shared clock).

    python -m bench.run event_accuracy [-- --quick]

Writes bench/results/event_accuracy.{json,md} (a ``--quick`` run only prints its table).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

from bench.common import machine_info, publish
from grpc_overhead.analyzer.insights import sources as catalogue
from grpc_overhead.analyzer.result_columns import ALL_PHASES
from grpc_overhead.processes import ServiceProcess, free_port, offline_env, run_load
from harness import peers
from harness.ground_truth.calibration import EchoServer, probe
from harness.ground_truth.pipeline import ServeProcess
from harness.ground_truth.toxiproxy import Toxiproxy

UP_MS, DOWN_MS = 6, 3
MARSHAL_MS = 2
#: Calls each client process makes before the measured ones, and each server gets before
#: the first round. A JVM's JIT takes long: a fresh grpc-java client's p50 total per 100
#: calls went 12.2, 4.8, 3.4, 2.5, 2.3, 2.1, 1.7, 1.5 ms over its first 800 calls (load 4,
#: 2 CPUs, 2026-11-27); Go and Python settle within tens.
WARMUP_CALLS = {"ours": 20, "A72 Go": 100, "A72 Java": 1000, "otelgrpc": 100}
CASES = ("baseline", "delay", "marshal")
#: (case, phase or "a+b", the injected amounts it must grow by against the baseline).
CHECKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("delay", "request_network", ("up",)),
    ("delay", "request_receive", ("up",)),
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
    ("marshal", "request_receive", ()),
    ("marshal", "network_round_trip", ()),
    ("marshal", "server_receive", ()),
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
    return stack.enter_context(
        peers.GoServer(response, tracing=SOURCES[source], extra=["-marshal-delay", delay], env=env)
    )


def _client(
    source: str, run: str, case: str, target: str, request: Path, calls: int, endpoint: dict
):
    env = offline_env(OTEL_SERVICE_NAME=run, **endpoint)
    if source == "ours":
        done = run_load(
            "--target",
            target,
            "--calls",
            str(calls),
            "--concurrency",
            "1",
            "--entities",
            "20",
            "--features",
            "8",
            "--json",
            env=env,
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
        return
    if source == "A72 Java":
        delay_us = str(MARSHAL_MS * 1000 if case == "marshal" else 0)
        peers.run_java_client(
            target,
            request,
            calls=calls,
            env=env,
            timeout_s=600,
            extra=["--marshal-delay-us", delay_us],
        )
        return
    delay = f"{MARSHAL_MS}ms" if case == "marshal" else "0s"
    peers.run_client(
        target,
        request,
        calls=calls,
        tracing=SOURCES[source],
        env=env,
        timeout_s=300,
        extra=["-marshal-delay", delay],
    )


def _run_all(work: Path, store: Path, calls: int, rounds: int) -> dict[str, list]:
    """Every source's runs, interleaved; the calibration probes per case."""
    request, response = peers.write_messages(work)
    intake_port = free_port()
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{intake_port}"}
    probes: dict[str, list] = {"baseline": [], "delay": []}
    toxics = {
        "latency:upstream": {"latency": UP_MS, "jitter": 0},
        "latency:downstream": {"latency": DOWN_MS, "jitter": 0},
    }
    serve = ServeProcess(store, intake_port)
    try:
        with ExitStack() as stack:
            toxiproxy = stack.enter_context(Toxiproxy())
            echo = stack.enter_context(EchoServer())
            probe_proxy = toxiproxy.proxy(echo.address)
            proxies = {}
            for source in SOURCES:
                for kind in ("baseline", "marshal"):
                    server = _server(stack, source, kind, response, endpoint)
                    proxies[source, kind] = toxiproxy.proxy(server.target)
                    # Warm the server (JIT, connection pools) before any measured call.
                    _client(
                        source,
                        f"{source}-warmup-{kind}",
                        kind,
                        proxies[source, kind].listen,
                        request,
                        WARMUP_CALLS[source],
                        endpoint,
                    )
                proxies[source, "delay"] = proxies[source, "baseline"]
            for round_number in range(rounds):
                shift = round_number % len(CASES)  # rotate the cases' order every round
                for case in CASES[shift:] + CASES[:shift]:
                    if case in probes:
                        toxiproxy.set_toxics(probe_proxy, toxics if case == "delay" else {})
                        probes[case].append(probe(probe_proxy.listen, 50))
                    for source in SOURCES:
                        if source == "ours" and case == "marshal":
                            continue  # no serialization cost can be injected into ours here
                        proxy = proxies[source, case]
                        toxiproxy.set_toxics(proxy, toxics if case == "delay" else {})
                        run = f"{source}-{case}-r{round_number}"
                        _client(
                            source,
                            run,
                            case,
                            proxy.listen,
                            request,
                            WARMUP_CALLS[source] + calls,
                            endpoint,
                        )
                        toxiproxy.clear_toxics(proxy)
    finally:
        serve.stop()
    return probes


def _negatives(calls: list[dict]) -> dict[str, float]:
    """Per phase: the most negative value any call shows (only phases shown negative)."""
    found: dict[str, float] = {}
    for call in calls:
        for phase in ALL_PHASES:
            value = call.get(f"{phase}_us")
            if value is not None and value < 0:
                found[phase] = min(found.get(phase, 0.0), value)
    return found


def _out_of_order(calls: list[dict]) -> dict[str, int]:
    """Per network phase the sources define: on how many calls it is NULL because the
    call's events came out of order (``phase_bounds``: never shown negative)."""
    counts: dict[str, int] = {}
    for call in calls:
        frame = catalogue.call_sources(call)
        for phase in frame[frame["unavailable"] == catalogue.OUT_OF_ORDER]["phase"]:
            counts[phase] = counts.get(phase, 0) + 1
    return counts


def _reason(calls: list[dict], phase: str) -> str:
    """Why ``phase`` is NULL on these calls, from the catalogue of their sources."""
    for part in phase.split("+"):
        if part not in catalogue.CATALOGUE_PHASES or not calls:
            continue
        pair = calls[0]["client_source"], calls[0]["server_source"]
        why = catalogue.phase_source(part, *pair)[1]
        if why:
            return why
    return "the events are absent or out of order"


def measure(calls: int, rounds: int) -> dict:
    machine = machine_info()
    work = Path(tempfile.mkdtemp(prefix="event-accuracy-"))
    store = work / "store"
    probes = _run_all(work, store, calls, rounds)
    runs: dict[str, list[dict]] = {}
    for call in peers.read_calls(store):  # in call start order
        runs.setdefault(call["client_service"], []).append(call)
    found: dict[str, list[dict]] = {}
    for run, run_calls in runs.items():
        if "-warmup-" in run:
            continue
        # Each run is a new client process: its first calls connect and (JVM) warm up.
        source = run.rsplit("-", 2)[0]
        found.setdefault(run.rsplit("-r", 1)[0], []).extend(run_calls[WARMUP_CALLS[source] :])

    def shift(direction: str) -> float:
        return statistics.mean(getattr(p, direction) for p in probes["delay"]) - statistics.mean(
            getattr(p, direction) for p in probes["baseline"]
        )

    truth = {
        "up": shift("upstream_us"),
        "down": shift("downstream_us"),
        "marshal": MARSHAL_MS * 1000.0,
    }
    results: dict = {
        "machine": machine,
        "truth_us": truth,
        "calls_per_run": calls,
        "rounds": rounds,
        "warmup_calls": WARMUP_CALLS,
        "load_average_1m_at_start": machine["load_average_1m_at_start"],
        "load_average_1m_at_end": os.getloadavg()[0],
        "sources": {},
        "negative_phases": {},
        "out_of_order": {},
        "calls": {},
    }
    for source in SOURCES:
        rows = []
        base = found.get(f"{source}-baseline", [])
        every = [c for case in CASES for c in found.get(f"{source}-{case}", [])]
        results["negative_phases"][source] = _negatives(every)
        results["out_of_order"][source] = _out_of_order(every)
        results["calls"][source] = len(every)
        for case, phase, parts in CHECKS:
            injected = found.get(f"{source}-{case}", [])
            before, after = _p50(base, phase), _p50(injected, phase)
            expected = sum(truth[part] for part in parts)
            measured = None if before is None or after is None else after - before
            undefined = injected != [] and after is None
            rows.append(
                {
                    "case": case,
                    "phase": phase,
                    "baseline_p50_us": before,
                    "expected_delta_us": round(expected, 1),
                    "measured_delta_us": None if measured is None else round(measured, 1),
                    "error_us": None if measured is None else round(measured - expected, 1),
                    "undefined": undefined,
                    "reason": _reason(injected, phase) if undefined else "",
                }
            )
        results["sources"][source] = rows
    return results


def _cell(row: dict, reasons: list[str]) -> str:
    """The error (us), or "not defined (n)" with n the reason's number below the table."""
    if row["undefined"]:
        if row["reason"] not in reasons:
            reasons.append(row["reason"])
        return f"not defined ({reasons.index(row['reason']) + 1})"
    if row["measured_delta_us"] is None:
        return "not run"
    return f"{row['error_us']:+,.0f}"


def write(results: dict) -> str:
    truth, sources = results["truth_us"], list(results["sources"])
    warmup = ", ".join(f"{source} {n}" for source, n in results["warmup_calls"].items())
    lines = [
        "# Event accuracy per source: ours, A72 (grpc-go v1.85.0, grpc-java 1.85.1),"
        " otelgrpc v0.66.0",
        "",
        f"Injected against a baseline: request +{truth['up']:,.0f} us and response"
        f" +{truth['down']:,.0f} us one-way delay (toxiproxy, calibrated on raw TCP), or"
        f" {MARSHAL_MS} ms of serialization CPU in each side's codec (the Go and Java peers);"
        f" {results['calls_per_run']} calls x {results['rounds']} rounds per case, cases"
        f" interleaved (order rotating each round), p50s; every server warmed and every client"
        f" process's first calls dropped ({warmup}). Load average (1 min)"
        f" {results['load_average_1m_at_start']:.2f} at the start,"
        f" {results['load_average_1m_at_end']:.2f} at the end, on"
        f" {results['machine']['cpu_count']} CPUs.",
        "",
        "Error = (p50 with the injection - p50 without) - what was injected, in us; 'not"
        " defined (n)': the source's events cannot bound the phase, reason n below the table.",
        "",
        "| injected | phase | expected change (us) | " + " | ".join(sources) + " |",
        "|---|---|---:|" + "---:|" * len(sources),
    ]
    reasons: list[str] = []
    for index, (case, phase, _) in enumerate(CHECKS):
        rows = [results["sources"][source][index] for source in sources]
        expected = rows[0]["expected_delta_us"]
        cells = [_cell(row, reasons) for row in rows]
        lines.append(f"| {case} | {phase} | {expected:,.0f} | " + " | ".join(cells) + " |")
    lines += ["", *(f"{n}. {reason}" for n, reason in enumerate(reasons, 1))]
    lines += [
        "",
        "Phases shown negative on any call (same host: a shared clock), and network"
        " phases left NULL on a call whose events came out of order:",
        "",
    ]
    for source, negative in results["negative_phases"].items():
        shown = ", ".join(f"{phase} ({value:,.0f} us)" for phase, value in negative.items())
        nulls = ", ".join(f"{phase} on {n}" for phase, n in results["out_of_order"][source].items())
        lines.append(
            f"- {source} ({results['calls'][source]} calls): negative: {shown or 'none'};"
            f" NULL, out of order: {nulls or 'none'}"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    results = measure(*((20, 2) if quick else (100, 5)))
    text = write(results)
    if quick:  # not published: keep the numbers for whoever asked
        scratch = Path(tempfile.gettempdir()) / "event_accuracy.quick.json"
        scratch.write_text(json.dumps(results, indent=2) + "\n")
    return publish("event_accuracy", results, text, quick=quick)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

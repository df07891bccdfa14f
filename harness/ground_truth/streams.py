"""Streams, per message: a delay on each message's path and a handler cost per message.

Scenario ``stream_per_message``: bidi PredictStream calls of ``MESSAGES`` messages each
way, the client sending each request once the previous response arrived
(``load --stream-lockstep``), so no request waits in the server's buffer while the
handler works and each message's transfer is its path's alone. Two servers, each
behind its own toxiproxy, run interleaved in every round:

* ``none`` (the idle run): no toxic, no model wait;
* ``per_message``: latency toxics ``UP_MS`` on the request path and ``DOWN_MS`` on the
  response path, and a model that sleeps ``WAIT_MS`` per request (``--model-wait-ms``:
  wall time, known whatever the machine's load; a CPU burn would stretch with it).

The report's per-call medians must move by what was injected: request_message_transfer
by the calibrated upstream delay, response_message_transfer by the downstream one (both
measured on raw TCP through a twin proxy with the same toxics, ``calibration``), and
response_message_handler by the model's wait; every difference taken against the idle
run of the same round. The wait's truth is calibrated too: a sleep overshoots its
nominal length by the time the woken thread waits for a CPU (tens of µs idle, hundreds on
a loaded machine), so the harness times ``time.sleep(WAIT_MS)`` itself in every round.
"""

from __future__ import annotations

import statistics
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from harness.ground_truth.calibration import EchoServer, OneWay, probe
from harness.ground_truth.checks import MissingMeasurement, ScenarioResult, check, method
from harness.ground_truth.delay import latency
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile
from harness.ground_truth.toxiproxy import Toxiproxy

NAME = "stream_per_message"
STREAM_METHOD = "PredictStream"
MESSAGES = 8
UP_MS, DOWN_MS, WAIT_MS = 8, 6, 10
BASELINE, CASE = "none", "per_message"
#: Spans of 8-message streams are large; on a loaded machine the intake can take longer
#: than the harness's default 0.5 s per export, and a dropped span loses a call's half.
EXPORT = {"OTEL_EXPORTER_OTLP_TIMEOUT": "10"}
CASES = {BASELINE: ({}, 0.0), CASE: (latency(up_ms=UP_MS, down_ms=DOWN_MS), float(WAIT_MS))}
#: What each injected quantity must move, and by how much (filled from the calibration).
CHECKS = (
    ("request path delay per message", "request_message_transfer"),
    ("response path delay per message", "response_message_transfer"),
    ("handler cost per message", "response_message_handler"),
)


def _p50(body: dict[str, Any], phase: str) -> float:
    value = method(body, STREAM_METHOD)["phases"][phase]["p50_us"]
    if value is None:
        raise MissingMeasurement(f"the report has no {phase} p50 for {STREAM_METHOD}")
    return float(value)


def sleep_probe(probes: int) -> float:
    """Median wall time of ``time.sleep(WAIT_MS)`` here and now, µs."""
    slept = []
    for _ in range(probes):
        before = time.perf_counter_ns()
        time.sleep(WAIT_MS / 1000)
        slept.append((time.perf_counter_ns() - before) / 1000)
    return statistics.median(slept)


def stream_per_message(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    runs = {case: f"{NAME}-{case}" for case in CASES}
    probes: dict[str, list[OneWay]] = {case: [] for case in CASES}
    slept: list[float] = []
    pipeline = Pipeline(workdir / "store")
    calls = max(profile.calls // 2, 10)  # each call carries MESSAGES messages each way
    with ExitStack() as stack:
        toxiproxy = stack.enter_context(Toxiproxy())
        echo = stack.enter_context(EchoServer())
        stack.enter_context(pipeline)
        proxies = {}
        for case, (_, wait_ms) in CASES.items():
            service = stack.enter_context(
                pipeline.service("--workers", "2", "--model-wait-ms", str(wait_ms), env=EXPORT)
            )
            proxies[case] = toxiproxy.proxy(service.target)
        probe_proxy = toxiproxy.proxy(echo.address)
        for _ in range(profile.rounds):
            for case, (toxics, _) in CASES.items():
                for proxy in (proxies[case], probe_proxy):
                    toxiproxy.set_toxics(proxy, toxics)
                probes[case].append(probe(probe_proxy.listen, profile.probes))
                pipeline.load(
                    proxies[case].listen,
                    runs[case],
                    "--calls",
                    str(calls),
                    "--concurrency",
                    "1",
                    "--mode",
                    "stream",
                    "--stream-lockstep",
                    "--stream-messages",
                    str(MESSAGES),
                    "--entities",
                    "20",
                    "--features",
                    "8",
                    env=EXPORT,
                )
                toxiproxy.clear_toxics(proxies[case])
            slept.append(sleep_probe(max(profile.probes // 5, 5)))
    bodies = pipeline.reports(list(runs.values()))
    calibrated = {
        case: OneWay(
            sum(p.upstream_us for p in found) / len(found),
            sum(p.downstream_us for p in found) / len(found),
        )
        for case, found in probes.items()
    }
    result = ScenarioResult(NAME, profile.name)
    result.phases = {
        case: {
            phase: round(values["p50_us"], 1) if values["p50_us"] is not None else None
            for phase, values in method(bodies[run], STREAM_METHOD)["phases"].items()
        }
        for case, run in runs.items()
    }
    result.observations["calibrated_sleep_us"] = round(statistics.mean(slept), 1)
    result.observations["calibrated_one_way_us"] = {
        case: {"upstream": round(c.upstream_us, 1), "downstream": round(c.downstream_us, 1)}
        for case, c in calibrated.items()
    }
    injected = {
        "request_message_transfer": calibrated[CASE].upstream_us - calibrated[BASELINE].upstream_us,
        "response_message_transfer": calibrated[CASE].downstream_us
        - calibrated[BASELINE].downstream_us,
        "response_message_handler": statistics.mean(slept),
    }
    case_body, idle_body = bodies[runs[CASE]], bodies[runs[BASELINE]]
    for quantity, phase in CHECKS:
        measured = _p50(case_body, phase) - _p50(idle_body, phase)
        result.checks.append(check(NAME, CASE, quantity, phase, injected[phase], measured))
    result.seconds = time.monotonic() - started
    return result

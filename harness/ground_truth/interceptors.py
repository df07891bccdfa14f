"""Handler, interceptors and marks apart: time around the handler lands where it is spent.

``server_interceptors``: real grpcio servers (the prediction service's Predictor,
``interceptor_server``) with a known cost next to the handler, each against a baseline
server without it, loaded in interleaved rounds:

* a user's interceptor that sleeps after the handler returned (DoorDash's slow logging
  call, in interceptor form) and, in another case, before it calls the handler: the
  sleep must land in ``server_interceptors``;
* (full) the interceptor sleeping in ``intercept_service`` itself: also
  ``server_interceptors``, not ``server_queue``;
* a handler that calls ``mark_predictions_made()`` when its model scored and then
  sleeps: the sleep must land in ``post_processing``.

In every case ``processing`` (the servicer's own method up to its mark) must stay the
baseline's. The truth is each sleep as the server process's own clock measured it
(``perf_counter_ns`` around ``time.sleep``), never a span. Reduced: 15 ms, sync; full:
10 and 20 ms, sync and aio, plus the intercept_service case.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from grpc_overhead.processes import ServiceProcess
from harness.ground_truth.checks import ScenarioResult, check, p50, p50s, tolerance_us
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile

SMALL = ("--entities", "20", "--features", "8")
#: Where each kind's injected time must land.
PHASE = {
    "after": "server_interceptors",
    "before": "server_interceptors",
    "intercept": "server_interceptors",
    "mark": "post_processing",
}
QUANTITY = {
    "after": "user interceptor sleeps after the handler",
    "before": "user interceptor sleeps before calling the handler",
    "intercept": "user interceptor sleeps in intercept_service",
    "mark": "handler sleeps after mark_predictions_made()",
}


@dataclass(frozen=True)
class Case:
    kind: str  # baseline | after | before | intercept | mark
    sleep_ms: float
    aio: bool

    @property
    def name(self) -> str:
        mode = "aio" if self.aio else "sync"
        if self.kind == "baseline":
            return f"{mode}_baseline"
        return f"{mode}_{self.kind}_{self.sleep_ms:g}ms"


def cases(profile: Profile) -> list[Case]:
    if not profile.full:
        return [Case(kind, 15.0, False) for kind in ("baseline", "after", "before", "mark")]
    found = []
    for aio in (False, True):
        found.append(Case("baseline", 0.0, aio))
        found += [
            Case(kind, ms, aio)
            for ms in (10.0, 20.0)
            for kind in ("after", "before", "intercept", "mark")
        ]
    return found


class InterceptorServer(ServiceProcess):
    """``interceptor_server`` as a process, started and stopped like ``grpc-overhead service``."""

    def __init__(self, case: Case, stats: Path, env: dict[str, str]) -> None:
        super().__init__(env=env)
        self.case = case
        self.stats = stats

    @property
    def command(self) -> list[str]:
        extra = ["--aio"] if self.case.aio else []
        return [
            self.python,
            "-m",
            "harness.ground_truth.interceptor_server",
            self.case.kind,
            str(self.case.sleep_ms),
            str(self.stats),
            *extra,
        ]

    def slept_us(self) -> list[float]:
        found = json.loads(self.stats.read_text())
        spans = found["spans"]
        if spans["failed"] or spans["dropped"] or spans["unsent"]:
            raise RuntimeError(f"{self.case.name}: the server lost spans ({spans})")
        return found["slept_us"]


@contextmanager
def _servers(
    pipeline: Pipeline, found: list[Case], workdir: Path
) -> Iterator[dict[Case, InterceptorServer]]:
    root = str(Path(__file__).resolve().parents[2])
    # The servers export to the pipeline's intake with the exporter's own 10 s per export
    # (offline_env's 0.5 s is for the dead port only): at load 10 a shorter bound lost
    # whole batches (DEADLINE_EXCEEDED).
    env = pipeline.service_env() | {"PYTHONPATH": root}
    with ExitStack() as stack:
        servers = {}
        for case in found:
            stats = workdir / f"{case.name}.json"
            servers[case] = stack.enter_context(InterceptorServer(case, stats, env))
        yield servers


def server_interceptors(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    result = ScenarioResult("server_interceptors", profile.name)
    pipeline = Pipeline(workdir / "store")
    found = cases(profile)
    calls = str(profile.calls)
    servers: dict[Case, InterceptorServer] = {}
    # One mode's servers at a time (sync, then aio), each with its own baseline.
    groups = [group for aio in (False, True) if (group := [c for c in found if c.aio == aio])]
    with pipeline:
        for group in groups:
            with _servers(pipeline, group, workdir) as running:
                servers |= running
                for _ in range(profile.rounds):  # interleaved: noise hits every case alike
                    for case in group:
                        pipeline.load(
                            running[case].target,
                            case.name,
                            "--calls",
                            calls,
                            "--concurrency",
                            "1",
                            *SMALL,
                        )
    # The servers wrote their sleeps when they stopped (leaving the block).
    slept = {case: server.slept_us() for case, server in servers.items()}
    truth_us = {case: statistics.median(found) for case, found in slept.items() if found}
    bodies = pipeline.reports([case.name for case in found])
    result.phases = {case.name: p50s(bodies[case.name]) for case in found}
    for case in found:
        if case.kind == "baseline":
            continue
        baseline = next(c for c in found if c.kind == "baseline" and c.aio == case.aio)
        body, alone = bodies[case.name], bodies[baseline.name]
        phase = PHASE[case.kind]
        injected = truth_us[case]
        measured = p50(body, phase) - p50(alone, phase)
        result.checks.append(
            check(result.name, case.name, QUANTITY[case.kind], phase, injected, measured)
        )
        # The servicer's own work is what it was without the extra cost.
        result.checks.append(
            check(
                result.name,
                case.name,
                "no extra handler work",
                "processing",
                0.0,
                p50(body, "processing") - p50(alone, "processing"),
                tolerance_us(injected),
            )
        )
        result.observations[case.name] = {
            "slept_p50_us": round(injected, 1),
            f"{phase}_increase_p50_us": round(measured, 1),
            "server_queue_increase_p50_us": round(
                p50(body, "server_queue") - p50(alone, "server_queue"), 1
            ),
        }
    result.notes.append(
        "truth: each sleep as the server process's own clock measured it (perf_counter_ns "
        "around time.sleep), median; measured: the case's p50 of the phase minus the "
        "baseline server's (same rounds, interleaved)"
    )
    result.seconds = time.monotonic() - started
    return result


if __name__ == "__main__":  # a quick look: python -m harness.ground_truth.interceptors DIR
    from harness.ground_truth.profile import REDUCED

    print(server_interceptors(Path(sys.argv[1]), REDUCED).describe())

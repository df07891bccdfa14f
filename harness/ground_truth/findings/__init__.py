"""Ground truth for findings: inject one cause into a real service, check it is the top finding
and that its estimated saving is the saving measured by rerunning without the cause.

Every scenario plays its traffic through the real pipeline (``serve`` intake +
chDB store, the instrumented ``service`` or a real grpcio server, ``load``,
toxiproxy where the cause is on the path), twice over and interleaved round by
round: with the cause and with it removed the way the finding's action says.
All scenarios of a run share one ``serve`` (one store, a run id per scenario
and arm), read at the end in one engine start; ``result.judge`` holds the
checks. ``make test`` runs the reduced profile (tests/ground_truth), ``make
bench`` the full one (bench/findings.py -> docs/benchmarks.md).

Scenarios (kind: cause / cure):

======================== ===========================================================
server_pool_saturated    1 handler thread, 4 closed-loop callers / 8 threads
post_processing          the handler sleeps after ``mark_predictions_made()`` / not
server_interceptors      a user's interceptor sleeps after the handler / none
connection_setup         a new TLS channel per call / one warm channel
network_latency          toxiproxy latency both ways on small calls / no toxic
slow_upload              a 2.5 MB/s request path, ~209 KB requests / no toxic
slow_download            a 320 KB/s response path, ~32 KB responses / no toxic
compression_would_help   ~52 KB compressible requests, plain, on a 500 KB/s path / gzip
compression_costs_more   gRPC gzip on a fast path / no compression
client_busy              2 threads burning CPU in the client (its own CPUs) / none
server_cpu_saturated     2 threads burning CPU in the server outside its handlers / none
serialization_cost       500 Entity messages per request on pure-Python protobuf /
                         the same matrix as one packed float32 blob
tail                     one instance of two, 1 call in 25, is 25 ms slower / is not
clock_uncertain          the server's clock 40 ms ahead on another "host" (libfaketime);
                         nothing to save, so the measured saving is 0
healthy_light            nothing: small calls, idle server (no finding above low)
healthy_model            nothing: a model waiting 3 ms, enough workers (none above low)
======================== ===========================================================
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.ground_truth.findings import paths, processes, spread, waits
from harness.ground_truth.findings.result import FindingsResult, Plan, judge
from harness.ground_truth.pipeline import Pipeline, reports
from harness.ground_truth.profile import Profile

#: A scenario plays its traffic on the shared pipeline and says what it injected.
Scenario = Callable[[Pipeline, Path, Profile], Plan]

SCENARIOS: dict[str, Scenario] = {
    **waits.SCENARIOS,
    **paths.SCENARIOS,
    **processes.SCENARIOS,
    **spread.SCENARIOS,
}


def run_scenarios(
    workdir: Path,
    profile: Profile,
    names: Sequence[str] | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> list[FindingsResult]:
    """Play ``names`` (default: all) on one pipeline, then judge each from its findings.

    A scenario that fails to run is a result with ``error`` set (the others still run).
    """
    names = list(names or SCENARIOS)
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    plans: dict[str, tuple[Plan, float]] = {}
    failed: dict[str, str] = {}
    pipeline = Pipeline(workdir / "store")
    with pipeline:
        for name in names:
            started = time.monotonic()
            progress(f"findings scenario {name} ...")
            try:
                scenario_dir = workdir / name
                scenario_dir.mkdir(parents=True, exist_ok=True)
                plans[name] = (
                    SCENARIOS[name](pipeline, scenario_dir, profile),
                    time.monotonic() - started,
                )
            except Exception as error:
                failed[name] = "".join(traceback.format_exception_only(error)).strip()
                progress(f"  {name} failed: {failed[name]}")
    answers = reports(pipeline.store, [plan.run for plan, _ in plans.values()], findings=True)
    results = []
    for name in names:
        if name in failed:
            plan = Plan(name, None, "", "")
            results.append(FindingsResult(plan, None, None, [], error=failed[name]))
            continue
        plan, seconds = plans[name]
        results.append(judge(plan, answers[plan.run], seconds))
    return results

"""Clock skew: a server under libfaketime, ahead and behind, declaring another host.

The service runs with libfaketime preloaded (wall clock shifted, monotonic
clock left alone, so the instrumentation's monotonic deltas stay exact) and
``host.name`` set to another host: exactly what a server on a machine with a
wrong clock looks like. An unskewed twin (libfaketime preloaded with no shift, on the client's host)
runs the same load, interleaved.
The estimated offset must hold the injected skew within its reported
uncertainty (and the acceptance tolerance), and the corrected one-way phases
must match the twin's raw ones, which share the client's clock.
"""

from __future__ import annotations

import time
from pathlib import Path

from harness.ground_truth.checks import ScenarioResult, check, p50, p50s, tolerance_us
from harness.ground_truth.delay import SMALL_PAYLOAD, offset_of
from harness.ground_truth.pipeline import Pipeline
from harness.ground_truth.profile import Profile

SKEWS_S = {"server_ahead_40ms": 0.040, "server_behind_30ms": -0.030}


def clock_skew(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    result = ScenarioResult("clock_skew", profile.name)
    for case, skew_s in SKEWS_S.items():
        pipeline = Pipeline(workdir / case / "store")
        with (
            pipeline,
            pipeline.service("--workers", "2", skew_s=0.0) as plain,
            pipeline.service("--workers", "2", skew_s=skew_s) as skewed,
        ):
            for _ in range(profile.rounds):
                for target, run_id in ((plain.target, "plain"), (skewed.target, "skewed")):
                    pipeline.load(
                        target,
                        run_id,
                        "--calls",
                        str(profile.calls),
                        "--concurrency",
                        "1",
                        *SMALL_PAYLOAD,
                    )
        bodies = pipeline.reports(["plain", "skewed"])
        plain_body, skewed_body = bodies["plain"], bodies["skewed"]
        offset = offset_of(skewed_body)
        result.observations[f"offset_{case}"] = offset
        result.phases[f"{case}_plain"] = p50s(plain_body)
        result.phases[f"{case}_skewed"] = p50s(skewed_body)
        truth_us = skew_s * 1e6
        result.checks.append(
            check(
                result.name,
                case,
                f"clock skew {truth_us:+,.0f} us",
                "clock offset (within reported uncertainty)",
                truth_us,
                offset["offset_us"],
                offset["uncertainty_us"],
            )
        )
        result.checks.append(
            check(
                result.name,
                case,
                f"clock skew {truth_us:+,.0f} us",
                "clock offset",
                truth_us,
                offset["offset_us"],
            )
        )
        for phase in ("request_network", "response_network"):
            # The truth is the unskewed twin's raw phase (one clock with the client).
            truth = p50(plain_body, phase)
            result.checks.append(
                check(
                    result.name,
                    case,
                    "one-way network time (no skew)",
                    f"{phase}_corrected",
                    truth,
                    p50(skewed_body, f"{phase}_corrected"),
                    tolerance_us(truth),
                )
            )
    result.seconds = time.monotonic() - started
    return result

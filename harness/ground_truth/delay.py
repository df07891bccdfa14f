"""One-way delay per direction (toxiproxy latency toxics), on one host and across a skew.

Scenarios:

* ``one_way_delay``: delay on the request path only, then on the response path
  only. The report must put each in its own network phase and leave the other
  direction alone (not spread it evenly).
* ``asymmetric_delay``: both at once, more on the request path, client and
  server on one host: one clock, so the split must be exact.
* ``skew_with_asymmetric_delay``: the same asymmetric delay to a server whose
  clock is skewed and which declares another host. The offset estimate must
  hold the true skew within its uncertainty and the *sum* of the two network
  phases must match (the skew cancels in it); the split cannot be recovered,
  since an asymmetry of (up - down) is indistinguishable from a clock offset
  of (up - down) / 2: the corrected phases each get about the mean.

Truth comes from ``calibration``: each case's toxics are also set on a second
proxy to a raw-TCP echo server, probed between the gRPC runs.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.ground_truth.calibration import EchoServer, OneWay, probe
from harness.ground_truth.checks import ScenarioResult, check, p50, p50s, tolerance_us
from harness.ground_truth.pipeline import SKEWED_HOST, Pipeline
from harness.ground_truth.profile import Profile
from harness.ground_truth.toxiproxy import Toxiproxy

SMALL_PAYLOAD = ("--entities", "20", "--features", "8")
BASELINE = "none"


def latency(up_ms: int = 0, down_ms: int = 0) -> dict[str, dict[str, int]]:
    toxics = {}
    if up_ms:
        toxics["latency:upstream"] = {"latency": up_ms, "jitter": 0}
    if down_ms:
        toxics["latency:downstream"] = {"latency": down_ms, "jitter": 0}
    return toxics


@dataclass(frozen=True)
class Case:
    toxics: dict[str, dict[str, int]]
    skew_s: float | None = None  # the server of this case runs under libfaketime, shifted
    host: str = SKEWED_HOST  # ... and declares this host.name (when skewed)


def delay_runs(
    name: str, workdir: Path, profile: Profile, cases: dict[str, Case]
) -> tuple[dict[str, dict[str, Any]], dict[str, OneWay]]:
    """Run every case in interleaved rounds (one server per distinct skew, each behind its
    own proxy); return each case's report and its calibrated one-way times."""
    probes: dict[str, list[OneWay]] = {case: [] for case in cases}
    runs = {case: f"{name}-{case}" for case in cases}
    pipeline = Pipeline(workdir / "store")
    with ExitStack() as stack:
        toxiproxy = stack.enter_context(Toxiproxy())
        echo = stack.enter_context(EchoServer())
        stack.enter_context(pipeline)
        proxies = {}
        for key in {(case.skew_s, case.host): None for case in cases.values()}:
            skew_s, host = key
            service = stack.enter_context(
                pipeline.service("--workers", "2", skew_s=skew_s, host=host)
            )
            proxies[key] = toxiproxy.proxy(service.target)
        probe_proxy = toxiproxy.proxy(echo.address)
        for _ in range(profile.rounds):
            for case_name, case in cases.items():
                grpc_proxy = proxies[(case.skew_s, case.host)]
                for proxy in (grpc_proxy, probe_proxy):
                    toxiproxy.set_toxics(proxy, case.toxics)
                probes[case_name].append(probe(probe_proxy.listen, profile.probes))
                pipeline.load(
                    grpc_proxy.listen,
                    runs[case_name],
                    "--calls",
                    str(profile.calls),
                    "--concurrency",
                    "1",
                    *SMALL_PAYLOAD,
                )
                toxiproxy.clear_toxics(grpc_proxy)
    bodies = pipeline.reports(list(runs.values()))
    calibrated = {
        case: OneWay(
            sum(p.upstream_us for p in found) / len(found),
            sum(p.downstream_us for p in found) / len(found),
        )
        for case, found in probes.items()
    }
    return {case: bodies[run] for case, run in runs.items()}, calibrated


def _injected(calibrated: dict[str, OneWay], case: str) -> tuple[float, float]:
    base, this = calibrated[BASELINE], calibrated[case]
    return this.upstream_us - base.upstream_us, this.downstream_us - base.downstream_us


def _result(name: str, profile: Profile, bodies: dict, calibrated: dict) -> ScenarioResult:
    result = ScenarioResult(name, profile.name)
    result.phases = {case: p50s(body) for case, body in bodies.items()}
    result.observations["calibrated_one_way_us"] = {
        case: {"upstream": round(c.upstream_us, 1), "downstream": round(c.downstream_us, 1)}
        for case, c in calibrated.items()
    }
    return result


def _delta(bodies: dict, case: str, phase: str) -> float:
    return p50(bodies[case], phase) - p50(bodies[BASELINE], phase)


def one_way_delay(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    cases = {
        BASELINE: Case({}),
        "request_path": Case(latency(up_ms=8)),
        "response_path": Case(latency(down_ms=4)),
    }
    bodies, calibrated = delay_runs("one_way_delay", workdir, profile, cases)
    result = _result("one_way_delay", profile, bodies, calibrated)
    for case, own, other in (
        ("request_path", "request_network", "response_network"),
        ("response_path", "response_network", "request_network"),
    ):
        up, down = _injected(calibrated, case)
        injected, leaked = (up, down) if own == "request_network" else (down, up)
        result.checks.append(
            check(result.name, case, "one-way delay", own, injected, _delta(bodies, case, own))
        )
        # The other direction got no toxic (the proxy itself then forwards ~0.1-0.2 ms slower,
        # which the probe measures too): it must not absorb a share of the delay, as an even
        # split would; tolerance: 10 % of the delay, at least 200 us.
        result.checks.append(
            check(
                result.name,
                case,
                "no toxic (other direction)",
                other,
                leaked,
                _delta(bodies, case, other),
                tolerance_us(injected),
            )
        )
    result.seconds = time.monotonic() - started
    return result


def asymmetric_delay(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    cases = {BASELINE: Case({}), "asymmetric": Case(latency(up_ms=8, down_ms=2))}
    bodies, calibrated = delay_runs("asymmetric_delay", workdir, profile, cases)
    result = _result("asymmetric_delay", profile, bodies, calibrated)
    up, down = _injected(calibrated, "asymmetric")
    for phase, injected in (("request_network", up), ("response_network", down)):
        result.checks.append(
            check(
                result.name,
                "asymmetric",
                "one-way delay (one host)",
                phase,
                injected,
                _delta(bodies, "asymmetric", phase),
            )
        )
    result.seconds = time.monotonic() - started
    return result


def offset_of(body: dict[str, Any]) -> dict[str, Any]:
    found = [o for o in body["clock_offsets"] if o["server_host"] == SKEWED_HOST]
    if len(found) != 1:
        raise RuntimeError(f"expected one clock offset to {SKEWED_HOST}: {body['clock_offsets']}")
    return found[0]


def skew_with_asymmetric_delay(workdir: Path, profile: Profile) -> ScenarioResult:
    started = time.monotonic()
    skew_s, up_ms, down_ms = 0.030, 8, 2
    # The skewed server is reached ONLY through the asymmetric path: any call to it over a
    # symmetric path in the same window would pin the offset down (minimum round trip wins)
    # and make the split recoverable. The baseline is a twin server with libfaketime
    # preloaded but no shift (the preload itself costs gRPC core a little, in the network
    # phases), on the client's host, behind a proxy without toxics.
    cases = {
        BASELINE: Case({}, 0.0),
        "asymmetric": Case(latency(up_ms, down_ms), skew_s),
    }
    bodies, calibrated = delay_runs("skew_delay", workdir, profile, cases)
    name = "skew_with_asymmetric_delay"
    result = _result(name, profile, bodies, calibrated)
    up, down = _injected(calibrated, "asymmetric")
    truth_us = skew_s * 1e6
    offset = offset_of(bodies["asymmetric"])
    result.observations["offset"] = offset
    # The estimate's guarantee: the true offset lies within +- uncertainty (about half the
    # round trip, here more than the (up - down) / 2 the asymmetry biases the estimate by).
    result.checks.append(
        check(
            name,
            "asymmetric",
            f"clock skew {truth_us:+,.0f} us",
            "clock offset (within reported uncertainty)",
            truth_us,
            offset["offset_us"],
            offset["uncertainty_us"],
        )
    )
    # Raw one-way phases carry +skew and -skew; their sum is exact whatever the clocks do.
    total = _delta(bodies, "asymmetric", "request_network") + _delta(
        bodies, "asymmetric", "response_network"
    )
    result.checks.append(
        check(
            name,
            "asymmetric",
            "delay up + down",
            "request_network + response_network",
            up + down,
            total,
        )
    )
    split = (
        "path asymmetry and clock offset are indistinguishable without a shared clock: "
        f"the offset absorbs (up - down) / 2 = {(up - down) / 2:,.0f} us, so each corrected "
        "direction gets about (up + down) / 2"
    )
    for phase, injected in (("request_network", up), ("response_network", down)):
        corrected = _delta(bodies, "asymmetric", f"{phase}_corrected")
        result.checks.append(
            check(
                name,
                "asymmetric",
                "one-way delay (skewed host)",
                f"{phase}_corrected",
                injected,
                corrected,
                limit=split,
            )
        )
    result.seconds = time.monotonic() - started
    return result

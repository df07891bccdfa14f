"""Injected vs measured: one ``Check`` per injected quantity, and a scenario's result.

A check compares what the harness injected (calibrated without gRPC or the
analyzer, see ``calibration``) with what the analyzer's report says, at p50.
The acceptance tolerance is 10 % of the injected amount or 200 µs, whichever
is larger (``tolerance_us``). A check with a ``limit`` is one the report
*cannot* pass because of what grpcio exposes (or, for a one-way split under an
unknown clock offset, because no method can): the harness still measures it,
says which limit and by how much, and a companion check covers what *is*
recoverable (e.g. the sum of the two directions).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

FLOOR_US = 200.0
RELATIVE = 0.10
METHOD = "Predict"


def tolerance_us(injected_us: float, floor_us: float = FLOOR_US) -> float:
    return max(RELATIVE * abs(injected_us), floor_us)


@dataclass
class Check:
    scenario: str
    case: str
    quantity: str  # what was injected, in words
    phase: str  # where the report must put it
    injected_us: float
    measured_us: float
    tolerance_us: float
    limit: str = ""  # why this one cannot be recovered (empty: it must be)

    @property
    def error_us(self) -> float:
        return self.measured_us - self.injected_us

    @property
    def within(self) -> bool:
        return abs(self.error_us) <= self.tolerance_us

    @property
    def ok(self) -> bool:
        """Passes, or is a documented limit (which the result lists separately)."""
        return self.within or bool(self.limit)

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {
            "error_us": round(self.error_us, 1),
            "within_tolerance": self.within,
            "injected_us": round(self.injected_us, 1),
            "measured_us": round(self.measured_us, 1),
            "tolerance_us": round(self.tolerance_us, 1),
        }

    def describe(self) -> str:
        verdict = "ok" if self.within else ("LIMIT" if self.limit else "FAIL")
        return (
            f"[{verdict}] {self.scenario}/{self.case}: {self.quantity} -> {self.phase}: "
            f"injected {self.injected_us:,.0f} us, measured {self.measured_us:,.0f} us "
            f"(error {self.error_us:+,.0f}, tolerance {self.tolerance_us:,.0f})"
            + (f"; limit: {self.limit}" if self.limit and not self.within else "")
        )


def check(
    scenario: str,
    case: str,
    quantity: str,
    phase: str,
    injected_us: float,
    measured_us: float,
    tolerance: float | None = None,
    limit: str = "",
) -> Check:
    """A Check with the acceptance tolerance unless ``tolerance`` is given."""
    if tolerance is None:
        tolerance = tolerance_us(injected_us)
    return Check(scenario, case, quantity, phase, injected_us, measured_us, tolerance, limit)


@dataclass
class ScenarioResult:
    name: str
    profile: str  # "reduced" (make test) or "full" (make bench)
    checks: list[Check] = field(default_factory=list)
    phases: dict[str, dict[str, float | None]] = field(default_factory=dict)  # case -> p50s
    observations: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: When it ran and the load then (``date``, ``load_average_1m_at_start``): a merged
    #: partial run's table says so per scenario.
    run: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    @property
    def limits(self) -> list[Check]:
        return [c for c in self.checks if c.limit and not c.within]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "profile": self.profile,
            "seconds": round(self.seconds, 1),
            "checks": [c.to_json() for c in self.checks],
            "phases_p50_us": self.phases,
            "observations": self.observations,
            "notes": self.notes,
        }

    def describe(self) -> str:
        lines = [f"== {self.name} ({self.profile}, {self.seconds:.0f} s)"]
        lines += [c.describe() for c in self.checks]
        lines += [f"   note: {note}" for note in self.notes]
        return "\n".join(lines)


class MissingMeasurement(RuntimeError):
    """A run's report lacks what a check reads (a method's calls, a phase's p50): the run
    measured nothing to judge, which a scenario's test counts as a missed attempt."""


def method(body: dict[str, Any], name: str = METHOD) -> dict[str, Any]:
    found = [m for m in body["methods"] if m["method"] == name]
    if not found:
        raise MissingMeasurement(f"the report has no {name} calls: {body}")
    return found[0]


def p50(body: dict[str, Any], phase: str) -> float:
    value = method(body)["phases"][phase]["p50_us"]
    if value is None:
        raise MissingMeasurement(f"the report has no {phase} p50: {method(body)['phases'][phase]}")
    return float(value)


def defined(body: dict[str, Any], phase: str) -> bool:
    """Whether any call of the method measured ``phase`` (optional phases may not)."""
    return method(body)["phases"][phase]["mean_us"] is not None


def mean(body: dict[str, Any], phase: str) -> float:
    return float(method(body)["phases"][phase]["mean_us"])


def p50s(body: dict[str, Any]) -> dict[str, float | None]:
    return {
        phase: (None if v["p50_us"] is None else round(v["p50_us"], 1))
        for phase, v in method(body)["phases"].items()
    }

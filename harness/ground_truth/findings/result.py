"""What a findings scenario injected and measured (``Plan``), and how it is judged.

A scenario plays its traffic twice over, interleaved round by round: with the
cause and without it (the same service, load and path, the cause removed the
way its finding's action says). The *measured* saving is the client's own
latency with the cause minus without it (the load generator's clock, never
spans), at the quantile the finding's saving is about. ``judge`` then reads
the findings of the cause's run and checks:

(a) the injected kind is the top finding (for the method the scenario called);
(b) its ``saving_us`` at that quantile is within 30 % of the measured saving;
(c) a healthy scenario (no cause) has no finding with confidence above low.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

#: (b): the estimate may miss the measured saving by this share of it.
SAVING_TOLERANCE = 0.30
METHOD = "Predict"
#: ``Plan.ranks_below`` for a kind whose saving is 0 by definition (clock_uncertain).
ANY_KIND = ("*",)


@dataclass
class Plan:
    """What a scenario's traffic did: the run to read findings of, and the truth."""

    name: str
    kind: str | None  # the kind injected; None: a healthy scenario
    run: str  # the run id whose findings are judged (the cause's)
    injected: str  # the cause, in words
    measured_saving_us: float = 0.0  # cause minus cure, client clock, at ``quantile``
    quantile: str = "p50"
    cure: str = ""  # how the rerun removed the cause
    method: str = METHOD
    #: Why the estimate is a lower bound, not within tolerance (empty: it must be within):
    #: it must then be above 0 and at most the measured saving + the tolerance.
    limit: str = ""
    #: Kinds the cause necessarily brings along that may rank above it, with a larger saving
    #: of their own (compression pays only on a narrow path: slow_upload ranks first there).
    ranks_below: tuple[str, ...] = ()
    observations: dict[str, Any] = field(default_factory=dict)


@dataclass
class FindingsResult:
    plan: Plan
    top: dict[str, Any] | None  # the first finding, summarised
    found: dict[str, Any] | None  # the injected kind's finding (top or not), summarised
    others: list[dict[str, Any]]  # every finding, summarised, in rank order
    seconds: float = 0.0
    error: str = ""  # the scenario failed to run (a traceback's last line)
    #: Why the analyzer found no injected kind (its ``checked`` reasons), for the failure's text.
    not_found: list[str] = field(default_factory=list)
    #: Earlier attempts' descriptions, where a scenario was played again (the test's retry).
    earlier: list[str] = field(default_factory=list)

    @property
    def estimated_saving_us(self) -> float | None:
        return None if self.found is None else self.found["saving_us"][self.plan.quantile]

    @property
    def top_is_injected(self) -> bool:
        if self.plan.kind is None:
            return True
        for finding in self.others:
            if finding["kind"] == self.plan.kind and finding["method"] == self.plan.method:
                return True
            if finding["kind"] not in self.plan.ranks_below and self.plan.ranks_below != ANY_KIND:
                return False
        return False

    @property
    def saving_error(self) -> float | None:
        """(estimate - measured) / measured; None without an estimate or a healthy run."""
        estimate = self.estimated_saving_us
        if self.plan.kind is None or estimate is None or not self.plan.measured_saving_us:
            return None
        return (estimate - self.plan.measured_saving_us) / abs(self.plan.measured_saving_us)

    @property
    def saving_within(self) -> bool:
        if self.plan.kind is None:
            return True
        estimate, measured = self.estimated_saving_us, self.plan.measured_saving_us
        if estimate is None:
            return False
        tolerance = SAVING_TOLERANCE * max(abs(measured), 1.0)
        if self.plan.limit:  # a lower bound
            return 0 < estimate <= measured + tolerance
        return abs(estimate - measured) <= tolerance

    @property
    def healthy_quiet(self) -> bool:
        """(c): nothing above low confidence in a run with no cause."""
        return self.plan.kind is not None or all(f["confidence"] == "low" for f in self.others)

    @property
    def ok(self) -> bool:
        return not self.error and self.top_is_injected and self.saving_within and self.healthy_quiet

    def describe(self) -> str:
        plan = self.plan
        if self.error:
            return f"{plan.name}: FAILED TO RUN: {self.error}"
        lines = [f"{plan.name}: injected {plan.injected} (cure: {plan.cure or '-'})"]
        lines.append(f"  top finding: {_short(self.top)}; injected kind: {_short(self.found)}")
        lines.extend(f"  checked: {reason}" for reason in self.not_found)
        if plan.kind is not None:
            lines.append(
                f"  saving {plan.quantile}: estimated {self.estimated_saving_us} us, measured "
                f"{plan.measured_saving_us:,.0f} us (error {_percent(self.saving_error)}), "
                f"{'ok' if self.saving_within else 'FAIL'}"
            )
            if plan.limit:
                lines.append(f"  a lower bound: {plan.limit}")
        for finding in self.others[1:]:
            lines.append(f"  also: {_short(finding)}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": asdict(self.plan),
            "top": self.top,
            "found": self.found,
            "findings": self.others,
            "estimated_saving_us": self.estimated_saving_us,
            "saving_error": None if self.saving_error is None else round(self.saving_error, 3),
            "top_is_injected": self.top_is_injected,
            "saving_within": self.saving_within,
            "healthy_quiet": self.healthy_quiet,
            "ok": self.ok,
            "seconds": round(self.seconds, 1),
            "error": self.error,
        }


def summarise(finding: dict[str, Any]) -> dict[str, Any]:
    keys = ("kind", "method", "instance", "phases", "calls", "saving_us", "confidence")
    return {key: finding[key] for key in keys}


def judge(plan: Plan, answer: dict[str, Any], seconds: float = 0.0) -> FindingsResult:
    """The scenario's result from the findings JSON of its cause's run."""
    found = [summarise(f) for f in answer.get("findings", [])]
    injected = next(
        (f for f in found if f["kind"] == plan.kind and f["method"] == plan.method), None
    )
    not_found = [
        str(entry.get("why_not", entry))
        for entry in answer.get("checked", [])
        if isinstance(entry, dict) and entry.get("kind") == plan.kind
    ]
    return FindingsResult(
        plan, found[0] if found else None, injected, found, seconds, "", not_found
    )


def _short(finding: dict[str, Any] | None) -> str:
    if finding is None:
        return "none"
    saving = finding["saving_us"]
    where = f" on {finding['instance']}" if finding.get("instance") else ""
    return (
        f"{finding['kind']} {finding['method']}{where} (saving p50 {saving['p50']:,.0f} / p99 "
        f"{saving['p99']:,.0f} us, {finding['confidence']}, {finding['calls']} calls)"
    )


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"

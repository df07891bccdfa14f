"""What a finding is, how sure we are of it, and the JSON contract it becomes.

A finding is a cause the calls show, with the time removing it would save
(``saving_us`` at p50 and p99) and how that was estimated. Its ``confidence``
follows from two things only, the number of calls behind it and the spread of
its estimate, measured the same way for every kind (``Spread``): the calls are
cut into ``SUBSETS`` disjoint subsets by trace id, the estimate is computed on
each, and the standard error of the whole-sample estimate is the subsets'
standard deviation over the square root of their number (batch means). That
works for any estimate the kinds make (a quantile, a fitted slope, a
difference between instances), where an order-statistic interval would only
cover quantiles, and it is computed inside the same query as the estimate
(ClickHouse's ``-Resample`` combinator), so there is no second pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: How many disjoint subsets of the calls (``cityHash64(trace_id) % SUBSETS``) give the
#: spread of an estimate.
SUBSETS = 10
#: The subset of a call, in the columns of ``grpc_call_phases``.
SUBSET = f"cityHash64(trace_id) % {SUBSETS}"

HIGH, MEDIUM, LOW = "high", "medium", "low"
#: (confidence, at least this many calls, at most this relative half-width of the 95 %
#: interval): the first that holds wins, else ``LOW``.
CONFIDENCE_RULES: tuple[tuple[str, int, float], ...] = ((HIGH, 200, 0.2), (MEDIUM, 50, 0.5))


@dataclass(frozen=True)
class Spread:
    """An estimate and its value on each subset of the calls: the estimate's uncertainty."""

    estimate: float
    by_subset: Sequence[float] = ()

    @property
    def standard_error(self) -> float:
        """Batch means: the subsets' standard deviation / sqrt(subsets); inf with < 3."""
        values = [v for v in self.by_subset if v is not None and math.isfinite(v)]
        if len(values) < 3:
            return math.inf
        mean = sum(values) / len(values)
        variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
        return math.sqrt(variance / len(values))

    @property
    def relative_half_width(self) -> float:
        """Half the 95 % interval over the estimate (inf for an estimate of 0)."""
        if self.estimate <= 0:
            return math.inf
        return 1.96 * self.standard_error / self.estimate


def confidence(calls: int, spread: Spread | None) -> str:
    """``high``/``medium``/``low`` from the calls behind a finding and its estimate's spread
    (``CONFIDENCE_RULES``); without a spread, from the calls alone."""
    width = spread.relative_half_width if spread is not None else 0.0
    for level, min_calls, max_width in CONFIDENCE_RULES:
        if calls >= min_calls and width <= max_width:
            return level
    return LOW


@dataclass(frozen=True)
class Finding:
    """One ranked piece of advice (the JSON contract's fields), plus the query behind it.

    ``sql`` reads ``grpc_call_phases`` and reproduces ``evidence``'s numbers for this
    finding's method with ``parameters`` bound (``{service:String}`` ...): what a
    "show the query" button shows. It is not part of the JSON contract.
    """

    kind: str
    service: str
    method: str
    instance: str | None
    phases: tuple[str, ...]
    calls: int
    evidence: dict[str, Any]
    saving_p50_us: float
    saving_p99_us: float
    saving_basis: str
    confidence: str
    action: str
    verify: str
    sql: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "service": self.service,
            "method": self.method,
            "instance": self.instance,
            "phases": list(self.phases),
            "calls": self.calls,
            "evidence": _plain(self.evidence),
            "saving_us": {"p50": _round(self.saving_p50_us), "p99": _round(self.saving_p99_us)},
            "saving_basis": self.saving_basis,
            "confidence": self.confidence,
            "action": self.action,
            "verify": self.verify,
        }

    @property
    def rank(self) -> tuple[float, float]:
        """The contract's order, descending: by saving at p50, ties by p99."""
        return (self.saving_p50_us, self.saving_p99_us)


@dataclass(frozen=True)
class Checked:
    """A kind that was looked for and not found, with the number that says why not."""

    kind: str
    why_not: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "why_not": self.why_not}


@dataclass(frozen=True)
class Findings:
    """The answer: findings ranked (``Finding.rank``, descending), then the kinds checked."""

    findings: list[Finding]
    checked: list[Checked]

    def to_json(self) -> dict[str, Any]:
        """``{"findings": [...], "checked": [...]}``: the contract, ready for ``json.dumps``."""
        return {
            "findings": [finding.to_json() for finding in self.findings],
            "checked": [entry.to_json() for entry in self.checked],
        }


def ranked(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda finding: finding.rank, reverse=True)


def _round(value: float) -> float:
    return round(float(value), 1) if math.isfinite(value) else 0.0


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars as Python numbers, floats to 3 decimals, NaN as None."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, float):
        return round(value, 3) if math.isfinite(value) else None
    return value


def fmt_us(value: float) -> str:
    """A duration as a reader scans it: 1,234 µs."""
    return f"{value:,.0f} µs" if math.isfinite(value) else "n/a"


def fmt_share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``, one decimal."""
    return f"{100 * part / whole:.1f} %" if whole > 0 and math.isfinite(part) else "n/a"


def method_name(service: str, method: str) -> str:
    return f"{service}/{method}"

"""Head sampling decided on the hot path with integer arithmetic only.

Mirrors the SDK's ``ParentBased(TraceIdRatioBased(ratio))`` semantics (the same
trace-id bound, so a call sampled here is sampled by any SDK that sees the same
trace id) without allocating a SamplingResult per call. Configured through the
standard ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` variables.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

_LOGGER = logging.getLogger(__name__)
_TRACE_ID_LIMIT = (1 << 64) - 1

_RATIO_SAMPLERS = {"traceidratio", "parentbased_traceidratio"}
_KNOWN_SAMPLERS = {
    "always_on",
    "always_off",
    "parentbased_always_on",
    "parentbased_always_off",
    *_RATIO_SAMPLERS,
}


@dataclass(frozen=True)
class Sampling:
    """ratio applies to calls without a sampled/unsampled parent (roots); parent_based
    makes a parent's decision (from traceparent or the active span) win."""

    ratio: float = 1.0
    parent_based: bool = True

    @property
    def bound(self) -> int:
        return round(self.ratio * (_TRACE_ID_LIMIT + 1))

    @classmethod
    def from_environment(cls) -> Sampling:
        name = os.environ.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
        if name not in _KNOWN_SAMPLERS:
            _LOGGER.warning(
                "OTEL_TRACES_SAMPLER=%r is not supported by grpc-overhead; using "
                "parentbased_always_on (supported: %s)",
                name,
                ", ".join(sorted(_KNOWN_SAMPLERS)),
            )
            name = "parentbased_always_on"
        parent_based = name.startswith("parentbased_")
        if name.endswith("always_on"):
            return cls(1.0, parent_based)
        if name.endswith("always_off"):
            return cls(0.0, parent_based)
        raw = os.environ.get("OTEL_TRACES_SAMPLER_ARG", "1.0")
        try:
            ratio = float(raw)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            _LOGGER.warning("OTEL_TRACES_SAMPLER_ARG=%r is not a ratio in [0, 1]; using 1.0", raw)
            ratio = 1.0
        return cls(ratio, parent_based)


class Sampler:
    """The per-call decision, kept to two integer comparisons."""

    __slots__ = ("_bound", "_parent_based")

    def __init__(self, sampling: Sampling) -> None:
        self._bound = sampling.bound
        self._parent_based = sampling.parent_based

    def should_sample(self, trace_id: int, parent_sampled: bool | None) -> bool:
        if parent_sampled is not None and self._parent_based:
            return parent_sampled
        return (trace_id & _TRACE_ID_LIMIT) < self._bound

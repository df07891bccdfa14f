"""Which calls become spans, decided with integer arithmetic on the hot path.

Head sampling mirrors the SDK's ``ParentBased(TraceIdRatioBased(ratio))`` semantics
(the same trace-id bound, so a call sampled here is sampled by any SDK that sees the
same trace id) without allocating a SamplingResult per call. Configured through
``GRPC_OVERHEAD_SAMPLING`` (``always``, ``head``, ``tail``) with
``GRPC_OVERHEAD_SAMPLING_RATE``, or else the standard ``OTEL_TRACES_SAMPLER`` /
``OTEL_TRACES_SAMPLER_ARG`` variables.

Tail-aware sampling (``tail``) records every call and decides when it ends
(``tail_sampling.TailSampler``): the sampler here then says yes to every call at its
start, and the W3C sampled flag a call carries on is the base decision (its trace id
under the rate) or its parent's, so a downstream service keeps what its caller keeps.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from grpc_overhead.instrumentation.environment import (
    SAMPLING,
    SAMPLING_RATE,
    SAMPLING_RATE_DEFAULT,
    SLOW_MS,
    environment_number,
)
from grpc_overhead.instrumentation.tail_sampling import TRACE_ID_LIMIT, TailSampler

_LOGGER = logging.getLogger(__name__)

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
    #: Decide at the end of each call (``GRPC_OVERHEAD_SAMPLING=tail``); ``ratio`` is
    #: then the base probability, ``slow_ns`` the fixed threshold (0: adaptive).
    tail: bool = False
    slow_ns: int = 0

    @property
    def bound(self) -> int:
        return round(self.ratio * (TRACE_ID_LIMIT + 1))

    @classmethod
    def from_environment(cls) -> Sampling:
        mode = os.environ.get(SAMPLING, "").strip().lower()
        if mode:
            chosen = cls._from_mode(mode)
            if chosen is not None:
                return chosen
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

    @classmethod
    def _from_mode(cls, mode: str) -> Sampling | None:
        """``GRPC_OVERHEAD_SAMPLING``'s choice, or None (with a warning) for an unknown one."""
        if mode == "always":
            return cls(1.0, True)
        if mode not in ("head", "tail"):
            _LOGGER.warning(
                "%s=%r is not one of always, head, tail; OTEL_TRACES_SAMPLER decides",
                SAMPLING,
                mode,
            )
            return None
        rate = environment_number(SAMPLING_RATE, SAMPLING_RATE_DEFAULT, 0.0, 1.0)
        if mode == "head":
            return cls(rate, True)
        slow_ms = environment_number(SLOW_MS, 0.0, 0.0, float("inf"))
        return cls(rate, True, tail=True, slow_ns=int(slow_ms * 1_000_000))


class Sampler:
    """The per-call decision, kept to two integer comparisons.

    ``tail`` is the end-of-call decision under tail-aware sampling (None otherwise);
    ``head_weight`` what a head-sampled span stands for (1 / ratio; 0 when every call is
    kept, and then no weight is written)."""

    __slots__ = ("_bound", "_parent_based", "head_weight", "tail")

    def __init__(self, sampling: Sampling) -> None:
        self.tail = TailSampler(sampling.ratio, sampling.slow_ns) if sampling.tail else None
        # Tail: every call is recorded; the decision comes at its end.
        self._bound = TRACE_ID_LIMIT + 1 if sampling.tail else sampling.bound
        self._parent_based = sampling.parent_based and not sampling.tail
        ratio = sampling.ratio
        self.head_weight = 1.0 / ratio if 0.0 < ratio < 1.0 and not sampling.tail else 0.0

    def should_sample(self, trace_id: int, parent_sampled: bool | None) -> bool:
        if parent_sampled is not None and self._parent_based:
            return parent_sampled
        return (trace_id & TRACE_ID_LIMIT) < self._bound

"""Tail-aware sampling: every call is timed, and whether it becomes a span is decided when
it ends, so the slow and the failed ones are kept at the price of sampling.

A call is kept, with the weight it stands for (the inverse of the probability it was
kept with; ``vocabulary.SAMPLING_WEIGHT``), when, in this order:

* it failed (a non-OK status, or abandoned): weight 1;
* it was at least as slow as the threshold on this side: weight 1. The threshold is
  ``GRPC_OVERHEAD_SLOW_MS``, or adaptive: the method's running p95 on this side, from a
  histogram of durations kept per method (``_Method``); until a method has seen
  ``WARMUP_CALLS`` calls every call is kept (reason ``warmup``, weight 1);
* its trace id falls under the base rate (``GRPC_OVERHEAD_SAMPLING_RATE``): weight
  1 / rate. Both halves take this decision from the same trace id, so they agree;
* (client) the server kept it: the server decides on its residence time when it writes
  its trailer and says so there (``vocabulary.KEPT_TRAILER``, its weight as the value),
  so a call slow at the server keeps both halves, weighted as the server kept it;
* the caller's traceparent asked (sampled flag) and nothing above applied: weight 1 (the
  caller's probability is not known here).

What a one-sided keep yields: a call slow only as the client saw it (the network, the
client's own waits) keeps its client half alone; the server half is dropped by design,
and the client half still carries the server's residence time (its trailer), which
splits the call into the server's share and the rest. Each half says why it was kept
(``vocabulary.SAMPLING_REASON``), so the analyzer can tell a half dropped by design from
one lost on the way. A call's weight is the smallest of its halves' weights: a call is
certain to be stored (weight 1) as soon as one half was kept for sure.

Unbiased: whether a call is kept depends on its own duration and status and on the
threshold built from earlier calls, never on a coin shared with other calls, so the
weights (Horvitz-Thompson) estimate counts, sums and quantiles of all calls.

The hot path's cost per call: one dictionary lookup, a bit length and two list updates;
the threshold is recomputed every ``RECOMPUTE_EVERY`` calls of a method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grpc_overhead.instrumentation.vocabulary import ABANDONED

if TYPE_CHECKING:
    from grpc_overhead.instrumentation.records import CallRecord

#: The low 64 bits of a trace id are what a trace-id ratio compares (W3C: random).
TRACE_ID_LIMIT = (1 << 64) - 1
SLOW_QUANTILE = 0.95
#: Calls of a method seen before its adaptive threshold is trusted; all kept until then.
WARMUP_CALLS = 100
#: Calls of a method between two computations of its threshold.
RECOMPUTE_EVERY = 64
#: When a method's histogram holds this many calls, every count is halved: the
#: threshold follows a service whose latency changes within a few thousand calls.
HALVE_AT = 8192
_BUCKETS = 256


def bucket(duration_ns: int) -> int:
    """The histogram bucket of a duration: exact below 8 ns, then four per octave
    (each ~19 % wide at most), so the p95 is known within a quarter of an octave."""
    if duration_ns < 8:
        return max(duration_ns, 0)
    bits = duration_ns.bit_length()
    return (bits - 2) * 4 + ((duration_ns >> (bits - 3)) & 3)


def bucket_floor(index: int) -> int:
    """The shortest duration in bucket ``index`` (``bucket``'s inverse)."""
    if index < 8:
        return index
    bits, sub = index // 4 + 2, index % 4
    return (4 + sub) << (bits - 3)


class _Method:
    """One method's durations on this side: counts per bucket and the current threshold."""

    __slots__ = ("counts", "since", "threshold", "total")

    def __init__(self) -> None:
        self.counts = [0] * _BUCKETS
        self.total = 0
        self.since = 0
        self.threshold = 0  # 0: still warming up

    def observe(self, duration_ns: int) -> int:
        """Count one call; the threshold the call is judged against (0 = warming up)."""
        self.counts[bucket(duration_ns)] += 1
        self.total += 1
        self.since += 1
        if self.since >= RECOMPUTE_EVERY and self.total >= WARMUP_CALLS:
            self.since = 0
            self.threshold = self._quantile_floor(SLOW_QUANTILE)
            if self.total >= HALVE_AT:
                self.counts = [count >> 1 for count in self.counts]
                self.total = sum(self.counts)
        return self.threshold

    def _quantile_floor(self, quantile: float) -> int:
        """The lower bound of the bucket holding ``quantile``: calls from there up are
        "slow" (a little more than 1 - quantile of them, as a bucket is ~19 % wide)."""
        above = self.total * (1.0 - quantile)
        seen = 0
        for index in range(_BUCKETS - 1, -1, -1):
            seen += self.counts[index]
            if seen > above:
                return max(bucket_floor(index), 1)
        return 1


class TailSampler:
    """The end-of-call decision for one server or channel (see the module)."""

    __slots__ = ("_bound", "_methods", "base_weight", "slow_ns")

    def __init__(self, rate: float, slow_ns: int = 0) -> None:
        self._bound = round(rate * (TRACE_ID_LIMIT + 1))
        self.base_weight = 1.0 / rate if rate > 0 else 0.0
        self.slow_ns = slow_ns
        self._methods: dict[str, _Method] = {}

    def flag(self, trace_id: int, parent_sampled: bool | None) -> bool:
        """The sampled flag to pass on: the base decision, or the parent's request."""
        return bool(parent_sampled) or (trace_id & TRACE_ID_LIMIT) < self._bound

    def threshold(self, method: str, duration_ns: int) -> int:
        """Count the call; the slow threshold it is judged by (0 = not known yet)."""
        if self.slow_ns:
            return self.slow_ns
        state = self._methods.get(method)
        if state is None:
            state = self._methods[method] = _Method()
        return state.observe(duration_ns)

    def decide(self, record: CallRecord, duration_ns: int) -> bool:
        """Whether ``record`` becomes a span; if so its weight and reason are set on it.
        ``record.sampling_reason`` is "" for a call decided and dropped."""
        threshold = self.threshold(record.method, duration_ns)
        in_base = (record.trace_id & TRACE_ID_LIMIT) < self._bound
        weight, reason = 1.0, ""
        if record.status_code != 0 or (record.attributes and ABANDONED in record.attributes):
            reason = "failed"
        elif threshold == 0:
            reason = "warmup"
        elif duration_ns >= threshold:
            reason = "slow"
        elif in_base or record.peer_weight:
            # Kept if either side's trace-id bound held (nested bounds: the larger rate's),
            # so the smaller weight; the server's weight when it alone kept the call.
            weight, reason = self.base_weight, "base"
            if not in_base or 0 < record.peer_weight < weight:
                weight, reason = record.peer_weight, "server"
        elif record.parent_sampled:
            reason = "parent"
        record.sampling_reason = reason
        if not reason:
            return False
        record.sampling_weight = weight
        return True

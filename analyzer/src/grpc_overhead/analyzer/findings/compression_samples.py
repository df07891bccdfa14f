"""What our instrumentation's sampled messages measured of compression, per method,
direction and algorithm (``compressibility.by_method``): the ratio and the CPU per MB
that ``compression``'s findings price the path's bytes against.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from grpc_overhead.analyzer.sample_columns import column, size_column

#: A ratio is never taken below this (a division by it prices the path).
MIN_RATIO = 1e-3


def sample_aggregates(direction: str, algorithm: str) -> list[str]:
    """Over ``grpc_call_phases`` only (the engine reads samples through ``by_method``, which
    merges only sampled calls): the sampled messages' medians, for a finding's ``sql``."""
    measures = [
        (name, column(direction, algorithm, name))
        for name in ("ratio", "compress_ns_per_mb", "decompress_ns_per_mb")
    ]
    ratio = measures[0][1]
    out = [f"countIf({ratio} >= 0) AS samples"]
    out += [
        f"quantileExactInclusiveIf(0.5)(toFloat64({x}), {x} >= 0) AS {n}_p50" for n, x in measures
    ]
    size = size_column(direction)
    return [
        *out,
        f"quantileExactInclusiveIf(0.5)(toFloat64({size}), {size} >= 0) AS sample_bytes_p50",
    ]


@dataclass(frozen=True)
class Sample:
    """What the sampled messages of one method, direction and algorithm measured."""

    algorithm: str
    samples: int
    ratio: float
    ratio_min: float
    ratio_max: float
    compress_ns_per_mb: float
    decompress_ns_per_mb: float
    bytes_p50: float

    @property
    def kept(self) -> float:
        """The share of bytes still sent: gRPC core sends a message that grew as it is."""
        return min(max(self.ratio, MIN_RATIO), 1.0)

    @property
    def cpu_us_per_mb(self) -> float:
        """Compress on the sender, plus decompress on the receiver where it was compressed."""
        decompress = self.decompress_ns_per_mb if self.ratio < 1 else 0.0
        return (self.compress_ns_per_mb + decompress) / 1000


#: Sampled messages by (service, method, direction, algorithm).
Samples = dict[tuple[str, str, str, str], Sample]


def samples_by_key(frame: pd.DataFrame) -> Samples:
    """``compressibility.by_method``'s rows keyed by (service, method, direction, algorithm)."""
    return {
        (row.service, row.method, row.direction, row.algorithm): Sample(
            row.algorithm,
            int(row.samples),
            float(row.ratio_p50),
            float(row.ratio_min),
            float(row.ratio_max),
            float(row.compress_ns_per_mb_p50),
            float(row.decompress_ns_per_mb_p50),
            float(row.message_bytes_p50),
        )
        for row in frame.itertuples(index=False)
    }

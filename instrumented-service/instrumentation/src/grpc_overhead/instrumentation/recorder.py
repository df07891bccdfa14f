"""Per server or channel settings read by the hot path: pipeline, sampler, compression.

One ``Recorder`` is created when a server or channel is instrumented, so the
per-call code reads a few attributes instead of consulting the environment.
"""

from __future__ import annotations

import os
import random
import sys

import grpc

from grpc_overhead.instrumentation import coexistence
from grpc_overhead.instrumentation.compressibility import Sampler as CompressibilitySampler
from grpc_overhead.instrumentation.environment import (
    COMPRESSED_SIZE_EVERY,
    RESIDENCE_TRAILER,
    RUN_ID,
    TIMING_DEADLINE_S,
)
from grpc_overhead.instrumentation.pipeline import SpanPipeline, default_pipeline
from grpc_overhead.instrumentation.sampling import Sampler, Sampling
from grpc_overhead.instrumentation.vocabulary import RESOURCE_INSTANCE_ID

_COMPRESSION_NAMES = {
    grpc.Compression.NoCompression: None,
    grpc.Compression.Deflate: "deflate",
    grpc.Compression.Gzip: "gzip",
}

new_span_id = random.getrandbits
"""new_span_id(64) / new_span_id(128): C-implemented, GIL-atomic, no allocation beyond the int."""


def compression_name(compression: grpc.Compression | None) -> str | None:
    """The grpc-encoding name of a call or channel compression setting (None = identity)."""
    if compression is None:
        return None
    return _COMPRESSION_NAMES.get(compression)


def _environment_flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off", "")


def _environment_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    try:
        return int(raw) if raw is not None else default
    except ValueError:
        return default


def _timing_deadline() -> float | None:
    """The deadline given to client calls that have none (opt-in; see environment.py)."""
    raw = os.environ.get(TIMING_DEADLINE_S, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        return None
    return value if value > 0 else None


def _other_grpc_instrumentation() -> bool:
    """Whether opentelemetry-instrumentation-grpc is loaded (instrumented or used by hand):
    only then may another span describe our calls (coexistence.py)."""
    return "opentelemetry.instrumentation.grpc" in sys.modules


class Recorder:
    __slots__ = (
        "_compressed_size_counter",
        "compressed_size_every",
        "compressibility",
        "compression",
        "folding",
        "instance_id",
        "pipeline",
        "residence_trailer",
        "run_id",
        "sampler",
        "timing_deadline_s",
    )

    def __init__(
        self,
        pipeline: SpanPipeline | None = None,
        compression: grpc.Compression | None = None,
        sampling: Sampling | None = None,
    ) -> None:
        self.pipeline = pipeline or default_pipeline()
        self.sampler = Sampler(sampling or self.pipeline.sampling)
        self.compression = compression_name(compression)
        self.residence_trailer = _environment_flag(RESIDENCE_TRAILER, True)
        self.compressed_size_every = max(0, _environment_int(COMPRESSED_SIZE_EVERY, 16))
        self._compressed_size_counter = 0
        # None when sampling is off, so the hot path's check is one comparison with None.
        compressibility = CompressibilitySampler()
        self.compressibility = compressibility if compressibility.interval_ns else None
        self.timing_deadline_s = _timing_deadline()
        # Every span of this process carries it, unless a call brings its own (a client's).
        self.run_id = os.environ.get(RUN_ID, "").strip() or None
        self.folding = _other_grpc_instrumentation() and coexistence.install()
        # What a server that drops its half under tail-aware sampling names itself as.
        self.instance_id = str(self.pipeline.resource.attributes.get(RESOURCE_INSTANCE_ID, ""))

    def keep_for_compressed_size(self) -> bool:
        """True for every Nth compressed message: its exact compressed size is measured
        off the hot path by re-compressing it the way gRPC core does."""
        every = self.compressed_size_every
        if not every:
            return False
        self._compressed_size_counter += 1
        return self._compressed_size_counter % every == 1 or every == 1

"""Measured compressibility of a few sent messages: the data under the compression findings.

"Compression would help" and "compression costs more" are guesses unless the
ratio and the CPU cost come from the service's own messages. So each process
keeps, per method, at most one sent message every ``GRPC_OVERHEAD_COMPRESSIBILITY_INTERVAL_S``
seconds (the client samples requests, the server responses: the sender is who
would compress), and measures it where spans are built (spans.py, otlp.py), on
the export worker, never on the call's thread.

The hot path (``CallRecord.outbound``) does one dictionary lookup and an integer
comparison per message; a sampled message costs it one reference to the bytes
it serialized anyway. Measuring compresses at most ``GRPC_OVERHEAD_COMPRESSIBILITY_MAX_BYTES``
(a prefix of larger messages) with every algorithm gRPC Python offers (gzip,
deflate: zlib at the level gRPC core uses; grpcio 1.85 has no zstd, see
``ALGORITHMS``), then decompresses it, timed in the worker thread's CPU time.
Failures are counted (``Sampler.failed``), never raised.
"""

from __future__ import annotations

import logging
import time
import zlib
from typing import Any

import grpc

from grpc_overhead.instrumentation.environment import (
    COMPRESSIBILITY_INTERVAL_S,
    COMPRESSIBILITY_MAX_BYTES,
    environment_number,
)
from grpc_overhead.instrumentation.vocabulary import (
    COMPRESSIBILITY_DIRECTION,
    COMPRESSIBILITY_MEASURED_BYTES,
    COMPRESSIBILITY_MEASURES,
    COMPRESSIBILITY_MESSAGE_BYTES,
    compressibility_key,
)

_LOGGER = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
#: A prefix this long estimates ratio and cost per MB well, and bounds a sample of a
#: large, incompressible message to about 11 ms of CPU (1 MiB: 45 ms; see
#: docs/notes/issue-22-compress.md).
DEFAULT_MAX_BYTES = 256 * 1024
#: Distinct methods a sampler remembers: a client calling unbounded method names
#: stops sampling new ones rather than growing without bound.
MAX_METHODS = 1024
#: Samples the whole process keeps per interval, over every method, channel and server:
#: what bounds the measuring CPU when a service has many methods (at the default cap, a
#: 256 KiB incompressible sample costs about 13 ms: 16 of them per 5 s is 4 % of a core
#: at worst). A method that finds the budget spent waits for its next interval.
MAX_SAMPLES_PER_INTERVAL = 16
#: [start of the current budget window (monotonic ns), samples kept in it]: shared.
_budget = [0, 0]
#: gRPC core compresses with zlib's defaults: level Z_DEFAULT_COMPRESSION (6), 15 window
#: bits, +16 for the gzip wrapper (grpc/src/core/lib/compression/message_compress.cc).
WINDOW_BITS = {"gzip": 31, "deflate": 15}
#: The algorithms gRPC Python can negotiate, measured for each sample. grpc.Compression
#: has NoCompression, Deflate and Gzip in grpcio 1.85 (checked: no zstd member, so no
#: zstd here; adding one takes a compressor and the analyzer's columns too).
ALGORITHMS: tuple[str, ...] = tuple(
    name for name in ("gzip", "deflate") if hasattr(grpc.Compression, name.capitalize())
)
#: Every attribute a sample may carry (the wire encoder's fast path must not repeat one).
ATTRIBUTE_KEYS: tuple[str, ...] = (
    COMPRESSIBILITY_DIRECTION,
    COMPRESSIBILITY_MESSAGE_BYTES,
    COMPRESSIBILITY_MEASURED_BYTES,
    *(compressibility_key(a, m) for a in ALGORITHMS for m in COMPRESSIBILITY_MEASURES),
)
#: Timing a small message once measures the timer; repeat it until this many bytes
#: (or ``_MAX_REPEATS`` rounds) went through, so ns per MB is the steady cost.
_MIN_TIMED_BYTES = 64 * 1024
_MAX_REPEATS = 64
_NS_PER_MB = 1_000_000  # bytes per MB: cost per MB = ns * 1e6 / bytes


class Sampler:
    """Which sent messages are measured: one per method per interval, per process side.

    ``next_at`` maps a method to the monotonic ns from which its next message may be
    kept; the hot path reads it directly (see ``CallRecord.outbound``). Threads that
    race past one due time may keep two messages: harmless, still bounded.
    """

    __slots__ = ("failed", "interval_ns", "max_bytes", "measured", "next_at", "skipped")

    def __init__(self, interval_s: float | None = None, max_bytes: int | None = None) -> None:
        if interval_s is None:
            interval_s = environment_number(COMPRESSIBILITY_INTERVAL_S, DEFAULT_INTERVAL_S)
        if max_bytes is None:
            max_bytes = int(environment_number(COMPRESSIBILITY_MAX_BYTES, DEFAULT_MAX_BYTES))
        #: 0 = never sample (the hot path's check then fails first).
        self.interval_ns = int(interval_s * 1_000_000_000) if max_bytes > 0 else 0
        self.max_bytes = max_bytes
        self.next_at: dict[str, int] = {}
        self.measured = 0
        self.failed = 0
        self.skipped = 0  # due, but the process's budget for the interval was spent

    def keep(self, method: str, now_ns: int) -> bool:
        """Called when ``now_ns >= next_at.get(method, 0)``: claim the slot (bounded)."""
        next_at = self.next_at
        if method not in next_at and len(next_at) >= MAX_METHODS:
            return False
        next_at[method] = now_ns + self.interval_ns
        if now_ns - _budget[0] >= self.interval_ns:
            _budget[0], _budget[1] = now_ns, 0
        if _budget[1] >= MAX_SAMPLES_PER_INTERVAL:
            self.skipped += 1
            return False
        _budget[1] += 1
        return True


def _timed(function: Any, data: Any, size: int) -> tuple[Any, int]:
    """(function(data), CPU ns per MB of ``size`` input bytes), repeated for small inputs."""
    repeats = max(1, min(_MAX_REPEATS, -(-_MIN_TIMED_BYTES // max(size, 1))))
    clock = time.thread_time_ns
    started = clock()
    for _ in range(repeats):
        result = function(data)
    elapsed = clock() - started
    return result, elapsed * _NS_PER_MB // (size * repeats)


def _compress(algorithm: str) -> Any:
    bits = WINDOW_BITS[algorithm]

    def compress(data: Any) -> bytes:
        compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, bits)
        return compressor.compress(data) + compressor.flush()

    return compress


def _decompress(algorithm: str) -> Any:
    bits = WINDOW_BITS[algorithm]
    return lambda data: zlib.decompress(data, bits)


_CODECS = {algorithm: (_compress(algorithm), _decompress(algorithm)) for algorithm in ALGORITHMS}


def measure(payload: Any, direction: str, max_bytes: int) -> dict[str, Any]:
    """The span attributes of one sampled message (names: vocabulary.py).

    Ratio = compressed / measured bytes (what gRPC core would send, before its
    "send the smaller" rule: a ratio above 1 says compressing makes it bigger).
    """
    size = len(payload)
    view = memoryview(payload)[:max_bytes] if size > max_bytes else payload
    measured = len(view)
    attributes: dict[str, Any] = {
        COMPRESSIBILITY_DIRECTION: direction,
        COMPRESSIBILITY_MESSAGE_BYTES: size,
        COMPRESSIBILITY_MEASURED_BYTES: measured,
    }
    if not measured:
        return attributes
    for algorithm, (compress, decompress) in _CODECS.items():
        compressed, compress_ns = _timed(compress, view, measured)
        _, decompress_ns = _timed(decompress, compressed, measured)
        attributes[compressibility_key(algorithm, "ratio")] = len(compressed) / measured
        attributes[compressibility_key(algorithm, "compress_ns_per_mb")] = compress_ns
        attributes[compressibility_key(algorithm, "decompress_ns_per_mb")] = decompress_ns
    return attributes


def sample_attributes(record: Any) -> dict[str, Any] | None:
    """The record's sample, measured on first use (None when it kept none or measuring
    failed). ``record.compress_sample`` holds the kept bytes, then their attributes, so
    a span rendered twice (SDK builder and wire encoder) measures once."""
    sample = record.compress_sample
    if sample is None or type(sample) is dict:
        return sample
    sampler = record.recorder.compressibility
    try:
        attributes = measure(sample, "request" if record.client else "response", sampler.max_bytes)
    except Exception:  # telemetry never fails the export: counted and logged
        sampler.failed += 1
        record.compress_sample = None
        _LOGGER.debug("could not measure a message's compressibility", exc_info=True)
        return None
    sampler.measured += 1
    record.compress_sample = attributes
    return attributes

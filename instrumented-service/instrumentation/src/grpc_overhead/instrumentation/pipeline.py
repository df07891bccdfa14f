"""Call records -> spans -> exporter, off the hot path, with a bounded queue.

Shaped like the SDK's BatchSpanProcessor (and named like the collector's
stages): ``submit`` is the receiver, the worker thread is the processor that
turns integer records into ``ReadableSpan`` objects, and any SDK
``SpanExporter`` (OTLP by default, the in-memory one in tests) is the exporter.

Telemetry never hurts the host: ``submit`` never blocks and never raises; when
the queue is full the call is dropped and counted (``dropped_calls``), and
export failures are logged and counted (``failed_spans``).
"""

from __future__ import annotations

import atexit
import collections
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY
from opentelemetry.instrumentation.utils import suppress_instrumentation
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from grpc_overhead.instrumentation import clock
from grpc_overhead.instrumentation.environment import (
    EXPORT_BATCH_SIZE,
    EXPORT_INTERVAL_DEFAULT_MS,
    EXPORT_INTERVAL_MS,
    MAX_QUEUE_SIZE,
    environment_number,
)
from grpc_overhead.instrumentation.resource import process_resource
from grpc_overhead.instrumentation.sampling import Sampling
from grpc_overhead.instrumentation.spans import SpanBuilder

if TYPE_CHECKING:
    from grpc_overhead.instrumentation.records import CallRecord

_LOGGER = logging.getLogger(__name__)
_REANCHOR_INTERVAL_S = 30.0
#: Records an encoding exporter is handed at a time (its batches stay export_batch_size).
_ENCODE_CHUNK = 64
_live_pipelines: weakref.WeakSet[SpanPipeline] = weakref.WeakSet()


def _environment_int(name: str, default: int, minimum: int = 1) -> int:
    return int(environment_number(name, default, minimum))


class SpanPipeline:
    def __init__(
        self,
        exporter: SpanExporter | None = None,
        resource: Resource | None = None,
        sampling: Sampling | None = None,
        max_queue_size: int | None = None,
        export_batch_size: int | None = None,
        export_interval_ms: int | None = None,
    ) -> None:
        self.resource = resource or process_resource()
        if exporter is None:
            from grpc_overhead.instrumentation.otlp import CallRecordOTLPExporter

            # The exporter's own channel must never be instrumented (a feedback loop).
            with suppress_instrumentation():
                exporter = CallRecordOTLPExporter()
        if getattr(exporter, "accepts_call_records", False):
            exporter.set_resource(self.resource)
            self._accepts_records = True
        else:
            self._accepts_records = False
        # An exporter that encodes records one by one gets them early, a chunk at a time
        # (see _encode_early), and sends the encoded spans in batches as before.
        self._encode = getattr(exporter, "encode_spans", None) if self._accepts_records else None
        self.exporter = exporter
        self.sampling = sampling or Sampling.from_environment()
        self.max_queue_size = max_queue_size or _environment_int(MAX_QUEUE_SIZE, 8192)
        self.export_batch_size = export_batch_size or _environment_int(EXPORT_BATCH_SIZE, 512)
        interval_ms = export_interval_ms or _environment_int(
            EXPORT_INTERVAL_MS, EXPORT_INTERVAL_DEFAULT_MS
        )
        self.export_interval_s = interval_ms / 1000.0
        self.dropped_calls = 0
        self.exported_spans = 0
        self.failed_spans = 0
        self._queue: collections.deque[CallRecord] = collections.deque()
        self._wake_at = (
            min(_ENCODE_CHUNK, self.export_batch_size) if self._encode else (self.export_batch_size)
        )
        self._encoded: list[bytes] = []  # encoded spans not sent yet
        self._sent_at = time.monotonic()  # a queued record waits at most the interval from here
        self._flush_requested = False
        self._wake = threading.Event()
        self._idle = threading.Condition()
        self._in_flight = 0
        self._stopped = False
        self._builder = SpanBuilder(self.resource)
        self._worker = threading.Thread(target=self._run, name="grpc-overhead-export", daemon=True)
        self._worker.start()
        _live_pipelines.add(self)

    # -- hot path -------------------------------------------------------------------------
    def submit(self, record: CallRecord) -> None:
        queue = self._queue
        if self._stopped or len(queue) >= self.max_queue_size:
            self.dropped_calls += 1
            return
        queue.append(record)
        if len(queue) == self._wake_at:
            self._wake.set()

    # -- worker ---------------------------------------------------------------------------
    def _run(self) -> None:
        # Calls the exporter makes from this thread are telemetry, not traffic.
        otel_context.attach(otel_context.set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
        last_anchor = time.monotonic()
        while True:
            timeout = self.export_interval_s
            if self._encoded:  # every record queued since the last send leaves by then
                timeout = max(0.0, self._sent_at + timeout - time.monotonic())
            self._wake.wait(timeout)
            self._wake.clear()
            if time.monotonic() - last_anchor > _REANCHOR_INTERVAL_S or clock.stepped():
                clock.reanchor()
                last_anchor = time.monotonic()
            if self._encode is None:
                self._drain()
            else:
                self._encode_early()
            if self._stopped and not self._queue and not self._encoded:
                return

    def _encode_early(self) -> None:
        """Encode queued records now; send when a batch is full, an interval passed since
        the last send (no record waits longer than the interval, as before), or a flush
        asks. A record then lives milliseconds instead of up to a batch's filling time: it
        is encoded while still in the CPU's caches, and few records survive into the
        garbage collector's older generations (measured: gen-0 collections that each
        traverse hundreds of queued records, and gen-1/gen-2 ones)."""
        queue = self._queue
        flush = self._flush_requested or self._stopped
        self._flush_requested = False
        while queue:
            with self._idle:  # taken and counted at once: a flush never sees them nowhere
                records = []
                try:
                    while len(records) < self.export_batch_size - len(self._encoded):
                        records.append(queue.popleft())
                except IndexError:
                    pass
                self._in_flight = len(records)
            try:
                self._encoded += self._encode(records)
            except Exception:
                _LOGGER.exception("grpc-overhead could not encode %d spans", len(records))
                self.failed_spans += len(records)
            finally:
                with self._idle:
                    self._in_flight = 0
            if len(self._encoded) >= self.export_batch_size:
                self._send_encoded()
        if self._encoded and (flush or time.monotonic() - self._sent_at >= self.export_interval_s):
            self._send_encoded()

    def _send_encoded(self) -> None:
        with self._idle:
            batch, self._encoded = self._encoded, []
            self._in_flight = len(batch)
        self._sent_at = time.monotonic()
        try:
            self._export(batch)
        finally:
            with self._idle:
                self._in_flight = 0
                self._idle.notify_all()

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            batch = []
            try:
                while len(batch) < self.export_batch_size:
                    batch.append(queue.popleft())
            except IndexError:
                pass
            with self._idle:
                self._in_flight = len(batch)
            try:
                self._export(batch)
            finally:
                with self._idle:
                    self._in_flight = 0
                    self._idle.notify_all()

    def _export(self, batch: list[Any]) -> None:
        """Records (or, from _encode_early, their encoded spans) -> the exporter."""
        try:
            spans = batch if self._accepts_records else [self._builder.build(r) for r in batch]
        except Exception:
            _LOGGER.exception("grpc-overhead could not build %d spans; dropping them", len(batch))
            self.failed_spans += len(batch)
            return
        try:
            result = self.exporter.export(spans)
        except Exception as error:
            if self._stopped:  # the exporter was shut down under a stuck export
                _LOGGER.warning("grpc-overhead: %d spans lost at shutdown (%s)", len(spans), error)
            else:
                _LOGGER.exception("grpc-overhead span export raised; %d spans lost", len(spans))
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported_spans += len(spans)
        else:
            self.failed_spans += len(spans)

    # -- control --------------------------------------------------------------------------
    def force_flush(self, timeout_s: float = 10.0) -> bool:
        """Export everything submitted so far; True when it all left within the timeout."""
        deadline = time.monotonic() + timeout_s
        self._flush_requested = True
        self._wake.set()
        with self._idle:
            while self._queue or self._in_flight or self._encoded:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._flush_requested = True
                self._wake.set()
                self._idle.wait(min(remaining, 0.05))
        return True

    def shutdown(self, timeout_s: float = 10.0) -> None:
        """Export what is queued, then stop. When the backend is down the exporter would
        keep retrying; shutting it down first makes it give up, so a process never hangs
        on exit because its collector is gone."""
        if self._stopped:
            return
        flushed = self.force_flush(timeout_s)
        self._stopped = True
        self._wake.set()
        if not flushed:
            self._shutdown_exporter()
        self._worker.join(timeout_s)
        if flushed:
            self._shutdown_exporter()
        if not flushed or self.queued_calls:
            _LOGGER.warning(
                "grpc-overhead stopped with spans not exported (%d calls still queued, "
                "%d failed): is the OTLP endpoint reachable?",
                self.queued_calls,
                self.failed_spans,
            )

    def _shutdown_exporter(self) -> None:
        try:
            self.exporter.shutdown()
        except Exception:
            _LOGGER.debug("exporter shutdown failed", exc_info=True)

    @property
    def queued_calls(self) -> int:
        return len(self._queue) + len(self._encoded)

    def delivery(self) -> dict[str, int]:
        """What became of the spans so far, the way a run's summary reports them:
        exported, failed (the exporter gave up), dropped (the queue was full; a call
        counts once here) and unsent (still queued)."""
        return {
            "exported": self.exported_spans,
            "failed": self.failed_spans,
            "dropped": self.dropped_calls,
            "unsent": self.queued_calls,
        }


_default_pipeline: SpanPipeline | None = None
_default_lock = threading.Lock()


def default_pipeline() -> SpanPipeline:
    """The process-wide pipeline: OTLP exporter configured by the standard OTEL_* variables."""
    global _default_pipeline
    with _default_lock:
        if _default_pipeline is None:
            _default_pipeline = SpanPipeline()
        return _default_pipeline


def set_default_pipeline(pipeline: SpanPipeline | None) -> None:
    global _default_pipeline
    with _default_lock:
        _default_pipeline = pipeline


@atexit.register
def _flush_at_exit() -> None:
    for pipeline in list(_live_pipelines):
        try:
            pipeline.shutdown(timeout_s=5.0)
        except Exception:
            pass

"""What the hot path writes: one ``CallRecord`` of integers per call, nothing else.

A record is filled by closures bound to one call (serializer, deserializer,
handler and executor wrappers), then handed to the pipeline exactly once when
the call ends. Spans are built from it later, on the export worker. A record
that is garbage-collected without having been finished (a stream abandoned by
its reader, a handler path grpcio ends without telling us) is still exported,
marked ``grpc_overhead.abandoned``, so no call silently disappears.
"""

from __future__ import annotations

import contextvars
import logging
from typing import TYPE_CHECKING, Any, Protocol

from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.vocabulary import (
    CLIENT_RECEIVED_RESPONSE,
    INBOUND_MESSAGE,
    INBOUND_MESSAGE_READ,
    OUTBOUND_MESSAGE,
    OUTBOUND_MESSAGE_SENT,
)

if TYPE_CHECKING:
    from grpc_overhead.instrumentation.compressibility import Sampler


class _Pipeline(Protocol):
    def submit(self, record: CallRecord) -> None: ...


class _CallSampler(Protocol):
    """What a record reads of ``sampling.Sampler``: its end-of-call decision, if any
    (``tail_sampling.TailSampler``, which reads records: named here, not imported)."""

    tail: Any
    head_weight: float


class Recorder(Protocol):
    """What a record asks of the ``recorder.Recorder`` that made it.

    Named here rather than imported, so that records stay the bottom of the
    import graph (recorder -> pipeline -> spans -> records).
    """

    compression: str | None
    compressibility: Sampler | None
    folding: bool
    run_id: str | None
    sampler: _CallSampler

    @property
    def pipeline(self) -> _Pipeline: ...

    def keep_for_compressed_size(self) -> bool: ...


#: The server call running in this context: set by the interceptors, read by the
#: executor wrapper (pool pickup) and by ``annotate_call``. Defined with the records
#: so that executor and server_calls both import it from below.
CURRENT_SERVER_CALL: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "grpc_overhead_server_call", default=None
)
#: The client call whose inner invocation is running in this context (set only while
#: another instrumentation may start a span inside ours: see coexistence.py).
CURRENT_CLIENT_CALL: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar(
    "grpc_overhead_client_call", default=None
)

_LOGGER = logging.getLogger(__name__)

# Event tuple layout: (name, monotonic ns, message id or 0, uncompressed size or -1,
#                      payload kept for an off-path compressed-size measurement or None)
Event = tuple[str, int, int, int, Any]

STATUS_OK = 0
STATUS_CANCELLED = 1
STATUS_UNKNOWN = 2


class CallRecord:
    __slots__ = (
        "attributes",
        "call_type",
        "client",
        "compress_sample",
        "compression",
        "connect_watch",
        "context",
        "deadline",
        "dispatch_ns",
        "end",
        "events",
        "exception",
        "finished",
        "flagged",
        "handler_started",
        "inbound_count",
        "lag_probe",
        "method",
        "outbound_count",
        "parent_is_remote",
        "parent_sampled",
        "parent_span_id",
        "peer",
        "peer_instance",
        "peer_weight",
        "predictions_made",
        "recorder",
        "residence_ns",
        "run_id",
        "sampling_reason",
        "sampling_weight",
        "span_id",
        "start",
        "status_code",
        "status_message",
        "trace_id",
    )

    def __init__(
        self,
        recorder: Recorder,
        client: bool,
        method: str,
        call_type: str,
        trace_id: int,
        span_id: int,
        parent_span_id: int,
        start: int,
    ) -> None:
        self.recorder = recorder
        self.client = client
        self.method = method
        self.call_type = call_type
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.parent_is_remote = not client
        self.start = start
        self.end = 0
        self.events: list[Event] = []
        self.status_code = STATUS_OK
        self.status_message: str | None = None
        self.exception: BaseException | None = None
        self.finished = False
        self.inbound_count = 0
        self.outbound_count = 0
        self.compression: str | None = recorder.compression
        self.peer: str | None = None
        self.attributes: dict[str, Any] | None = None
        self.residence_ns = -1
        self.run_id: str | None = None
        self.context: Any = None  # server: the ServicerContext, only until the trailer is set
        # The call's deadline on the monotonic clock (0 = none): the client's from its
        # timeout, the server's from gRPC core (see server_calls.read_deadline).
        self.deadline = 0
        # Server: when the servicer's own method was called (0 = not timed innermost:
        # servicers.py) and when predictionsMade was recorded (its mark, or its return).
        self.handler_started = 0
        self.predictions_made = 0
        # Client only: the channel's readiness when the call started (connect.py) and the
        # process's lag probe with the sample taken when the response arrived
        # (lag_probe.py); None / -1 where not measured.
        self.connect_watch: Any = None
        self.lag_probe: Any = None
        self.dispatch_ns = -1
        # A sent message kept for its compressibility, then its measured attributes
        # (compressibility.py); None when not sampled.
        self.compress_sample: Any = None
        # Sampling (sampling.py, tail_sampling.py): the sampled flag this call passes on
        # to the spans and calls it causes; the caller's flag (None: no caller's);
        # the weight the server's trailer kept the call with (client, tail-aware; 0 =
        # none); and the decision: what the span stands for (0 = no weight written)
        # and why it was kept (None: not decided yet; "": decided, dropped).
        self.flagged = True
        self.parent_sampled: bool | None = None
        self.peer_weight = 0.0
        self.peer_instance: str | None = None  # client: the server that dropped its half
        self.sampling_weight = 0.0
        self.sampling_reason: str | None = None

    def event(self, name: str, timestamp: int) -> None:
        self.events.append((name, timestamp, 0, -1, None))

    def outbound(self, started: int, sent: int, payload: bytes) -> None:
        self.outbound_count = message_id = self.outbound_count + 1
        keep = payload if self.compression and self.recorder.keep_for_compressed_size() else None
        sampler = self.recorder.compressibility
        if (
            sampler is not None
            and sent >= sampler.next_at.get(self.method, 0)  # one lookup, one comparison
            and self.compress_sample is None
            and sampler.keep(self.method, sent)
        ):
            self.compress_sample = payload  # a reference: measured off the hot path
        self.events.append((OUTBOUND_MESSAGE, started, message_id, -1, None))
        self.events.append((OUTBOUND_MESSAGE_SENT, sent, message_id, len(payload), keep))

    def inbound(self, started: int, read: int, size: int) -> None:
        self.inbound_count = message_id = self.inbound_count + 1
        self.events.append((INBOUND_MESSAGE, started, message_id, size, None))
        self.events.append((INBOUND_MESSAGE_READ, read, message_id, size, None))

    def received(self, started: int, read: int, size: int) -> None:
        """Client side of inbound: the response deserializer's entry is the first moment
        grpcio lets Python see that response bytes arrived."""
        self.inbound_count = message_id = self.inbound_count + 1
        if message_id == 1 and self.lag_probe is not None:
            probe = self.lag_probe
            self.dispatch_ns = probe.lag
            for event in self.events:  # the request's first message went to gRPC core
                if event[0] == OUTBOUND_MESSAGE_SENT:
                    probe.in_core = started - event[1] - self.dispatch_ns
                    break
        self.events.append((CLIENT_RECEIVED_RESPONSE, started, message_id, size, None))
        self.events.append((INBOUND_MESSAGE_READ, read, message_id, size, None))

    def fail(self, code: int, message: str | None, exception: BaseException | None = None) -> None:
        if self.status_code == STATUS_OK:
            self.status_code = code
            self.status_message = message
        if exception is not None and self.exception is None:
            self.exception = exception

    def finish(self, end: int = 0) -> None:
        """Hand the record to the pipeline; later calls are no-ops (first end wins)."""
        if self.finished:
            return
        self.finished = True
        self.end = end or now()
        self.context = None
        tail = self.recorder.sampler.tail
        if tail is not None and not (self.sampling_reason or self._decided(tail)):
            return  # tail-aware sampling left it out: no span
        self.recorder.pipeline.submit(self)

    def _decided(self, tail: Any) -> bool:
        """Under tail-aware sampling, whether the call is kept: decided now, or dropped
        already (a server decides when it writes its trailer) unless it failed since."""
        if self.sampling_reason is None or self.status_code != STATUS_OK:
            return tail.decide(self, self.end - self.start)
        return False

    def __del__(self) -> None:
        if self.finished:
            return
        try:
            if self.attributes is None:
                self.attributes = {}
            self.attributes["grpc_overhead.abandoned"] = True
            last = max((event[1] for event in self.events), default=self.start)
            self.finish(last)
        except Exception:  # never raise from a finalizer
            _LOGGER.debug("could not export an abandoned call record", exc_info=True)

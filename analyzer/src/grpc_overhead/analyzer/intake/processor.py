"""The batch processor: bounded memory, one thread per exporter, group commit.

Requests wait here (encoded, undecoded) until a free worker flushes them, by
size (``batch_bytes``) or age (``flush_interval``), through its exporter in
one batch. With two exporters (each on its own store session) two batches
are parsed and written at once: on chDB every statement runs in the engine
with the GIL released, and one batch alone leaves a core mostly idle (the
protobuf parse and the query analysis are single-threaded). Each submitter
then learns its own outcome, so the receiver answers a client only after
its spans are stored or refused: nothing is acknowledged and then lost.
Memory is bounded by ``max_pending_bytes``; past it ``submit`` refuses at
once and the receiver answers UNAVAILABLE, which makes the client (or the
collector's retry queue) back off and resend.

Refused means not stored. A request whose caller stops waiting (the
receiver's wait timed out) is ``withdraw``-n: if no worker has started
storing it, it never will be (a worker ``claim``-s its batch's requests right
before the statement that stores them, under the same lock). One that was
already being stored is stored. Every request is known by its digest while
it waits and for ``LATE_WINDOW_S`` after it was stored, so a retry of the
same bytes (its caller gave up, or never heard the answer) waits for, or
gets, that same outcome instead of storing the spans twice; the digests of
what was stored are also written to the store (``journal``) before anyone is
answered and loaded again on start, so this holds across a restart too.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from grpc_overhead.analyzer.errors import AnalyzerError, brief
from grpc_overhead.analyzer.intake import journal
from grpc_overhead.analyzer.intake.exporter import REJECTED_SPAN_MESSAGE, Exporter, RequestOutcome

log = logging.getLogger(__name__)


class Refused(Exception):
    """Not taken (buffer full, store failing, shutting down): the client should retry."""


class BufferFull(Refused):
    """Refused because the memory bound is reached: too much, too fast (HTTP 429)."""


class State(enum.Enum):
    QUEUED = "queued"
    TAKEN = "taken"  # in a worker's batch, not yet being stored
    STORING = "storing"  # claimed: the statement that stores it runs
    DONE = "done"
    WITHDRAWN = "withdrawn"  # its caller stopped waiting first: never stored


#: How long a stored request is remembered (its digest).
LATE_WINDOW_S = float(journal.WINDOW_S)
LATE_MAX_ENTRIES = 100_000


@dataclass
class Pending:
    data: bytes
    digest: bytes = b""
    done: threading.Event = field(default_factory=threading.Event)
    outcome: RequestOutcome | None = None
    failure: str = ""
    state: State = State.QUEUED

    def wait(self, timeout: float | None) -> RequestOutcome:
        """The outcome; Refused if the store failed. TimeoutError if not done in time."""
        if not self.done.wait(timeout):
            raise TimeoutError
        if self.outcome is None:
            raise Refused(self.failure or "store failed")
        return self.outcome


@dataclass
class BatchStats:
    batches: int = 0
    failed_batches: int = 0
    rows_inserted: int = 0
    #: Spans a request carried that the store had already (stored once, not again).
    duplicate_spans: int = 0
    last_error: str = ""
    last_flush_seconds: float = 0.0
    export_seconds: float = 0.0  # summed over workers: time spent in the exporters


class BatchProcessor:
    def __init__(
        self,
        exporters: Exporter | Sequence[Exporter],
        *,
        batch_bytes: int = 16 << 20,
        flush_interval: float = 0.05,
        max_pending_bytes: int = 128 << 20,
    ) -> None:
        if batch_bytes <= 0 or max_pending_bytes < batch_bytes or flush_interval <= 0:
            raise ValueError("need 0 < batch_bytes <= max_pending_bytes and flush_interval > 0")
        self.exporters = list(exporters) if isinstance(exporters, Sequence) else [exporters]
        if not self.exporters:
            raise ValueError("need at least one exporter")
        self.batch_bytes = batch_bytes
        self.flush_interval = flush_interval
        self.max_pending_bytes = max_pending_bytes
        self.stats = BatchStats()
        self._queue: deque[tuple[float, Pending]] = deque()
        self._pending_bytes = 0  # queued + in the batch being exported
        self._condition = threading.Condition()
        self._stopping = False
        #: Every request by digest: waiting, being stored, or stored (for LATE_WINDOW_S).
        self._known: OrderedDict[bytes, tuple[float, Pending]] = OrderedDict()
        self._workers = [
            threading.Thread(
                target=self._run, args=(exporter,), name=f"intake-batch-{index}", daemon=True
            )
            for index, exporter in enumerate(self.exporters)
        ]

    def start(self) -> None:
        """Load what an earlier process stored (``journal``), then start the workers."""
        first = self.exporters[0]
        now = time.monotonic()
        for digest, spans, rejected in journal.load(first.store, first.schema):
            error = REJECTED_SPAN_MESSAGE.format(rejected=rejected) if rejected else ""
            stored = Pending(b"", digest, outcome=RequestOutcome(spans, rejected, error))
            stored.state = State.DONE
            stored.done.set()
            self._known[digest] = (now + LATE_WINDOW_S, stored)
        for worker in self._workers:
            worker.start()

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def submit(self, data: bytes) -> Pending:
        pending = Pending(data, _digest(data))  # hashlib releases the GIL for large data
        with self._condition:
            earlier = self._remembered(pending.digest)
            if earlier is not None:  # a retry of a request stored (or being stored) already
                return earlier
            if self._stopping:
                raise Refused("intake is shutting down")
            if self._pending_bytes + len(data) > self.max_pending_bytes:
                raise BufferFull(
                    f"intake buffer full ({self._pending_bytes >> 20} MiB waiting): "
                    "the store is not keeping up"
                )
            self._queue.append((time.monotonic(), pending))
            self._known[pending.digest] = (time.monotonic() + LATE_WINDOW_S, pending)
            while len(self._known) > LATE_MAX_ENTRIES:
                self._known.popitem(last=False)
            self._pending_bytes += len(data)
            self._condition.notify()
        return pending

    def withdraw(self, pending: Pending) -> bool:
        """Give up on ``pending`` if it is not being stored yet; True if it never will be."""
        with self._condition:
            if pending.state is State.QUEUED:
                for index, (_, queued) in enumerate(self._queue):
                    if queued is pending:
                        del self._queue[index]
                        self._pending_bytes -= len(pending.data)
                        break
            if pending.state in (State.QUEUED, State.TAKEN):
                pending.state = State.WITHDRAWN
                self._forget(pending)
                return True
            return pending.state is State.WITHDRAWN

    def remember(self, pending: Pending) -> None:
        """``pending`` is (being) stored, but its caller may be gone before it hears so:
        keep it known for a full ``LATE_WINDOW_S`` from now, so a retry of the same bytes
        waits for this outcome (or gets it) instead of storing the spans a second time."""
        with self._condition:
            if pending.digest:
                self._known[pending.digest] = (time.monotonic() + LATE_WINDOW_S, pending)
                self._known.move_to_end(pending.digest)

    def _remembered(self, digest: bytes) -> Pending | None:
        """The known request with this digest, unless it failed or was withdrawn (lock held)."""
        now = time.monotonic()
        while self._known and next(iter(self._known.values()))[0] < now:
            self._known.popitem(last=False)
        found = self._known.get(digest)
        if found is None:
            return None
        pending = found[1]
        failed = pending.done.is_set() and pending.outcome is None
        if failed or pending.state is State.WITHDRAWN:  # never stored: store anew
            del self._known[digest]
            return None
        return pending

    def _forget(self, pending: Pending) -> None:
        """Drop a request that was not stored from the known ones (lock held)."""
        found = self._known.get(pending.digest)
        if found is not None and found[1] is pending:
            del self._known[pending.digest]

    def shutdown(self, timeout: float = 30.0) -> None:
        """Flush what is queued, then stop the worker."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            if worker.is_alive():
                worker.join(max(0.0, deadline - time.monotonic()))

    def _run(self, exporter: Exporter) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._export(exporter, batch)

    def _next_batch(self) -> list[Pending] | None:
        with self._condition:
            while True:
                if self._queue:
                    queued = self._pending_bytes
                    age = time.monotonic() - self._queue[0][0]
                    if self._stopping or queued >= self.batch_bytes or age >= self.flush_interval:
                        break
                    self._condition.wait(self.flush_interval - age)
                elif self._stopping:
                    return None
                else:
                    self._condition.wait()
            batch, size = [], 0
            while self._queue and (
                not batch or size + len(self._queue[0][1].data) <= self.batch_bytes
            ):
                _, pending = self._queue.popleft()
                pending.state = State.TAKEN
                batch.append(pending)
                size += len(pending.data)
            return batch

    def _claim(self, batch: list[Pending]) -> list[int]:
        """Mark the batch's requests whose callers still wait as being stored (see module).

        Idempotent: a second call (an exporter isolating a bad request) returns the same.
        """
        with self._condition:
            kept = []
            for index, pending in enumerate(batch):
                if pending.state in (State.TAKEN, State.STORING):
                    pending.state = State.STORING
                    kept.append(index)
            return kept

    def _export(self, exporter: Exporter, batch: list[Pending]) -> None:
        started = time.perf_counter()
        size = sum(len(pending.data) for pending in batch)
        try:
            outcomes = exporter.export(
                [pending.data for pending in batch], lambda: self._claim(batch)
            )
            stored = [
                (pending.digest, outcome.spans, outcome.rejected)
                for pending, outcome in zip(batch, outcomes, strict=True)
                if not outcome.malformed and not outcome.withdrawn
            ]
            try:  # before anyone is answered: a restart must know what was stored
                journal.record(exporter.store, exporter.schema, stored)
            except (AnalyzerError, OSError) as error:  # stored all the same: answer so
                log.warning("intake: stored requests not journaled: %s", brief(error))
        except (AnalyzerError, OSError) as error:
            self._fail(batch, brief(error))
        except Exception as error:  # a bug must not kill the worker
            log.exception("intake export failed")
            self._fail(batch, f"internal error: {brief(error)}")
        else:
            with self._condition:
                self.stats.batches += 1
                for outcome in outcomes:
                    if not outcome.malformed and not outcome.withdrawn:
                        self.stats.rows_inserted += outcome.accepted
                        self.stats.duplicate_spans += outcome.duplicates
                for pending, outcome in zip(batch, outcomes, strict=True):
                    if pending.state is not State.WITHDRAWN:
                        pending.state = State.DONE
                    if outcome.withdrawn:
                        self._forget(pending)
                    pending.outcome = outcome
                    pending.data = b""  # known by digest from now on
            for pending in batch:
                pending.done.set()
        finally:
            elapsed = time.perf_counter() - started
            with self._condition:
                self.stats.last_flush_seconds = elapsed
                self.stats.export_seconds += elapsed
                self._pending_bytes -= size

    def _fail(self, batch: list[Pending], message: str) -> None:
        with self._condition:
            self.stats.failed_batches += 1
            self.stats.last_error = message
            for pending in batch:
                if pending.state is not State.WITHDRAWN:
                    pending.state = State.DONE
                self._forget(pending)
        log.warning("intake: batch of %d requests not stored: %s", len(batch), message)
        for pending in batch:
            pending.failure = message
            pending.done.set()


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()

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
already being stored is stored; its digest is remembered (``remember``) for
``LATE_WINDOW_S``, so that the caller's retry of the same bytes, should the
caller give up first, waits for that same outcome instead of storing the
spans twice.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from grpc_overhead.analyzer.errors import AnalyzerError, brief
from grpc_overhead.analyzer.intake.exporter import Exporter, RequestOutcome

log = logging.getLogger(__name__)


class Refused(Exception):
    """Not taken (buffer full, store failing, shutting down): the client should retry."""


class State(enum.Enum):
    QUEUED = "queued"
    TAKEN = "taken"  # in a worker's batch, not yet being stored
    STORING = "storing"  # claimed: the statement that stores it runs
    DONE = "done"
    WITHDRAWN = "withdrawn"  # its caller stopped waiting first: never stored


#: How long a request stored after its caller gave up is remembered (its digest).
LATE_WINDOW_S = 600.0
LATE_MAX_ENTRIES = 100_000


@dataclass
class Pending:
    data: bytes
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
        self._late: OrderedDict[bytes, tuple[float, int, Pending]] = OrderedDict()
        self._late_lengths: Counter[int] = Counter()
        self._workers = [
            threading.Thread(
                target=self._run, args=(exporter,), name=f"intake-batch-{index}", daemon=True
            )
            for index, exporter in enumerate(self.exporters)
        ]

    def start(self) -> None:
        for worker in self._workers:
            worker.start()

    @property
    def pending_bytes(self) -> int:
        return self._pending_bytes

    def submit(self, data: bytes) -> Pending:
        pending = Pending(data)
        with self._condition:
            earlier = self._remembered(data)
            if earlier is not None:  # a retry of a request stored (or being stored) already
                return earlier
            if self._stopping:
                raise Refused("intake is shutting down")
            if self._pending_bytes + len(data) > self.max_pending_bytes:
                raise Refused(
                    f"intake buffer full ({self._pending_bytes >> 20} MiB waiting): "
                    "the store is not keeping up"
                )
            self._queue.append((time.monotonic(), pending))
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
                return True
            return pending.state is State.WITHDRAWN

    def remember(self, pending: Pending) -> None:
        """``pending`` is (being) stored, but its caller may be gone before it hears so:
        remember it, so a retry of the same bytes waits for this outcome (or gets it)
        instead of storing the spans a second time."""
        with self._condition:
            digest = _digest(pending.data)
            if digest not in self._late:
                self._late_lengths[len(pending.data)] += 1
            expiry = time.monotonic() + LATE_WINDOW_S
            self._late[digest] = (expiry, len(pending.data), pending)
            self._late.move_to_end(digest)
            while len(self._late) > LATE_MAX_ENTRIES:
                self._forget_oldest()

    def _remembered(self, data: bytes) -> Pending | None:
        """The remembered request with these bytes, unless it failed (lock held).

        Only requests of a remembered length are hashed, so the common case costs nothing.
        """
        now = time.monotonic()
        while self._late and next(iter(self._late.values()))[0] < now:
            self._forget_oldest()
        if not self._late_lengths.get(len(data)):
            return None
        digest = _digest(data)
        found = self._late.get(digest)
        if found is None:
            return None
        pending = found[2]
        if pending.done.is_set() and pending.outcome is None:  # it failed: store anew
            del self._late[digest]
            self._drop_length(found[1])
            return None
        return pending

    def _forget_oldest(self) -> None:
        _, (_, length, _) = self._late.popitem(last=False)
        self._drop_length(length)

    def _drop_length(self, length: int) -> None:
        self._late_lengths[length] -= 1
        if self._late_lengths[length] <= 0:
            del self._late_lengths[length]

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
        try:
            outcomes = exporter.export(
                [pending.data for pending in batch], lambda: self._claim(batch)
            )
        except (AnalyzerError, OSError) as error:
            self._fail(batch, brief(error))
        except Exception as error:  # a bug must not kill the worker
            log.exception("intake export failed")
            self._fail(batch, f"internal error: {brief(error)}")
        else:
            with self._condition:
                self.stats.batches += 1
                self.stats.rows_inserted += sum(
                    outcome.accepted
                    for outcome in outcomes
                    if not outcome.malformed and not outcome.withdrawn
                )
                for pending, outcome in zip(batch, outcomes, strict=True):
                    if pending.state is not State.WITHDRAWN:
                        pending.state = State.DONE
                    pending.outcome = outcome
            for pending in batch:
                pending.done.set()
        finally:
            elapsed = time.perf_counter() - started
            with self._condition:
                self.stats.last_flush_seconds = elapsed
                self.stats.export_seconds += elapsed
                self._pending_bytes -= sum(len(pending.data) for pending in batch)

    def _fail(self, batch: list[Pending], message: str) -> None:
        with self._condition:
            self.stats.failed_batches += 1
            self.stats.last_error = message
            for pending in batch:
                if pending.state is not State.WITHDRAWN:
                    pending.state = State.DONE
        log.warning("intake: batch of %d requests not stored: %s", len(batch), message)
        for pending in batch:
            pending.failure = message
            pending.done.set()


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()

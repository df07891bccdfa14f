"""The load generator's engine: channels, closed-loop and open-loop drivers.

Closed loop (``concurrency`` callers): each caller makes one call after the
other; caller ``w`` uses channel ``w % channels`` of the target chosen for the
call (targets are used round-robin by call number). Calls are numbered from one
shared counter, so ``--calls N`` makes exactly N calls whatever the concurrency.

Open loop (``rps``): a dispatcher draws exponential inter-arrival gaps (a
Poisson process of rate ``rps``) and hands each call to a pool of
``concurrency`` worker threads at its scheduled time, whether or not earlier
calls completed. When every worker is busy a call starts late; each call's
start lag (actual start - scheduled start) is recorded and calls later than
``late_threshold_ms`` are counted. At most ``16 x concurrency`` calls wait for a
worker; beyond that the dispatcher waits too (those calls are late as well).
Latency is measured from the call's actual start.

Every channel gets its own connection (``grpc.use_local_subchannel_pool``),
so ``--channels 4`` really means four HTTP/2 connections per target, and every
channel is connected before the clock starts.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np

from grpc_overhead.instrumentation import call_attributes, default_pipeline, instrument_channel
from grpc_overhead.load_generator.cpu_wait import ReaderWaits, own_run_delay_ns
from grpc_overhead.load_generator.rest_client import RestCallError, RestChannels
from grpc_overhead.load_generator.rest_client import shutdown as rest_shutdown
from grpc_overhead.load_generator.stats import Outcome, summarize
from grpc_overhead.load_generator.workload import METHODS, BadResponse, Workload, WorkloadSpec
from grpc_overhead.prediction.protos import prediction_pb2_grpc as pb_grpc

GRPC_COMPRESSION = {
    "none": grpc.Compression.NoCompression,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
}
APPLICATION_CODECS = ("zstd", "lz4", "snappy")
BACKLOG_PER_WORKER = 16


class ConnectError(Exception):
    """A target could not be reached (or its TLS handshake failed) in time."""


@dataclass
class LoadConfig:
    targets: list[str]
    run_id: str
    calls: int | None = 200
    duration_s: float | None = None
    concurrency: int = 8
    channels: int = 1
    rps: float | None = None
    workload: WorkloadSpec = field(default_factory=WorkloadSpec)
    grpc_compression: str = "none"
    tls: bool = False
    tls_ca: str | None = None
    tls_server_name: str | None = None
    timeout_s: float = 10.0
    connect_timeout_s: float = 5.0
    late_threshold_ms: float = 1.0
    max_message_mb: int = 64
    pipeline: Any = None  # a SpanPipeline; default_pipeline() when None

    def describe(self) -> dict[str, Any]:
        return {
            "targets": self.targets,
            "mode": self.workload.mode,
            "method": METHODS[self.workload.mode],
            "calls_limit": self.calls,
            "duration_limit_s": self.duration_s,
            "concurrency": self.concurrency,
            "channels": self.channels,
            "rps": self.rps,
            "grpc_compression": self.grpc_compression,
            "tls": self.tls,
            "timeout_s": self.timeout_s,
            "transport": self.workload.transport,
            "workload": asdict(self.workload),
        }


# --------------------------------------------------------------------------- channels


def _channel_options(config: LoadConfig) -> list[tuple[str, Any]]:
    size = config.max_message_mb * 1024 * 1024
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", size),
        ("grpc.max_send_message_length", size),
        ("grpc.use_local_subchannel_pool", 1),  # one connection per channel
    ]
    if config.tls_server_name:
        options.append(("grpc.ssl_target_name_override", config.tls_server_name))
    return options


def _credentials(config: LoadConfig) -> grpc.ChannelCredentials | None:
    if not config.tls:
        return None
    roots = Path(config.tls_ca).read_bytes() if config.tls_ca else None
    return grpc.ssl_channel_credentials(root_certificates=roots)


class Channels:
    """``channels`` instrumented channels per target, connected before use."""

    def __init__(self, config: LoadConfig, pipeline: Any) -> None:
        self.raw: list[list[grpc.Channel]] = []
        self.stubs: list[list[pb_grpc.PredictorStub]] = []
        credentials = _credentials(config)
        compression = GRPC_COMPRESSION[config.grpc_compression]
        options = _channel_options(config)
        for target in config.targets:
            raws, stubs = [], []
            for _ in range(config.channels):
                if credentials is None:
                    raw = grpc.insecure_channel(target, options, compression)
                else:
                    raw = grpc.secure_channel(target, credentials, options, compression)
                channel = instrument_channel(
                    raw,
                    target=target,
                    compression=compression if config.grpc_compression != "none" else None,
                    pipeline=pipeline,
                )
                raws.append(raw)
                stubs.append(pb_grpc.PredictorStub(channel))
            self.raw.append(raws)
            self.stubs.append(stubs)

    def wait_ready(self, config: LoadConfig) -> None:
        deadline = time.monotonic() + config.connect_timeout_s
        for target, raws in zip(config.targets, self.raw, strict=True):
            for raw in raws:
                future = grpc.channel_ready_future(raw)
                try:
                    future.result(timeout=max(0.0, deadline - time.monotonic()))
                except grpc.FutureTimeoutError:
                    future.cancel()
                    hint = (
                        " (TLS: is the server using TLS, and does --tls-ca hold its certificate?)"
                        if config.tls
                        else " (is `grpc-overhead service` running there, and without --tls?)"
                    )
                    raise ConnectError(
                        f"cannot connect to {target} within {config.connect_timeout_s:g} s" + hint
                    ) from None

    def close(self) -> None:
        for raws in self.raw:
            for raw in raws:
                with contextlib.suppress(Exception):
                    raw.close()


# --------------------------------------------------------------------------- run


class Run:
    """One load run; ``start()`` then poll ``progress()`` until ``done()``, then ``summary()``."""

    def __init__(self, config: LoadConfig) -> None:
        self.config = config
        self.pipeline = config.pipeline if config.pipeline is not None else default_pipeline()
        self.workload = Workload(config.workload)
        self.stop = threading.Event()
        self._outcomes: list[Outcome] = []
        self._outcomes_lock = threading.Lock()
        self._ended: list[threading.Event] = []  # one per thread: see ``join``
        self._reader_waits = ReaderWaits()
        self._reader_waits_ns: int | None = None
        self._started = 0.0
        self._finished: float | None = None
        self.connect_s: float | None = None  # how long connect() waited for every channel
        self._started_unix_ns: int | None = None
        # Calls are numbered from one shared counter (next() is atomic under the GIL).
        self._tickets = itertools.count()
        spec = config.workload
        self.attributes = {
            "grpc_overhead.run_id": config.run_id,
            "grpc_overhead.payload.codec": spec.codec,
            "grpc_overhead.payload.encoding": spec.encoding,
            "grpc_overhead.load.mode": spec.mode,
            "grpc_overhead.entities": spec.entities,
        }
        self.rest = spec.transport == "rest"
        self.channels: Channels | RestChannels = (
            RestChannels(config.targets, config.concurrency, self.attributes)
            if self.rest
            else Channels(config, self.pipeline)
        )

    # -- control --------------------------------------------------------------------------
    def connect(self) -> None:
        """Every channel ready before the first call: the handshakes (TCP, TLS, HTTP/2) are
        timed here (``connect_ms`` in the summary), apart from the calls' latency."""
        started = time.perf_counter()
        if isinstance(self.channels, RestChannels):
            try:
                self.channels.wait_ready(self.config.connect_timeout_s)
            except ConnectionError as error:
                raise ConnectError(str(error)) from None
        else:
            self.channels.wait_ready(self.config)
        self.connect_s = time.perf_counter() - started

    def start(self) -> None:
        self._started = time.perf_counter()
        self._started_unix_ns = time.time_ns()
        self._reader_waits.start()
        if self.config.rps:
            targets = [self._dispatch]
        else:
            targets = [lambda w=w: self._closed_worker(w) for w in range(self.config.concurrency)]
        for index, target in enumerate(targets):
            ended = threading.Event()
            thread = threading.Thread(
                target=_then_set, args=(target, ended), name=f"load-{index}", daemon=True
            )
            thread.start()
            self._ended.append(ended)

    def done(self) -> bool:
        return all(ended.is_set() for ended in self._ended)

    def join(self, timeout: float | None = None) -> None:
        """Wait for the run's threads to end (at most ``timeout`` s).

        Waits on events of its own, not ``Thread.join``: on Python 3.11, a Ctrl-C that
        interrupts ``Thread.join`` marks the still running thread as ended, so the join
        after it returned at once and the summary left out the calls still in flight
        (their spans were exported all the same: 12 spans for 10 calls counted)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for ended in self._ended:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ended.wait(remaining)

    def progress(self) -> int:
        with self._outcomes_lock:
            outcomes = list(self._outcomes)
        return sum(outcome.done for outcome in outcomes)

    def elapsed(self) -> float:
        end = self._finished if self._finished is not None else time.perf_counter()
        return end - self._started if self._started else 0.0

    def close(self) -> None:
        self.channels.close()
        if self.rest:
            rest_shutdown()  # flush the REST spans (gRPC's go through the pipeline)

    # -- results --------------------------------------------------------------------------
    def summary(self, interrupted: bool = False) -> dict[str, Any]:
        if self._finished is None:
            self._finished = time.perf_counter()
            self._reader_waits_ns = self._reader_waits.total_ns()
        total = Outcome()
        with self._outcomes_lock:
            for outcome in self._outcomes:
                total.merge(outcome)
        config = self.config
        open_loop = None
        if config.rps:
            open_loop = {"rps_target": config.rps, "late_threshold_ms": config.late_threshold_ms}
        payload = {**self.workload.payload_info(), "grpc_compression": config.grpc_compression}
        result = summarize(
            total,
            run_id=config.run_id,
            duration_s=self._finished - self._started,
            config=config.describe(),
            payload=payload,
            open_loop=open_loop,
            interrupted=interrupted,
            grpc_readers_wait_ns=self._reader_waits_ns or 0,
        )
        if self.connect_s is not None:
            result["connect_ms"] = round(self.connect_s * 1000, 3)
        if self._started_unix_ns is not None:  # where the calls lie on the wall clock
            result["started_unix_ns"] = self._started_unix_ns
        return result

    # -- workers --------------------------------------------------------------------------
    def _new_outcome(self) -> Outcome:
        outcome = Outcome()
        with self._outcomes_lock:
            self._outcomes.append(outcome)
        return outcome

    def _stub(self, index: int, worker: int):
        stubs = self.channels.stubs[index % len(self.channels.stubs)]
        return stubs[worker % len(stubs)]

    def _one_call(self, outcome: Outcome, index: int, worker: int) -> None:
        stub = self._stub(index, worker)
        timeout = self.config.timeout_s
        waited = own_run_delay_ns()  # the caller's own wait for a CPU, outside the timing
        start = time.perf_counter_ns()
        try:
            predictions, instance = self.workload.call(stub, index, timeout)
        except grpc.RpcError as error:
            code = error.code() if callable(getattr(error, "code", None)) else None
            name = code.name if code is not None else "UNKNOWN"
            details = error.details() if callable(getattr(error, "details", None)) else str(error)
            outcome.status_codes[name] += 1
            outcome.error_messages[f"{name}: {details}"] += 1
        except RestCallError as error:
            outcome.status_codes[error.status] += 1
            outcome.error_messages[str(error)] += 1
        except BadResponse as error:
            outcome.status_codes["BAD_RESPONSE"] += 1
            outcome.error_messages[f"BAD_RESPONSE: {error}"] += 1
        except Exception as error:  # a client-side bug must not kill the run silently
            outcome.status_codes["CLIENT_ERROR"] += 1
            outcome.error_messages[f"CLIENT_ERROR: {type(error).__name__}: {error}"] += 1
        else:
            outcome.latencies_ns.append(time.perf_counter_ns() - start)
            outcome.status_codes["OK"] += 1
            outcome.predictions += predictions
            outcome.server_instances[instance] += 1
        if waited >= 0:
            outcome.cpu_wait_ns += own_run_delay_ns() - waited
        else:
            outcome.cpu_wait_unknown = True
        outcome.done += 1

    def _closed_worker(self, worker: int) -> None:
        outcome = self._new_outcome()
        config = self.config
        tickets = self._tickets
        deadline = self._started + config.duration_s if config.duration_s else None
        with call_attributes(self.attributes):
            while not self.stop.is_set():
                index = next(tickets)
                if config.calls is not None and index >= config.calls:
                    break
                if deadline is not None and time.perf_counter() >= deadline:
                    break
                self._one_call(outcome, index, worker)

    def _dispatch(self) -> None:
        """Open loop: Poisson arrivals handed to a bounded worker pool."""
        from concurrent.futures import ThreadPoolExecutor

        config = self.config
        rng = np.random.default_rng(np.random.SeedSequence(config.workload.seed).spawn(1)[0])
        workers = config.concurrency
        backlog = threading.BoundedSemaphore(workers * BACKLOG_PER_WORKER)
        local = threading.local()
        worker_ids = itertools.count()

        def task(index: int, scheduled_ns: int) -> None:
            try:
                outcome = getattr(local, "outcome", None)
                if outcome is None:
                    outcome = local.outcome = self._new_outcome()
                    local.worker = next(worker_ids)
                if self.stop.is_set():
                    return
                outcome.start_lags_ns.append(max(0, time.perf_counter_ns() - scheduled_ns))
                with call_attributes(self.attributes):
                    self._one_call(outcome, index, local.worker)
            finally:
                backlog.release()

        start_ns = int(self._started * 1e9)
        offset_s = 0.0
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="load-open") as pool:
            for index in itertools.count():
                if config.calls is not None and index >= config.calls:
                    break
                offset_s += float(rng.exponential(1.0 / config.rps))
                if config.duration_s is not None and offset_s >= config.duration_s:
                    break
                scheduled_ns = start_ns + int(offset_s * 1e9)
                if _sleep_until(scheduled_ns, self.stop):
                    break
                acquired = False
                while not self.stop.is_set() and not acquired:
                    acquired = backlog.acquire(timeout=0.1)
                if not acquired:
                    break
                pool.submit(task, index, scheduled_ns)


def _then_set(target: Callable[[], None], ended: threading.Event) -> None:
    try:
        target()
    finally:
        ended.set()


def _sleep_until(when_ns: int, stop: threading.Event) -> bool:
    """Sleep until perf_counter_ns() >= when_ns; True if stopped meanwhile."""
    while True:
        remaining = (when_ns - time.perf_counter_ns()) / 1e9
        if remaining <= 0:
            return stop.is_set()
        if remaining > 0.05:
            if stop.wait(remaining - 0.02):
                return True
        else:
            time.sleep(remaining)


def run_blocking(
    config: LoadConfig, on_progress: Callable[[Run], None] | None = None
) -> dict[str, Any]:
    """Connect, run to completion and return the summary (used by tests and the bench)."""
    run = Run(config)
    try:
        run.connect()
        run.start()
        while not run.done():
            if on_progress is not None:
                on_progress(run)
            run.join(0.1)
        return run.summary()
    finally:
        run.close()

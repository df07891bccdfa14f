"""The intake: OTLP spans in, ``otel_traces`` rows out, the collector's way.

    receivers (gRPC TraceService/Export, raw bytes; HTTP POST /v1/traces, protobuf or JSON)
        -> processor (bounded batch queue, a worker per exporter, group commit)
            -> exporters, one per store session (chDB parses protobuf | Python maps)

It is what the embedded mode puts where the collector's clickhouse exporter
sits in production: the collector's ``otlp`` exporter points at it, and it
writes exactly the rows that exporter would write.

    with Intake(store, IntakeConfig(port=0)) as intake:
        print(intake.port, intake.stats())

Decisions: attribute values are stored whole, however large (the collector
does not truncate either); the only cap is ``max_message_bytes`` per request,
beyond which gRPC itself answers RESOURCE_EXHAUSTED. Strings that are not
UTF-8 are stored byte for byte on the chDB path, as the Go exporter does;
bytes values are base64 text as pdata's AsString makes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Self

import grpc

from grpc_overhead.analyzer.intake.exporter import Exporter, exporter_for, share_commit_lock
from grpc_overhead.analyzer.intake.http_receiver import MAX_CONNECTIONS, OtlpHttpReceiver
from grpc_overhead.analyzer.intake.processor import BatchProcessor
from grpc_overhead.analyzer.intake.receiver import (
    DEFAULT_WAIT_TIMEOUT_S,
    IntakeStats,
    TraceReceiver,
    serve_receiver,
)
from grpc_overhead.analyzer.intake.security import Authenticating, Credentials
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store.base import Store
from grpc_overhead.analyzer.tls import Tls

DEFAULT_OTLP_PORT = 4327
#: OpenTelemetry's standard OTLP/HTTP port, where the Java agent, Node and .NET send.
STANDARD_OTLP_HTTP_PORT = 4318

__all__ = [
    "DEFAULT_OTLP_PORT",
    "STANDARD_OTLP_HTTP_PORT",
    "Credentials",
    "Intake",
    "IntakeConfig",
    "IntakeStats",
    "Tls",
]


@dataclass(frozen=True)
class IntakeConfig:
    """Where to listen and how much to hold.

    ``batch_bytes``/``flush_interval``: a batch goes to the store when this
    much encoded OTLP is waiting or the oldest request waited this long. Each
    batch costs ~0.3 s of engine CPU whatever its size (query analysis, the
    calls view: ``bench.intake_stages``), so under load a batch takes up to
    32 MiB (four collector-sized requests of ~7 MiB, not two): intake CPU per
    span -14 %, peak RSS +9 % (bench.intake, collector workload, calls view).
    ``max_pending_bytes``: what accepted requests may hold; beyond it requests
    are refused (UNAVAILABLE) until the store catches up. It is one term of
    serve's memory bound, with ``workers`` x request size (a request is received
    whole before it can be refused) and each export worker's batch in the engine:
    docs/reliability.md, "Memory under a flood" (``bench.memory``). ``max_message_bytes``: largest
    accepted request (the collector's default batches stay far below).
    ``workers``: gRPC handler threads (each waits for its request's batch).
    ``wait_timeout``: longest wait for the store before a request is refused
    (never stored later); keep it below the sender's timeout (the shipped
    collector config waits 10 s).
    ``export_workers``: batches written at the same time, each through its own
    store session (two keep both cores of a small machine busy; see
    ``processor``).
    ``extra_ports``: further ports the same receiver listens on when they are
    free (serve's standard OTLP port, 4317, where SDKs send by default); one
    held by another process (a collector) is skipped, never fatal: see
    ``Intake.extra_ports``.
    ``tls``/``credentials``: TLS and the secrets senders must present, on both
    receivers (``security``); None: plaintext, anyone who reaches the port.
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_OTLP_PORT
    batch_bytes: int = 32 << 20
    flush_interval: float = 0.05
    max_pending_bytes: int = 128 << 20
    max_message_bytes: int = 64 << 20
    workers: int = 32
    export_workers: int = 2
    wait_timeout: float = DEFAULT_WAIT_TIMEOUT_S
    schema: SchemaOptions | None = None  # None: SchemaOptions.for_store(store)
    extra_ports: tuple[int, ...] = ()
    #: OTLP/HTTP port (``POST /v1/traces``; 0: a free one); None: no HTTP receiver.
    http_port: int | None = None
    #: Open OTLP/HTTP connections at most; beyond, an immediate 503 (Retry-After).
    http_max_connections: int = MAX_CONNECTIONS
    tls: Tls | None = None
    credentials: Credentials | None = None


class Intake:
    """Receiver + batch processor + exporters, on ``store``.

    Unless an ``exporter`` is given (then it is the only worker, on whatever
    store it was built with), each of ``config.export_workers`` workers gets
    its own exporter on its own ``store.session()``: its own temporary
    staging table, and statements that neither wait for each other nor for
    the reports and rollups running on the store's main connection.
    """

    def __init__(
        self,
        store: Store,
        config: IntakeConfig | None = None,
        *,
        exporter: Exporter | None = None,
    ) -> None:
        self.config = config or IntakeConfig()
        if self.config.export_workers < 1:
            raise ValueError("export_workers must be at least 1")
        self.store = store
        #: Where spans go; by default the store's current database (what reports read).
        self.schema = self.config.schema or SchemaOptions.for_store(store)
        self._sessions: list[Store] = []
        self._given_exporter = exporter
        self.exporters: list[Exporter] = [exporter] if exporter is not None else []
        self.processor: BatchProcessor | None = None
        self.receiver: TraceReceiver | None = None
        self._server: grpc.Server | None = None
        self.port = 0
        #: The ``config.extra_ports`` the receiver listens on (the others were taken).
        self.extra_ports: list[int] = []
        self._http: OtlpHttpReceiver | None = None

    def start(self) -> int:
        """Create the schema, start the workers and the gRPC server; returns the port."""
        try:
            if self._given_exporter is None:
                for _ in range(self.config.export_workers):
                    session = self.store.session()
                    self._sessions.append(session)
                    self.exporters.append(exporter_for(session, self.schema))
                share_commit_lock(self.exporters)
            for exporter in self.exporters:
                exporter.start()
        except BaseException:
            self._release()
            raise
        self.processor = BatchProcessor(
            self.exporters,
            batch_bytes=self.config.batch_bytes,
            flush_interval=self.config.flush_interval,
            max_pending_bytes=self.config.max_pending_bytes,
        )
        self.receiver = TraceReceiver(self.processor, wait_timeout=self.config.wait_timeout)
        self.processor.start()
        try:
            self._server, self.port, self.extra_ports = serve_receiver(
                self.receiver,
                self.config.host,
                self.config.port,
                workers=self.config.workers,
                max_message_bytes=self.config.max_message_bytes,
                extra_ports=self.config.extra_ports,
                tls=self.config.tls.grpc_credentials() if self.config.tls else None,
                interceptors=(
                    [Authenticating(self.config.credentials)] if self.config.credentials else []
                ),
            )
        except (OSError, RuntimeError) as error:
            self.processor.shutdown()
            self._release()
            raise OSError(
                f"intake cannot listen on {self.config.host}:{self.config.port}: {error}"
            ) from error
        if self.config.http_port is not None:
            try:
                self._http = OtlpHttpReceiver(
                    self.receiver,
                    self.config.host,
                    self.config.http_port,
                    max_message_bytes=self.config.max_message_bytes,
                    workers=self.config.workers,
                    max_connections=self.config.http_max_connections,
                    ssl_context=self.config.tls.ssl_context() if self.config.tls else None,
                    credentials=self.config.credentials,
                ).start()
            except OSError as error:
                self.stop()
                raise OSError(
                    f"intake cannot listen for OTLP/HTTP on {self.config.host}:"
                    f"{self.config.http_port}: {error.strerror or error}"
                ) from error
        return self.port

    @property
    def http_port(self) -> int | None:
        """The OTLP/HTTP port, None when there is no HTTP receiver."""
        return self._http.port if self._http is not None else None

    @property
    def http_url(self) -> str:
        """Where OTLP/HTTP senders post traces ('' without an HTTP receiver)."""
        if self._http is None:
            return ""
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if self.config.tls else "http"
        return f"{scheme}://{host}:{self._http.port}/v1/traces"

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    def stored_batches(self) -> int:
        """Batches stored so far: moves whenever new spans became readable (cheap: the app
        polls it to rerun pages at once)."""
        return self.processor.stats.batches if self.processor is not None else 0

    def stats(self) -> IntakeStats:
        if self.receiver is None:
            return IntakeStats()
        stats = self.receiver.stats()
        if self.config.credentials is not None:
            stats.requests_unauthenticated = self.config.credentials.refused
        return stats

    def stop(self, grace: float = 5.0) -> None:
        """Stop taking requests, let waiting ones finish, flush, release."""
        if self._http is not None:
            self._http.stop()
            self._http = None
        if self._server is not None:
            stopped = self._server.stop(grace)
            if self.processor is not None:
                self.processor.shutdown()
            stopped.wait(grace)
            self._server = None
        elif self.processor is not None:
            self.processor.shutdown()
        self._release()

    def _release(self) -> None:
        for exporter in self.exporters:
            exporter.shutdown()
        if self._given_exporter is None:
            self.exporters = []
        for session in self._sessions:
            self.store.close_session(session)
        self._sessions = []

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

"""The intake: OTLP/gRPC spans in, ``otel_traces`` rows out, the collector's way.

    receiver (gRPC TraceService/Export, raw bytes)
        -> processor (bounded batch queue, one worker, group commit)
            -> exporter (chDB parses protobuf itself | Python maps, store inserts)

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

from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

import grpc

from grpc_overhead.analyzer.intake.exporter import Exporter, exporter_for
from grpc_overhead.analyzer.intake.processor import BatchProcessor
from grpc_overhead.analyzer.intake.receiver import IntakeStats, TraceReceiver, serve_receiver
from grpc_overhead.analyzer.schema import SchemaOptions
from grpc_overhead.analyzer.store.base import Store

DEFAULT_OTLP_PORT = 4327

__all__ = ["DEFAULT_OTLP_PORT", "Intake", "IntakeConfig", "IntakeStats"]


@dataclass(frozen=True)
class IntakeConfig:
    """Where to listen and how much to hold.

    ``batch_bytes``/``flush_interval``: a batch goes to the store when this
    much encoded OTLP is waiting or the oldest request waited this long.
    ``max_pending_bytes``: the memory bound; beyond it requests are refused
    (UNAVAILABLE) until the store catches up. ``max_message_bytes``: largest
    accepted request (the collector's default batches stay far below).
    """

    host: str = "127.0.0.1"
    port: int = DEFAULT_OTLP_PORT
    batch_bytes: int = 16 << 20
    flush_interval: float = 0.05
    max_pending_bytes: int = 128 << 20
    max_message_bytes: int = 64 << 20
    workers: int = 32
    wait_timeout: float = 30.0
    schema: SchemaOptions = field(default_factory=SchemaOptions)


class Intake:
    def __init__(
        self,
        store: Store,
        config: IntakeConfig | None = None,
        *,
        exporter: Exporter | None = None,
    ) -> None:
        self.config = config or IntakeConfig()
        self.store = store
        self.exporter = exporter or exporter_for(store, self.config.schema)
        self.processor = BatchProcessor(
            self.exporter,
            batch_bytes=self.config.batch_bytes,
            flush_interval=self.config.flush_interval,
            max_pending_bytes=self.config.max_pending_bytes,
        )
        self.receiver = TraceReceiver(self.processor, wait_timeout=self.config.wait_timeout)
        self._server: grpc.Server | None = None
        self.port = 0

    def start(self) -> int:
        """Create the schema, start the worker and the gRPC server; returns the port."""
        self.exporter.start()
        self.processor.start()
        try:
            self._server, self.port = serve_receiver(
                self.receiver,
                self.config.host,
                self.config.port,
                workers=self.config.workers,
                max_message_bytes=self.config.max_message_bytes,
            )
        except (OSError, RuntimeError) as error:
            self.processor.shutdown()
            self.exporter.shutdown()
            raise OSError(
                f"intake cannot listen on {self.config.host}:{self.config.port}: {error}"
            ) from error
        return self.port

    @property
    def address(self) -> str:
        return f"{self.config.host}:{self.port}"

    def stats(self) -> IntakeStats:
        return self.receiver.stats()

    def stop(self, grace: float = 5.0) -> None:
        """Stop taking requests, let waiting ones finish, flush, release."""
        if self._server is not None:
            stopped = self._server.stop(grace)
            self.processor.shutdown()
            stopped.wait(grace)
            self._server = None
        else:
            self.processor.shutdown()
        self.exporter.shutdown()

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

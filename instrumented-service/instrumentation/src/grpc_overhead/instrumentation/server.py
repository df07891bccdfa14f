"""Server instrumentation: interceptors for ``grpc.server`` and ``grpc.aio.server``.

Our interceptor must come first: its entry is ``serverCallStarted``, the
earliest moment Python sees a call, and it must wrap the handler other
interceptors return. The sync server also needs the timed executor (see
executor.py), and the servicer methods are timed once more, innermost, where
they are registered (servicers.py), so that the other interceptors' time is
theirs and not the handler's; ``instrumented_server`` wires all three.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import grpc

from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.environment import instrumentation_disabled
from grpc_overhead.instrumentation.executor import timed_executor
from grpc_overhead.instrumentation.handlers import Unsampled, wrap_unsampled
from grpc_overhead.instrumentation.originals import ORIGINALS
from grpc_overhead.instrumentation.pipeline import SpanPipeline
from grpc_overhead.instrumentation.recorder import Recorder
from grpc_overhead.instrumentation.server_calls import (
    CURRENT_SERVER_CALL,
    start_server_record,
    wrap_handler,
)
from grpc_overhead.instrumentation.servicers import time_generic_handlers, time_servicers
from grpc_overhead.instrumentation.vocabulary import SERVICE_INTERCEPTED


class ServerInterceptor(grpc.ServerInterceptor):
    """For ``grpc.server``; pair it with ``timed_executor(thread_pool)``."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self._recorder = recorder or Recorder()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        started = now()
        handler = continuation(handler_call_details)
        intercepted = now()  # the other interceptors' intercept_service calls are done
        if handler is None:
            return None
        record = start_server_record(self._recorder, handler_call_details, handler, started)
        if type(record) is Unsampled:
            return wrap_unsampled(handler, record, aio=False)
        record.event(SERVICE_INTERCEPTED, intercepted)
        # Runs inside the call's contextvars.Context: the executor and the handler find it.
        CURRENT_SERVER_CALL.set(record)
        return wrap_handler(handler, record, aio=False)


class AioServerInterceptor(grpc.aio.ServerInterceptor):
    """For ``grpc.aio.server``; async handlers stay async, sync handlers stay sync."""

    def __init__(self, recorder: Recorder | None = None) -> None:
        self._recorder = recorder or Recorder()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Any],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Any:
        started = now()
        handler = await continuation(handler_call_details)
        intercepted = now()
        if handler is None:
            return None
        record = start_server_record(self._recorder, handler_call_details, handler, started)
        if type(record) is Unsampled:
            return wrap_unsampled(handler, record, aio=True)
        record.event(SERVICE_INTERCEPTED, intercepted)
        return wrap_handler(handler, record, aio=True)


def server_interceptor(
    pipeline: SpanPipeline | None = None, compression: grpc.Compression | None = None
) -> ServerInterceptor:
    return ServerInterceptor(Recorder(pipeline, compression))


def aio_server_interceptor(
    pipeline: SpanPipeline | None = None, compression: grpc.Compression | None = None
) -> AioServerInterceptor:
    return AioServerInterceptor(Recorder(pipeline, compression))


def instrumented_server(
    thread_pool: futures.Executor,
    handlers: Sequence[grpc.GenericRpcHandler] | None = None,
    interceptors: Sequence[grpc.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] | None = None,
    maximum_concurrent_rpcs: int | None = None,
    compression: grpc.Compression | None = None,
    *,
    pipeline: SpanPipeline | None = None,
    **kwargs: Any,
) -> grpc.Server:
    """``grpc.server(...)`` with our interceptor first, the pool's pickups and the
    servicer methods timed (plain ``grpc.server`` when ``GRPC_OVERHEAD_DISABLED`` is set)."""
    if instrumentation_disabled():
        return _original_grpc_server()(
            thread_pool,
            handlers=handlers,
            interceptors=interceptors,
            options=options,
            maximum_concurrent_rpcs=maximum_concurrent_rpcs,
            compression=compression,
            **kwargs,
        )
    server = _original_grpc_server()(
        timed_executor(thread_pool),
        handlers=time_generic_handlers(handlers, aio=False),
        interceptors=[server_interceptor(pipeline, compression), *interceptors],
        options=options,
        maximum_concurrent_rpcs=maximum_concurrent_rpcs,
        compression=compression,
        **kwargs,
    )
    return time_servicers(server, aio=False)


def instrumented_aio_server(
    migration_thread_pool: futures.Executor | None = None,
    handlers: Sequence[grpc.GenericRpcHandler] | None = None,
    interceptors: Sequence[Any] = (),
    options: Sequence[tuple[str, Any]] | None = None,
    maximum_concurrent_rpcs: int | None = None,
    compression: grpc.Compression | None = None,
    *,
    pipeline: SpanPipeline | None = None,
    **kwargs: Any,
) -> grpc.aio.Server:
    """``grpc.aio.server(...)`` with our interceptor first and the servicer methods timed
    (plain when disabled)."""
    disabled = instrumentation_disabled()
    ours = [] if disabled else [aio_server_interceptor(pipeline, compression)]
    server = _original_aio_server()(
        migration_thread_pool=migration_thread_pool,
        handlers=handlers if disabled else time_generic_handlers(handlers, aio=True),
        interceptors=[*ours, *interceptors],
        options=options,
        maximum_concurrent_rpcs=maximum_concurrent_rpcs,
        compression=compression,
        **kwargs,
    )
    return server if disabled else time_servicers(server, aio=True)


def _original_grpc_server() -> Callable[..., grpc.Server]:
    """grpc.server as it was before any instrumentor patched it (ours or another)."""
    return ORIGINALS.get("grpc.server", grpc.server)


def _original_aio_server() -> Callable[..., grpc.aio.Server]:
    return ORIGINALS.get("grpc.aio.server", grpc.aio.server)

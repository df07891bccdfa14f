"""``GrpcOverheadInstrumentor``: zero-code wiring for ``opentelemetry-instrument``.

Registered under the ``opentelemetry_instrumentor`` entry point, so
``opentelemetry-instrument python server.py`` patches ``grpc.server``,
``grpc.aio.server`` and the channel constructors (sync and aio) the same way
the explicit factories wire things by hand.

Next to ``opentelemetry-instrumentation-grpc``: both patch the same functions,
in either order (``opentelemetry-instrument`` loads entry points in
``sys.path`` and directory-listing order), and both interceptors run; calls
are unaffected. Their spans join ours in one trace and are folded into ours
(``coexistence``), so each RPC counts once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection
from typing import Any

import grpc
import grpc.aio
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from grpc_overhead.instrumentation.environment import instrumentation_disabled
from grpc_overhead.instrumentation.originals import ORIGINALS

_PATCHES = {
    "grpc.server": (grpc, "server"),
    "grpc.insecure_channel": (grpc, "insecure_channel"),
    "grpc.secure_channel": (grpc, "secure_channel"),
    "grpc.aio.server": (grpc.aio, "server"),
    "grpc.aio.insecure_channel": (grpc.aio, "insecure_channel"),
    "grpc.aio.secure_channel": (grpc.aio, "secure_channel"),
}


class GrpcOverheadInstrumentor(BaseInstrumentor):
    def instrumentation_dependencies(self) -> Collection[str]:
        return ("grpcio >= 1.85, < 2",)

    def _instrument(self, **kwargs: Any) -> None:
        if instrumentation_disabled():
            return
        from grpc_overhead.instrumentation.aio_client import instrument_aio_channel
        from grpc_overhead.instrumentation.client import instrument_channel
        from grpc_overhead.instrumentation.executor import timed_executor
        from grpc_overhead.instrumentation.recorder import Recorder
        from grpc_overhead.instrumentation.server import AioServerInterceptor, ServerInterceptor
        from grpc_overhead.instrumentation.servicers import time_generic_handlers, time_servicers

        pipeline = kwargs.get("pipeline")

        def patched_server(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def server(
                thread_pool,
                handlers=None,
                interceptors=None,
                options=None,
                maximum_concurrent_rpcs=None,
                compression=None,
                xds=False,
            ):
                ours = ServerInterceptor(Recorder(pipeline, compression))
                # Keywords, not positions: another instrumentor patched before us (the
                # official grpc one) adds its interceptor to kwargs["interceptors"].
                created = original(
                    timed_executor(thread_pool),
                    handlers=time_generic_handlers(handlers, aio=False),
                    interceptors=[ours, *(interceptors or ())],
                    options=options,
                    maximum_concurrent_rpcs=maximum_concurrent_rpcs,
                    compression=compression,
                    xds=xds,
                )
                return time_servicers(created, aio=False)

            return server

        def patched_aio_server(original: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(original)
            def server(*args: Any, **kw: Any) -> Any:
                ours = AioServerInterceptor(Recorder(pipeline, kw.get("compression")))
                kw["interceptors"] = [ours, *(kw.get("interceptors") or ())]
                if len(args) > 1:  # grpc.aio.server(migration_thread_pool, handlers, ...)
                    args = (args[0], time_generic_handlers(args[1], aio=True), *args[2:])
                else:
                    kw["handlers"] = time_generic_handlers(kw.get("handlers"), aio=True)
                return time_servicers(original(*args, **kw), aio=True)

            return server

        def patched_channel(original: Callable[..., Any], aio: bool) -> Callable[..., Any]:
            wrap = instrument_aio_channel if aio else instrument_channel

            @functools.wraps(original)
            def channel(target: str, *args: Any, **kw: Any) -> Any:
                created = original(target, *args, **kw)
                if not is_instrumentation_enabled():  # e.g. an OTLP exporter being built
                    return created
                return wrap(created, target, compression=kw.get("compression"), pipeline=pipeline)

            return channel

        factories = {
            "grpc.server": patched_server,
            "grpc.aio.server": patched_aio_server,
            "grpc.insecure_channel": lambda f: patched_channel(f, aio=False),
            "grpc.secure_channel": lambda f: patched_channel(f, aio=False),
            "grpc.aio.insecure_channel": lambda f: patched_channel(f, aio=True),
            "grpc.aio.secure_channel": lambda f: patched_channel(f, aio=True),
        }
        for name, (module, attribute) in _PATCHES.items():
            original = getattr(module, attribute)
            ORIGINALS[name] = original
            setattr(module, attribute, factories[name](original))

    def _uninstrument(self, **kwargs: Any) -> None:
        for name, (module, attribute) in _PATCHES.items():
            original = ORIGINALS.pop(name, None)
            if original is not None:
                setattr(module, attribute, original)

"""The servicer's own methods, timed innermost, where grpcio registers them.

Our interceptor runs first (``serverCallStarted`` must be the earliest moment Python
sees a call), so the handler it wraps is the whole interceptor chain: a user's
interceptor that logs for 20 ms after the handler returned would read as processing.
So the method handlers are wrapped a second time where they are registered: the
server's ``handlers=``, ``add_generic_rpc_handlers`` and
``add_registered_method_handlers`` (what generated ``add_*Servicer_to_server`` calls).
That innermost wrapper records ``handlerStarted`` when the servicer's method is called
and ``predictionsMade`` when it returns, or, after ``mark_predictions_made()``,
``handlerReturned``; the chain around it is the ``server_interceptors`` phase.

The wrapper finds the call's record in ``CURRENT_SERVER_CALL``, which our interceptor
sets in the call's own context (a sync server runs the handler in that context; aio
runs it in the call's task; aio's sync handlers on the migration pool get it from our
outer wrapper). A call we do not record (not sampled) passes through for the price of
one context-variable read. Wrappers keep the handler's kind (function, generator,
coroutine function, async generator function): grpcio's aio server inspects it.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import grpc

from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.handlers import (
    ASYNC_GENERATOR,
    BEHAVIOR_ATTRIBUTES,
    COROUTINE,
    behavior_kind,
    replace_behavior,
)
from grpc_overhead.instrumentation.records import CURRENT_SERVER_CALL, CallRecord
from grpc_overhead.instrumentation.vocabulary import (
    HANDLER_RETURNED,
    HANDLER_STARTED,
    PREDICTIONS_MADE,
)

_LOGGER = logging.getLogger(__name__)
_current = CURRENT_SERVER_CALL.get
#: Set on our innermost wrappers, so that registering a handler twice times it once.
_TIMED = "_grpc_overhead_innermost"
#: Bound on the per-generic-handler cache (handlers that make a new RpcMethodHandler per
#: call are then wrapped per call, uncached).
_CACHE_LIMIT = 4096


def mark_predictions_made() -> bool:
    """Mark the moment the handler's real work (the model) finished: ``predictionsMade``.

    Call it from a server handler; the time from this mark to the handler's return
    becomes the ``post_processing`` phase (logging, metrics, response building after
    the model: what DoorDash found between predictionsMade and outboundMessageSent).
    Without a mark, predictionsMade is the handler's return and post_processing is
    not measured. Only the first mark of a call counts. Returns True when the mark was
    recorded; False (and nothing happens) outside a recorded server call: outside any
    handler, in a call the sampler left out, after the handler returned, or again.
    Safe from any thread or task that runs in the call's context.
    """
    record = _current()
    if record is None or record.predictions_made or record.finished:
        return False
    marked = now()
    record.predictions_made = marked
    record.event(PREDICTIONS_MADE, marked)
    return True


def handler_returned(record: CallRecord, returned: int) -> None:
    """The handler returned: predictionsMade, unless a mark already recorded it
    (then handlerReturned, the end of post_processing)."""
    if record.predictions_made:
        record.event(HANDLER_RETURNED, returned)
    else:
        record.predictions_made = returned
        record.event(PREDICTIONS_MADE, returned)


def _started(record: CallRecord) -> None:
    started = now()
    record.handler_started = started
    record.event(HANDLER_STARTED, started)


class _HandlerIterator:
    """A sync handler's response iterator: the handler returns when it is exhausted."""

    __slots__ = ("_iterator", "_record")

    def __init__(self, iterator: Iterator[Any], record: CallRecord) -> None:
        self._iterator = iterator
        self._record: CallRecord | None = record

    def __iter__(self) -> _HandlerIterator:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._iterator)
        except BaseException:
            record = self._record
            if record is not None:
                self._record = None
                handler_returned(record, now())
            raise


def _innermost_sync(behavior: Callable[..., Any], response_streaming: bool) -> Callable[..., Any]:
    def timed_servicer_method(request: Any, context: Any) -> Any:
        record = _current()
        if record is None:
            return behavior(request, context)
        _started(record)
        try:
            result = behavior(request, context)
        except BaseException:
            handler_returned(record, now())
            raise
        if response_streaming:
            return _HandlerIterator(iter(result), record)
        handler_returned(record, now())
        return result

    return timed_servicer_method


def _innermost_aio(behavior: Callable[..., Any], kind: int) -> Callable[..., Any]:
    if kind == ASYNC_GENERATOR:

        async def timed_servicer_generator(request: Any, context: Any) -> Any:
            record = _current()
            if record is None:
                async for response in behavior(request, context):
                    yield response
                return
            _started(record)
            try:
                async for response in behavior(request, context):
                    yield response
            finally:
                handler_returned(record, now())

        return timed_servicer_generator

    async def timed_servicer_coroutine(request: Any, context: Any) -> Any:
        record = _current()
        if record is None:
            return await behavior(request, context)
        _started(record)
        try:
            return await behavior(request, context)
        finally:
            handler_returned(record, now())

    return timed_servicer_coroutine


def time_method_handler(handler: Any, aio: bool) -> Any:
    """``handler`` (an ``RpcMethodHandler``) with its behavior timed innermost; handlers
    we cannot time (callback-style streaming, no behavior) and timed ones unchanged."""
    if handler is None:
        return None
    try:
        attribute = BEHAVIOR_ATTRIBUTES[(handler.request_streaming, handler.response_streaming)]
        behavior = getattr(handler, attribute)
    except (AttributeError, KeyError, TypeError):
        return handler  # not a method handler grpcio would run: leave it to grpcio
    if behavior is None or getattr(behavior, _TIMED, False):
        return handler
    if getattr(behavior, "experimental_non_blocking", False):
        return handler
    kind = behavior_kind(behavior) if aio else 0
    if kind in (COROUTINE, ASYNC_GENERATOR):
        wrapped = _innermost_aio(behavior, kind)
    else:
        wrapped = _innermost_sync(behavior, handler.response_streaming)
    setattr(wrapped, _TIMED, True)
    pool = getattr(behavior, "experimental_thread_pool", None)
    if pool is not None:
        wrapped.experimental_thread_pool = pool  # type: ignore[attr-defined]
    return replace_behavior(
        handler, attribute, wrapped, handler.request_deserializer, handler.response_serializer
    )


class TimedGenericHandler(grpc.GenericRpcHandler):
    """A generic handler whose method handlers come back timed innermost.

    grpcio asks the generic handlers for every call not registered by name; the
    timed copy of each method handler is made once (keyed by identity) and reused.
    Other attributes (e.g. ``service_name``) are the wrapped handler's.
    """

    def __init__(self, inner: Any, aio: bool) -> None:
        self._inner = inner
        self._aio = aio
        self._timed: dict[int, tuple[Any, Any]] = {}

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> Any:
        handler = self._inner.service(handler_call_details)
        if handler is None:
            return None
        found = self._timed.get(id(handler))
        if found is not None and found[0] is handler:
            return found[1]
        timed = time_method_handler(handler, self._aio)
        if len(self._timed) < _CACHE_LIMIT:
            self._timed[id(handler)] = (handler, timed)
        return timed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def time_generic_handlers(handlers: Iterable[Any] | None, aio: bool) -> list[Any] | None:
    if handlers is None:
        return None
    return [
        handler if isinstance(handler, TimedGenericHandler) else TimedGenericHandler(handler, aio)
        for handler in handlers
    ]


def _original(server: Any, name: str) -> Callable[..., Any]:
    """The server's method as an unbound callable (no server -> closure -> server cycle:
    grpcio's sync server stops its serving thread when the server object is freed)."""
    own = vars(server).get(name)
    if own is not None:
        return lambda _server, *args: own(*args)
    return getattr(type(server), name)


def time_servicers(server: Any, aio: bool | None = None) -> Any:
    """Time the servicer methods registered on ``server`` from now on, innermost.

    ``instrumented_server``, ``instrumented_aio_server`` and the instrumentor do this
    themselves; a server built by hand with ``server_interceptor()`` calls it before
    registering its servicers. Idempotent; returns ``server``.
    """
    if getattr(server, "_grpc_overhead_timed", False):
        return server
    if aio is None:
        aio = isinstance(server, grpc.aio.Server)
    reference = weakref.ref(server)
    add_generic = _original(server, "add_generic_rpc_handlers")
    add_registered = _original(server, "add_registered_method_handlers")

    def add_generic_rpc_handlers(generic_rpc_handlers: Iterable[Any]) -> None:
        return add_generic(reference(), time_generic_handlers(generic_rpc_handlers, aio))

    def add_registered_method_handlers(service_name: str, method_handlers: Mapping) -> None:
        timed = {name: time_method_handler(h, aio) for name, h in method_handlers.items()}
        return add_registered(reference(), service_name, timed)

    try:
        server.add_generic_rpc_handlers = add_generic_rpc_handlers
        server.add_registered_method_handlers = add_registered_method_handlers
        server._grpc_overhead_timed = True
    except AttributeError:  # a server type that takes no attributes: the chain is the handler
        _LOGGER.debug("cannot time the servicer methods of %r", server, exc_info=True)
    return server

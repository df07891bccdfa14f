"""Measures the wait for a worker thread exactly: the ``callScheduled`` event.

grpcio's sync server hands each call to its thread pool with
``thread_pool.submit(state.context.run, behavior_runner, ...)``: the callable
is the ``run`` method of the call's own ``contextvars.Context``, in which our
interceptor (which runs inside that same context) left the call's record. So
the executor finds the record without thread-locals or guessing, and records
the moment a worker picks the call up. Calls it knows nothing about pass
through untouched.

The wrapper subclasses ThreadPoolExecutor only to pass grpcio's
``isinstance`` check for per-handler ``experimental_thread_pool``; all work is
delegated to the wrapped executor.
"""

from __future__ import annotations

import contextvars
import weakref
from concurrent import futures
from typing import Any

from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.records import CURRENT_SERVER_CALL, CallRecord
from grpc_overhead.instrumentation.vocabulary import CALL_SCHEDULED

_Context = contextvars.Context
_wrapped: weakref.WeakKeyDictionary[futures.Executor, TimedExecutor] = weakref.WeakKeyDictionary()


def _run_scheduled(record: CallRecord, fn: Any, args: tuple, kwargs: dict) -> Any:
    record.event(CALL_SCHEDULED, now())
    try:
        return fn(*args, **kwargs)
    finally:
        # The worker returns after handing message and status to the transport; the
        # span ends at the last thing the call did (usually outboundMessageSent), not
        # at this bookkeeping moment, which can fall after the client already has
        # its response.
        record.finish(record.events[-1][1])


class TimedExecutor(futures.ThreadPoolExecutor):
    def __init__(self, inner: futures.Executor) -> None:
        self._inner = inner

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> futures.Future:
        owner = getattr(fn, "__self__", None)
        record = owner.get(CURRENT_SERVER_CALL) if type(owner) is _Context else None
        if record is None:
            return self._inner.submit(fn, *args, **kwargs)
        return self._inner.submit(_run_scheduled, record, fn, args, kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._inner.shutdown(wait=wait, cancel_futures=cancel_futures)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __repr__(self) -> str:
        return f"TimedExecutor({self._inner!r})"


def timed_executor(executor: futures.Executor) -> TimedExecutor:
    """Wrap an executor once; wrapping a wrapper returns it unchanged."""
    if isinstance(executor, TimedExecutor):
        return executor
    existing = _wrapped.get(executor)
    if existing is None:
        existing = _wrapped[executor] = TimedExecutor(executor)
    return existing

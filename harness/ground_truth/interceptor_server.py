"""A real grpcio server (the prediction service's Predictor) with a known cost around the
handler, for the ``server_interceptors`` scenario.

``python -m harness.ground_truth.interceptor_server KIND SLEEP_MS STATS_FILE [--aio]``:

* ``baseline``: the service as it is (Predict marks predictionsMade when it scored);
* ``after`` / ``before``: a user's ``ServerInterceptor`` whose behaviour sleeps SLEEP_MS
  after (DoorDash's slow logging call, in interceptor form) / before the handler;
* ``intercept``: the interceptor sleeps in ``intercept_service`` itself;
* ``mark``: Predict calls ``mark_predictions_made()`` when the model scored, then sleeps
  SLEEP_MS before returning.

The truth is each sleep as this process's own clock measured it (``perf_counter_ns``
around ``time.sleep``: a loaded machine oversleeps), written to STATS_FILE as JSON when
SIGTERM stops the server (after its spans were flushed). Prints ``listening on
HOST:PORT`` like ``grpc-overhead service``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from grpc_overhead.instrumentation import (
    default_pipeline,
    instrumented_aio_server,
    instrumented_server,
    mark_predictions_made,
)
from grpc_overhead.prediction.protos import prediction_pb2_grpc as pb_grpc
from grpc_overhead.prediction.server import (
    AioPredictorServicer,
    PredictorServicer,
    ServiceConfig,
    _annotate,
    make_scorer,
)

KINDS = ("baseline", "after", "before", "intercept", "mark")
SLEPT_US: list[float] = []


def sleep_ms(milliseconds: float) -> None:
    started = time.perf_counter_ns()
    time.sleep(milliseconds / 1000)
    SLEPT_US.append((time.perf_counter_ns() - started) / 1000)


def _wrap(handler: Any, before: Callable[[], None], after: Callable[[], None]) -> Any:
    """``handler`` (unary-unary, sync or async) with work before and after its behaviour."""
    inner = handler.unary_unary
    if inner is None:
        return handler
    if asyncio.iscoroutinefunction(inner):

        async def behaviour(request: Any, context: Any) -> Any:
            before()
            response = await inner(request, context)
            after()
            return response

    else:

        def behaviour(request: Any, context: Any) -> Any:
            before()
            response = inner(request, context)
            after()
            return response

    return grpc.unary_unary_rpc_method_handler(
        behaviour, handler.request_deserializer, handler.response_serializer
    )


def _nothing() -> None:
    return None


class SleepingInterceptor(grpc.ServerInterceptor):
    """A user's interceptor: sleeps in intercept_service, or around the handler."""

    def __init__(self, kind: str, milliseconds: float) -> None:
        self.kind = kind
        self.milliseconds = milliseconds

    def _sleep(self) -> None:
        sleep_ms(self.milliseconds)

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if self.kind == "intercept":
            self._sleep()
        handler = continuation(details)
        if handler is None or self.kind not in ("before", "after"):
            return handler
        if self.kind == "before":
            return _wrap(handler, self._sleep, _nothing)
        return _wrap(handler, _nothing, self._sleep)


class AioSleepingInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, kind: str, milliseconds: float) -> None:
        self.sync = SleepingInterceptor(kind, milliseconds)

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        if self.sync.kind == "intercept":
            self.sync._sleep()
        handler = await continuation(details)
        if handler is None or self.sync.kind not in ("before", "after"):
            return handler
        if self.sync.kind == "before":
            return _wrap(handler, self.sync._sleep, _nothing)
        return _wrap(handler, _nothing, self.sync._sleep)


class MarkingServicer(PredictorServicer):
    """Predict marks predictionsMade when the model scored, then 'logs' for a while."""

    def __init__(self, scorer: Any, milliseconds: float) -> None:
        super().__init__(scorer)
        self.milliseconds = milliseconds

    def Predict(self, request, context):
        scored = self._score(context, lambda: self.scorer.score(request))
        mark_predictions_made()
        sleep_ms(self.milliseconds)
        _annotate([scored])
        return self.scorer.response(scored)


class AioMarkingServicer(AioPredictorServicer):
    def __init__(self, scorer: Any, executor: futures.Executor, milliseconds: float) -> None:
        super().__init__(scorer, executor)
        self.milliseconds = milliseconds

    async def Predict(self, request, context):
        scored = await self._run(context, self.scorer.score, request)
        mark_predictions_made()
        sleep_ms(self.milliseconds)  # blocking on purpose: a synchronous logging call
        _annotate([scored])
        return self.scorer.response(scored)


def _write(stats: Path, kind: str, milliseconds: float) -> None:
    """The sleeps, and what became of the spans (flushed first: a lost span would read as
    a missing phase, so the scenario says so instead)."""
    pipeline = default_pipeline()
    pipeline.force_flush(timeout_s=30)
    pipeline.shutdown()
    spans = pipeline.delivery()
    stats.write_text(
        json.dumps({"kind": kind, "sleep_ms": milliseconds, "slept_us": SLEPT_US, "spans": spans})
    )


def serve_sync(kind: str, milliseconds: float, stats: Path) -> None:
    scorer = make_scorer(ServiceConfig())
    interceptors = [] if kind in ("baseline", "mark") else [SleepingInterceptor(kind, milliseconds)]
    server = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=4), interceptors=interceptors
    )
    servicer = (
        MarkingServicer(scorer, milliseconds) if kind == "mark" else PredictorServicer(scorer)
    )
    pb_grpc.add_PredictorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    while not stop.wait(0.2):
        pass
    server.stop(1).wait(5)
    _write(stats, kind, milliseconds)


async def serve_aio(kind: str, milliseconds: float, stats: Path) -> None:
    scorer = make_scorer(ServiceConfig())
    pool = futures.ThreadPoolExecutor(max_workers=4)
    interceptors = (
        [] if kind in ("baseline", "mark") else [AioSleepingInterceptor(kind, milliseconds)]
    )
    server = instrumented_aio_server(interceptors=interceptors)
    servicer = (
        AioMarkingServicer(scorer, pool, milliseconds)
        if kind == "mark"
        else AioPredictorServicer(scorer, pool)
    )
    pb_grpc.add_PredictorServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await server.start()
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await stop.wait()
    await server.stop(1)
    pool.shutdown(wait=False)
    _write(stats, kind, milliseconds)


def main(argv: list[str]) -> int:
    kind, milliseconds, stats = argv[0], float(argv[1]), Path(argv[2])
    if kind not in KINDS:
        print(f"KIND must be one of {', '.join(KINDS)}, not {kind!r}", file=sys.stderr)
        return 2
    if "--aio" in argv[3:]:
        asyncio.run(serve_aio(kind, milliseconds, stats))
    else:
        serve_sync(kind, milliseconds, stats)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

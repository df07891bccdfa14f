"""The servicer's own method timed innermost, the interceptor chain around it, and marks.

A user's interceptor notes where its work ran as two extra events on the call's record
(``sleepStarted`` / ``sleepEnded``, read from the instrumentation's own clock), so every
check here is an order of events within one span: no timing thresholds.
"""

from __future__ import annotations

import asyncio
import time
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue

from grpc_overhead.instrumentation import (
    GrpcOverheadInstrumentor,
    instrument_aio_channel,
    instrument_channel,
    instrumented_aio_server,
    instrumented_server,
    mark_predictions_made,
    server_interceptor,
    time_servicers,
)
from grpc_overhead.instrumentation.clock import now
from grpc_overhead.instrumentation.records import CURRENT_SERVER_CALL
from tests.instrumentation import echo_service

pytestmark = pytest.mark.e2e

SLEEP_S = 0.02
MESSAGE = BytesValue(value=b"payload")


class NotingInterceptor(grpc.ServerInterceptor):
    """A user's interceptor that works (sleeps) in intercept_service, or in the behaviour
    before or after the handler, and notes when on the call's record."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.intercepted: tuple[int, int] | None = None

    def _work(self) -> tuple[int, int]:
        started = now()
        time.sleep(SLEEP_S)
        return started, now()

    def _note(self, bracket: tuple[int, int]) -> None:
        record = CURRENT_SERVER_CALL.get()
        record.event("sleepStarted", bracket[0])
        record.event("sleepEnded", bracket[1])

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        if self.where == "intercept":
            self.intercepted = self._work()  # no record yet: noted when the call runs
        handler = continuation(details)
        inner = handler.unary_unary

        def behaviour(request: Any, context: Any) -> Any:
            if self.intercepted is not None:
                self._note(self.intercepted)
            if self.where == "before":
                self._note(self._work())
            response = inner(request, context)
            if self.where == "after":
                self._note(self._work())
            return response

        return grpc.unary_unary_rpc_method_handler(
            behaviour, handler.request_deserializer, handler.response_serializer
        )


class AioNotingInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, where: str) -> None:
        self.sync = NotingInterceptor(where)

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        sync = self.sync
        if sync.where == "intercept":
            sync.intercepted = sync._work()
        handler = await continuation(details)
        inner = handler.unary_unary

        async def behaviour(request: Any, context: Any) -> Any:
            if sync.intercepted is not None:
                sync._note(sync.intercepted)
            if sync.where == "before":
                sync._note(sync._work())
            response = await inner(request, context)
            if sync.where == "after":
                sync._note(sync._work())
            return response

        return grpc.unary_unary_rpc_method_handler(
            behaviour, handler.request_deserializer, handler.response_serializer
        )


def timeline(span) -> dict[str, int]:
    """First timestamp of each event name of the span (one clock, one anchor)."""
    found: dict[str, int] = {}
    for event in span.events:
        found.setdefault(event.name, event.timestamp)
    return found


def assert_between(at: dict[str, int], first: str, inner: tuple[str, str], last: str) -> None:
    assert at[first] <= at[inner[0]] < at[inner[1]] <= at[last], (first, inner, last, at)


def assert_work_is_the_chains(at: dict[str, int], where: str) -> None:
    """The user's work lies in the part of the chain it belongs to, never in the method."""
    work = ("sleepStarted", "sleepEnded")
    assert_between(at, "handlerStarted", ("handlerStarted", "predictionsMade"), "predictionsMade")
    if where == "intercept":
        assert_between(at, "serverCallStarted", work, "serviceIntercepted")
    elif where == "before":
        assert_between(at, "interceptorsEntered", work, "handlerStarted")
    else:
        assert_between(at, "predictionsMade", work, "interceptorsReturned")
    assert at["interceptorsEntered"] < at["handlerStarted"]
    assert at["predictionsMade"] < at["interceptorsReturned"] <= at["outboundMessageSent"]


@pytest.mark.parametrize("where", ["intercept", "before", "after"])
def test_a_user_interceptors_work_is_outside_the_method_sync(captured, where):
    server = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=2),
        interceptors=[NotingInterceptor(where)],
        pipeline=captured.pipeline,
    )
    server.add_generic_rpc_handlers([echo_service.sync_handlers()])
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"127.0.0.1:{port}"
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=captured.pipeline)
    try:
        assert echo_service.multicallables(channel)["Echo"](MESSAGE).value == MESSAGE.value
        [(_client, span)] = captured.pairs().items()
    finally:
        channel.close()
        server.stop(0)
    assert_work_is_the_chains(timeline(span), where)


async def _aio_call(captured, where: str) -> None:
    server = instrumented_aio_server(
        interceptors=[AioNotingInterceptor(where)], pipeline=captured.pipeline
    )
    server.add_generic_rpc_handlers([echo_service.async_handlers()])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    target = f"127.0.0.1:{port}"
    channel = instrument_aio_channel(
        grpc.aio.insecure_channel(target), target, pipeline=captured.pipeline
    )
    try:
        reply = await echo_service.multicallables(channel)["Echo"](MESSAGE)
        assert reply.value == MESSAGE.value
    finally:
        await channel.close()
        await server.stop(0)


@pytest.mark.parametrize("where", ["intercept", "before", "after"])
def test_a_user_interceptors_work_is_outside_the_method_aio(captured, where):
    asyncio.run(_aio_call(captured, where))
    [(_client, span)] = captured.pairs().items()
    assert_work_is_the_chains(timeline(span), where)


def test_a_mark_ends_the_prediction_and_starts_post_processing(captured, sync_client):
    sync_client["Echo"](BytesValue(value=b"mark"))
    [(_client, span)] = captured.pairs().items()
    at = timeline(span)
    names = [event.name for event in span.events]
    assert names.count("predictionsMade") == 1 and names.count("handlerReturned") == 1
    assert at["handlerStarted"] < at["predictionsMade"] < at["handlerReturned"]
    assert at["handlerReturned"] <= at["interceptorsReturned"]
    # The first mark counts; a second one in the same call is ignored and says so.
    assert span.attributes["test.marked"] is True
    assert span.attributes["test.marked_again"] is False


def test_without_a_mark_predictions_made_is_the_methods_return(captured, sync_client):
    sync_client["Echo"](MESSAGE)
    [(_client, span)] = captured.pairs().items()
    names = [event.name for event in span.events]
    assert "handlerReturned" not in names
    assert names.index("handlerStarted") + 1 == names.index("predictionsMade")


def test_marking_outside_a_call_is_harmless():
    assert mark_predictions_made() is False


def test_a_hand_built_server_times_its_servicers_once_asked(captured):
    """server_interceptor() on grpc.server: time_servicers() before registering gives the
    innermost timing; without it the chain is all we see (predictionsMade at its return)."""
    spans = {}
    for timed in (True, False):
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2),
            interceptors=[server_interceptor(captured.pipeline)],
        )
        if timed:
            assert time_servicers(server) is server
            time_servicers(server)  # idempotent
        server.add_generic_rpc_handlers([echo_service.sync_handlers()])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        target = f"127.0.0.1:{port}"
        channel = instrument_channel(
            grpc.insecure_channel(target), target, pipeline=captured.pipeline
        )
        echo_service.multicallables(channel)["Echo"](MESSAGE)
        [(_client, spans[timed])] = captured.pairs().items()
        captured.exporter.clear()
        channel.close()
        server.stop(0)
    timed_names = [event.name for event in spans[True].events]
    assert timed_names.count("handlerStarted") == 1  # once, though asked twice
    assert "interceptorsReturned" in timed_names
    plain_names = [event.name for event in spans[False].events]
    assert "handlerStarted" not in plain_names and "interceptorsReturned" not in plain_names
    assert "predictionsMade" in plain_names


def test_registered_method_handlers_are_timed(captured):
    """Generated code registers each method by name too (grpcio then skips the generic
    lookup): those handlers are timed innermost as well."""
    server = instrumented_server(
        futures.ThreadPoolExecutor(max_workers=2), pipeline=captured.pipeline
    )
    methods = {
        "Echo": grpc.unary_unary_rpc_method_handler(
            echo_service.echo,
            request_deserializer=BytesValue.FromString,
            response_serializer=BytesValue.SerializeToString,
        )
    }
    server.add_registered_method_handlers(echo_service.SERVICE, methods)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    target = f"127.0.0.1:{port}"
    channel = instrument_channel(grpc.insecure_channel(target), target, pipeline=captured.pipeline)
    try:
        echo_service.multicallables(channel)["Echo"](MESSAGE)
        [(_client, span)] = captured.pairs().items()
    finally:
        channel.close()
        server.stop(0)
    names = [event.name for event in span.events]
    assert names.index("handlerStarted") < names.index("predictionsMade")


def test_the_instrumentor_times_servicers_innermost(captured):
    GrpcOverheadInstrumentor().instrument(pipeline=captured.pipeline)
    try:
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2), interceptors=[NotingInterceptor("after")]
        )
        server.add_generic_rpc_handlers([echo_service.sync_handlers()])
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        echo_service.multicallables(channel)["Echo"](MESSAGE)
        [(_client, span)] = captured.pairs().items()
        channel.close()
        server.stop(0)
    finally:
        GrpcOverheadInstrumentor().uninstrument()
    assert_work_is_the_chains(timeline(span), "after")

"""The object a sync streaming call returns: grpcio's call, whose iteration also ends the
call's record (at the stream's end, an error, or when the reader drops the stream)."""

from __future__ import annotations

from typing import Any

import grpc

from grpc_overhead.instrumentation.client_calls import finish_from_call
from grpc_overhead.instrumentation.coexistence import enter_client_call, leave_client_call
from grpc_overhead.instrumentation.records import CallRecord


class StreamingCall:
    """The call object a streaming call returns, plus: the record ends with the stream.

    Everything but iteration is delegated to grpcio's call object. A stream whose
    reader stops early is finished when this object is garbage-collected.
    """

    __slots__ = ("_call", "_record")

    def __init__(self, call: Any, record: CallRecord) -> None:
        self._call = call
        self._record = record

    def __iter__(self) -> StreamingCall:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._call)
        except StopIteration:
            finish_from_call(self._record, self._call)
            raise
        except grpc.RpcError as error:
            finish_from_call(self._record, error)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)

    def __del__(self) -> None:
        record = self._record
        done = getattr(self._call, "done", None)
        if not record.finished and done is not None and done():
            try:
                finish_from_call(record, self._call)
            except Exception:
                pass


class LazyStreamingCall(StreamingCall):
    """A stream another instrumentation's client interceptor returned as a generator
    (opentelemetry-instrumentation-grpc, unary-stream): it starts the call, and its span,
    on the first ``next()``, so that one runs with our call current (coexistence.py).

    Their generator keeps its span current from the first ``next()`` until the stream
    ends, and then restores the context it found: ours. So ours is left only after
    theirs (at the stream's end, an error, or when the reader drops the stream);
    leaving it at the first ``next()`` would let their restore make our span current
    in the caller for good.
    """

    __slots__ = ("_started", "_tokens")

    def __init__(self, call: Any, record: CallRecord) -> None:
        super().__init__(call, record)
        self._started = False
        self._tokens: tuple[object, object] | None = None

    def __next__(self) -> Any:
        if not self._started:
            self._started = True
            self._tokens = enter_client_call(self._record)
        try:
            return super().__next__()
        except BaseException:
            self._leave()
            raise

    def _leave(self) -> None:
        tokens, self._tokens = self._tokens, None
        if tokens is not None:
            try:
                leave_client_call(tokens)
            except ValueError:  # dropped in another context (garbage collection)
                pass

    def __del__(self) -> None:
        super().__del__()
        self._leave()

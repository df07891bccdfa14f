"""Transport-level timing for grpcio: every call's client and server spans carry the
events of gRPC's StreamTracer vocabulary (requestCreated ... clientReceivedResponse).

The hot path records integers only (see records.py); spans are built and exported
by a worker (pipeline.py). Wire it explicitly with the factories below, or let
``opentelemetry-instrument`` do it through ``GrpcOverheadInstrumentor``.
"""

from grpc_overhead.instrumentation.aio_client import instrument_aio_channel
from grpc_overhead.instrumentation.annotations import annotate_call, call_attributes
from grpc_overhead.instrumentation.client import instrument_channel
from grpc_overhead.instrumentation.executor import timed_executor
from grpc_overhead.instrumentation.instrumentor import GrpcOverheadInstrumentor
from grpc_overhead.instrumentation.pipeline import (
    SpanPipeline,
    default_pipeline,
    set_default_pipeline,
)
from grpc_overhead.instrumentation.sampling import Sampling
from grpc_overhead.instrumentation.server import (
    aio_server_interceptor,
    instrumented_aio_server,
    instrumented_server,
    server_interceptor,
)
from grpc_overhead.instrumentation.servicers import mark_predictions_made, time_servicers

__all__ = [
    "GrpcOverheadInstrumentor",
    "Sampling",
    "SpanPipeline",
    "aio_server_interceptor",
    "annotate_call",
    "call_attributes",
    "default_pipeline",
    "instrument_aio_channel",
    "instrument_channel",
    "instrumented_aio_server",
    "instrumented_server",
    "mark_predictions_made",
    "server_interceptor",
    "set_default_pipeline",
    "time_servicers",
    "timed_executor",
]

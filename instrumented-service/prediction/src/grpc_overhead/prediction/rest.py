"""The REST baseline's shared contract: routes, bodies, and how its spans are traced.

The same model over HTTP/1.1 (server: uvicorn + starlette, ``rest_server``;
client: requests, ``load_generator.rest_client``), so an experiment can put
REST and gRPC side by side:

=====================  ==================================================  ===========
route                  request body                                        response
=====================  ==================================================  ===========
POST /v1/predict       JSON ``{"request_id", "query": {"text",            JSON
                       "embedding"}, "entities": [{"id", "features"}]}``  ``{"request_id",
                       or ``{"request_id", "image_base64"}``                "scores",
POST /v1/predict/image the image's bytes (application/octet-stream),       "model_version",
                       request id in ``X-Request-Id``                       "server_instance_id"}``
=====================  ==================================================  ===========

Spans come from OpenTelemetry's own HTTP instrumentations (``requests`` on
the client, the ASGI middleware on the server: SpanKind CLIENT/SERVER, W3C
``traceparent`` propagation, ``http.*`` attributes). Our code adds the same
transport events the gRPC instrumentation records, at the equivalent
moments, so the analyzer splits a REST call into the same phases:

- client: ``requestCreated`` / ``outboundMessage`` (JSON encoding starts),
  ``outboundMessageSent`` (encoded, handed to the connection),
  ``clientReceivedResponse`` (the whole response body arrived: decoding
  starts), ``inboundMessageRead`` (decoded);
- server: ``serverCallStarted`` (the endpoint runs: headers and body read by
  uvicorn), ``callScheduled`` (a model thread took the request),
  ``inboundMessage`` / ``inboundMessageRead`` (JSON or base64 decoding),
  ``predictionsMade``, ``outboundMessage`` / ``outboundMessageSent`` (the
  response encoded and handed to uvicorn).

As for gRPC, converting decoded values into the model's arrays (and the
scores back) is processing, and body sizes ride on the ``*Sent``/``*Read``
events as ``rpc.message.uncompressed_size``. The spans carry
``grpc_overhead.transport=rest`` (the analyzer assembles such spans beside
gRPC's), ``rpc.service=rest.Predictor`` and ``rpc.method`` (``Predict``,
``PredictImage``), so a REST run reads like a method in every breakdown;
``rpc.system`` is left unset: this is HTTP, not an RPC system.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grpc_overhead.instrumentation.clock import now, to_wall_ns
from grpc_overhead.instrumentation.environment import instrumentation_disabled

PATH_PREDICT = "/v1/predict"
PATH_IMAGE = "/v1/predict/image"
REQUEST_ID_HEADER = "X-Request-Id"
SERVICE = "rest.Predictor"
TRANSPORT_ATTRIBUTE = "grpc_overhead.transport"
SIZE_ATTRIBUTE = "rpc.message.uncompressed_size"
#: A span's BatchSpanProcessor queue: an experiment cell's spans must not be dropped.
MAX_QUEUE_SPANS = 200_000

Event = tuple[str, int, dict[str, Any]]  # (name, perf_counter_ns, attributes)

__all__ = [
    "PATH_IMAGE",
    "PATH_PREDICT",
    "REQUEST_ID_HEADER",
    "SERVICE",
    "add_events",
    "now",
    "span_attributes",
    "tracer_provider",
]


def span_attributes(method: str) -> dict[str, Any]:
    return {TRANSPORT_ATTRIBUTE: "rest", "rpc.service": SERVICE, "rpc.method": method}


def add_events(span: Any, events: Sequence[Event], attributes: dict[str, Any]) -> None:
    """Put the recorded moments (monotonic ns) on ``span`` as wall-clock events."""
    if not span.is_recording():
        return
    span.set_attributes(attributes)
    for name, moment, extra in events:
        span.add_event(name, extra, timestamp=to_wall_ns(moment))


def tracer_provider() -> Any:
    """An SDK TracerProvider exporting OTLP/gRPC to ``OTEL_EXPORTER_OTLP_ENDPOINT``.

    Resource: the same ``process_resource`` as our gRPC spans (host.name, clock
    domain, service.name from ``OTEL_SERVICE_NAME``). The batch queue is large
    and flushed often, so a bounded run loses no span.
    """
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from grpc_overhead.instrumentation.resource import process_resource

    provider = TracerProvider(resource=process_resource())
    if instrumentation_disabled():  # the off switch covers the REST baseline too
        return provider
    processor = BatchSpanProcessor(
        OTLPSpanExporter(),
        max_queue_size=MAX_QUEUE_SPANS,
        schedule_delay_millis=500,
        max_export_batch_size=2048,
    )
    provider.add_span_processor(processor)
    return provider

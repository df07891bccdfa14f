"""The resource every span carries: the analyzer's clock domains come from here.

``host.name`` says which clock a timestamp was read from (processes on one host
share it); ``service.instance.id`` tells processes apart. Both are filled in by
default and can be overridden through ``OTEL_RESOURCE_ATTRIBUTES`` (the clock-skew
tests use that to declare a process a separate host). When an SDK
TracerProvider is installed (``opentelemetry-instrument``), its resource is used
as the base so our spans and the application's agree on service identity.
"""

from __future__ import annotations

import os
import socket
import uuid

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource

from grpc_overhead.instrumentation.vocabulary import RESOURCE_HOST_NAME, RESOURCE_INSTANCE_ID

_INSTANCE_ID = str(uuid.uuid4())


def process_resource() -> Resource:
    defaults = Resource(
        {
            RESOURCE_HOST_NAME: socket.gethostname(),
            RESOURCE_INSTANCE_ID: _INSTANCE_ID,
            "process.pid": os.getpid(),
        }
    )
    provider = trace.get_tracer_provider()
    configured = getattr(provider, "resource", None)
    if not isinstance(configured, Resource):
        configured = Resource.create()
    # merge(): the argument wins, so OTEL_RESOURCE_ATTRIBUTES and the provider's
    # resource override our defaults.
    return defaults.merge(configured)

"""The load generator's REST client: requests over HTTP/1.1 keep-alive connections.

Traced by OpenTelemetry's own ``requests`` instrumentation (one CLIENT span
per call, ``traceparent`` injected); our ``TimedAdapter`` records the
transport events of ``prediction.rest`` inside that span: encoding the body
happens in the adapter (``Deferred``), after the span started, as gRPC's
serializer runs inside its call, and the response body is read and decoded
there too, before the span ends.

HTTP/1.1 has one request in flight per connection, so "channels" do not
apply: every caller thread gets its own session holding one connection
(``RestChannels``), which is what a threaded REST client does.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import requests
from requests.adapters import HTTPAdapter

from grpc_overhead.prediction import rest
from grpc_overhead.prediction.protos import prediction_pb2 as pb

BODIES = ("json", "binary", "base64")
_instrumented = threading.Lock()
_provider: list[Any] = []


class RestCallError(Exception):
    """A REST call that failed: ``status`` names it like a gRPC status (HTTP_400, UNAVAILABLE)."""

    def __init__(self, status: str, details: str) -> None:
        super().__init__(f"{status}: {details}")
        self.status = status
        self.details = details


@dataclass(frozen=True)
class RestBody:
    """One pre-built request: Python values, encoded at call time (as a client does)."""

    kind: str  # json | binary | base64
    request_id: str
    value: Any  # dict for json; the image bytes for binary and base64

    @property
    def path(self) -> str:
        return rest.PATH_IMAGE if self.kind == "binary" else rest.PATH_PREDICT

    @property
    def method(self) -> str:
        return "PredictImage" if self.kind == "binary" else "Predict"

    def encode(self) -> tuple[bytes, str]:
        if self.kind == "binary":
            return self.value, "application/octet-stream"
        if self.kind == "base64":
            image = base64.b64encode(self.value).decode("ascii")
            return json.dumps({"request_id": self.request_id, "image_base64": image}).encode(), (
                "application/json"
            )
        return json.dumps(self.value).encode(), "application/json"

    def wire_bytes(self) -> int:
        return len(self.encode()[0])


def rest_body(request: pb.PredictRequest, kind: str) -> RestBody:
    """The REST form of a prediction request (built once per payload variant)."""
    if kind not in BODIES:
        raise ValueError(f"unknown REST body {kind!r}; expected one of {', '.join(BODIES)}")
    which = request.WhichOneof("features")
    if which == "image":
        if kind == "json":
            kind = "base64"  # JSON carries an image as base64 text
        return RestBody(kind, request.request_id, bytes(request.image.data))
    if kind != "json":
        raise ValueError(f"REST body {kind} carries images; structured requests are JSON")
    if which == "packed":
        raise ValueError("REST requests carry features as JSON lists (encoding repeated)")
    document = {
        "request_id": request.request_id,
        "query": {"text": request.query.text, "embedding": list(request.query.embedding)},
        "entities": [{"id": e.id, "features": list(e.features)} for e in request.entities.entities],
    }
    return RestBody("json", request.request_id, document)


@dataclass
class RestResponse:
    scores: np.ndarray
    server_instance_id: str


class Deferred:
    """A request body encoded by ``TimedAdapter`` inside the call's span."""

    def __init__(self, body: RestBody, attributes: dict[str, Any]) -> None:
        self.body = body
        self.attributes = attributes
        self.response: RestResponse | None = None


class TimedAdapter(HTTPAdapter):
    """Encodes the body, sends it, reads and decodes the response, recording each moment."""

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        if not isinstance(request.body, Deferred):  # not a prediction (the warm-up GET)
            return super().send(request, stream, timeout, verify, cert, proxies)
        deferred: Deferred = request.body
        from opentelemetry import trace

        created = rest.now()
        events: list[rest.Event] = [
            ("requestCreated", created, {}),
            ("outboundMessage", created, {}),
        ]
        payload, content_type = deferred.body.encode()
        events.append(("outboundMessageSent", rest.now(), {rest.SIZE_ATTRIBUTE: len(payload)}))
        request.body = payload
        request.headers["Content-Length"] = str(len(payload))
        request.headers["Content-Type"] = content_type
        span = trace.get_current_span()
        try:
            response = super().send(
                request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies
            )
            content = response.content  # the whole body: "response arrived" = decoding starts
            arrived = rest.now()
            events.append(("clientReceivedResponse", arrived, {}))
            if response.status_code == 200:
                document = json.loads(content)
                deferred.response = RestResponse(
                    np.asarray(document["scores"], dtype=np.float32),
                    str(document.get("server_instance_id", "")),
                )
                events.append(
                    ("inboundMessageRead", rest.now(), {rest.SIZE_ATTRIBUTE: len(content)})
                )
            return response
        finally:
            rest.add_events(span, events, deferred.attributes)


class RestStub:
    """One caller's connection to one target."""

    def __init__(self, target: str, attributes: dict[str, Any]) -> None:
        self.base = f"http://{target}"
        self.attributes = attributes
        self.session = requests.Session()
        adapter = TimedAdapter(pool_connections=1, pool_maxsize=1, max_retries=0)
        self.session.mount("http://", adapter)

    def predict(self, body: RestBody, timeout: float | None) -> RestResponse:
        headers = {rest.REQUEST_ID_HEADER: body.request_id} if body.kind == "binary" else {}
        prepared = requests.Request("POST", self.base + body.path, headers=headers).prepare()
        deferred = Deferred(body, {**self.attributes, **rest.span_attributes(body.method)})
        prepared.body = deferred
        try:
            response = self.session.send(prepared, timeout=timeout)
        except requests.Timeout as error:
            raise RestCallError("DEADLINE_EXCEEDED", _first_line(error)) from None
        except requests.ConnectionError as error:
            raise RestCallError("UNAVAILABLE", _first_line(error)) from None
        if response.status_code != 200 or deferred.response is None:
            raise RestCallError(f"HTTP_{response.status_code}", response.text[:200])
        return deferred.response

    def close(self) -> None:
        self.session.close()


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def instrument() -> Any:
    """Instrument ``requests`` once per process with our provider; returns the provider."""
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    with _instrumented:
        if not _provider:
            provider = rest.tracer_provider()
            RequestsInstrumentor().instrument(tracer_provider=provider)
            _provider.append(provider)
        return _provider[0]


def shutdown() -> None:
    """Flush and stop the REST spans' provider (end of the run)."""
    with _instrumented:
        if _provider:
            _provider.pop().shutdown()


class RestChannels:
    """``connections`` REST stubs per target (one per caller), checked before the clock starts."""

    def __init__(self, targets: list[str], connections: int, attributes: dict[str, Any]) -> None:
        instrument()
        self.targets = targets
        self.stubs = [[RestStub(t, attributes) for _ in range(connections)] for t in targets]

    def wait_ready(self, timeout_s: float) -> None:
        """Open every connection (an unknown route answers 404: the server is there);
        ConnectionError naming the target if one cannot be reached."""
        from opentelemetry.instrumentation.utils import suppress_http_instrumentation

        for target, stubs in zip(self.targets, self.stubs, strict=True):
            for stub in stubs:
                try:
                    with suppress_http_instrumentation():
                        stub.session.get(stub.base + "/", timeout=timeout_s)
                except requests.RequestException as error:
                    raise ConnectionError(
                        f"cannot connect to {target} within {timeout_s:g} s (is `grpc-overhead "
                        f"service --rest` running there?): {_first_line(error)}"
                    ) from None

    def close(self) -> None:
        for stubs in self.stubs:
            for stub in stubs:
                stub.close()

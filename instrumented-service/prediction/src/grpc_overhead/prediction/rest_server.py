"""The prediction service over HTTP/1.1: uvicorn + starlette, traced by OpenTelemetry's ASGI
middleware plus our transport events (``prediction.rest`` describes routes and events).

uvicorn runs one asyncio loop that reads requests; each request's decoding,
scoring and encoding run on a pool of ``workers`` threads (as the sync gRPC
server's handlers do), so the two transports differ in their protocol and
framework, not in how much of the model runs at once. A bad body is a 400
with a one-line JSON ``{"error"}``; it never reaches the model.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import signal
import socket
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

import numpy as np

from grpc_overhead.prediction import rest
from grpc_overhead.prediction.image import image_features
from grpc_overhead.prediction.server import BadRequest, Scorer, ServiceConfig, make_scorer

MAX_BODY_BYTES = 64 * 1024 * 1024


class RestHandler:
    """Decode, score, encode one request, recording the moments ``rest`` names."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def json_request(self, body: bytes, started: int) -> tuple[int, bytes, list[rest.Event]]:
        events: list[rest.Event] = [
            ("serverCallStarted", started, {}),
            ("callScheduled", rest.now(), {}),
        ]
        events.append(("inboundMessage", rest.now(), {}))
        try:
            document = json.loads(body)
            if not isinstance(document, dict):
                raise BadRequest("the body must be a JSON object")
            image = document.get("image_base64")
            data = base64.b64decode(image, validate=True) if image is not None else None
        except (ValueError, binascii.Error) as error:
            return self._refuse(events, f"body is not valid JSON/base64: {error}")
        except BadRequest as error:
            return self._refuse(events, str(error))
        events.append(("inboundMessageRead", rest.now(), {rest.SIZE_ATTRIBUTE: len(body)}))
        request_id = str(document.get("request_id", ""))
        if data is not None:
            return self._score(events, request_id, lambda: image_features(data), None)
        return self._score(
            events, request_id, lambda: _matrix(document), lambda: _embedding(document)
        )

    def image_request(self, body: bytes, request_id: str, started: int):
        events: list[rest.Event] = [
            ("serverCallStarted", started, {}),
            ("callScheduled", rest.now(), {}),
        ]
        moment = rest.now()  # the body is the image: nothing to decode
        events.append(("inboundMessage", moment, {}))
        events.append(("inboundMessageRead", moment, {rest.SIZE_ATTRIBUTE: len(body)}))
        return self._score(events, request_id, lambda: image_features(body), None)

    def _score(
        self,
        events,
        request_id: str,
        features: Callable[[], np.ndarray],
        embedding: Callable[[], np.ndarray] | None,
    ) -> tuple[int, bytes, list[rest.Event]]:
        """Decoded values -> arrays -> model -> response document -> JSON (processing, then
        response serialization, as in the gRPC handler)."""
        try:
            matrix = features()
            query = embedding() if embedding is not None else np.zeros(0, np.float32)
            scores = self.scorer.model.predict(matrix, query)
        except (ValueError, BadRequest) as error:
            return self._refuse(events, f"request {request_id!r}: {error}")
        document = {
            "request_id": request_id,
            "scores": scores.tolist(),
            "model_version": self.scorer.model.version,
            "server_instance_id": self.scorer.instance_id,
        }
        events.append(("predictionsMade", rest.now(), {}))
        events.append(("outboundMessage", rest.now(), {}))
        payload = json.dumps(document).encode()
        events.append(("outboundMessageSent", rest.now(), {rest.SIZE_ATTRIBUTE: len(payload)}))
        return 200, payload, events

    def _refuse(self, events, message: str) -> tuple[int, bytes, list[rest.Event]]:
        return 400, json.dumps({"error": message.splitlines()[0][:300]}).encode(), events


def _matrix(document: dict[str, Any]) -> np.ndarray:
    entities = document.get("entities")
    if not isinstance(entities, list):
        raise BadRequest("'entities' must be a list of {id, features}")
    if not entities:
        return np.zeros((0, 0), np.float32)
    try:
        rows = [entity["features"] for entity in entities]
        matrix = np.asarray(rows, dtype=np.float32)
    except (KeyError, TypeError, ValueError):
        raise BadRequest("every entity needs 'features': a list of numbers of one length") from None
    if matrix.ndim != 2:
        raise BadRequest("feature count mismatch between entities")
    return matrix


def _embedding(document: dict[str, Any]) -> np.ndarray:
    query = document.get("query") or {}
    try:
        return np.asarray(query.get("embedding") or [], dtype=np.float32).reshape(-1)
    except (AttributeError, TypeError, ValueError):
        raise BadRequest("'query.embedding' must be a list of numbers") from None


def build_app(config: ServiceConfig, provider: Any) -> tuple[Any, futures.ThreadPoolExecutor]:
    """The starlette app wrapped in OpenTelemetry's ASGI middleware, and its model pool."""
    from opentelemetry import trace
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    handler = RestHandler(make_scorer(config))
    pool = futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="rest")

    async def respond(method: str, work: Callable[[], Any]) -> Response:
        status, payload, events = await asyncio.get_running_loop().run_in_executor(pool, work)
        rest.add_events(trace.get_current_span(), events, rest.span_attributes(method))
        return Response(payload, status_code=status, media_type="application/json")

    async def predict(request: Request) -> Response:
        started = rest.now()
        body = await _body(request)
        if body is None:
            return _too_large()
        return await respond("Predict", lambda: handler.json_request(body, started))

    async def predict_image(request: Request) -> Response:
        started = rest.now()
        body = await _body(request)
        if body is None:
            return _too_large()
        request_id = request.headers.get(rest.REQUEST_ID_HEADER, "")
        return await respond(
            "PredictImage", lambda: handler.image_request(body, request_id, started)
        )

    app = Starlette(
        routes=[
            Route(rest.PATH_PREDICT, predict, methods=["POST"]),
            Route(rest.PATH_IMAGE, predict_image, methods=["POST"]),
        ]
    )
    traced = OpenTelemetryMiddleware(
        app, tracer_provider=provider, exclude_spans=["receive", "send"]
    )
    return FreshContext(traced), pool


class FreshContext:
    """Run each request in an empty OpenTelemetry context.

    uvicorn resumes reading a connection from inside the previous request's task
    when a large body paused it (flow control), so the next request's task
    inherits that request's context: the ASGI middleware then sees a current
    span and makes an INTERNAL child of the previous call instead of a SERVER
    span continuing the client's trace (measured: 108 of 110 image requests).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from opentelemetry import context

        token = context.attach(context.Context())
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)


async def _body(request: Any) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        return None
    return await request.body()


def _too_large() -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse({"error": f"body larger than {MAX_BODY_BYTES} bytes"}, status_code=413)


def bind(config: ServiceConfig) -> socket.socket:
    """The listening socket (so ``--port 0`` is known before uvicorn starts)."""
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY only on sockets whose proto is
    # IPPROTO_TCP, and without it Nagle + delayed ACK add ~40 ms to every response
    # written in two parts (headers, body) on a kept-alive connection.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((config.host, config.port))
        sock.listen(2048)
    except OSError as error:
        sock.close()
        raise OSError(f"cannot listen on {config.host}:{config.port}: {error.strerror}") from None
    return sock


def serve(config: ServiceConfig, announce: Callable[[int], None]) -> int:
    """Run until SIGTERM/SIGINT (uvicorn's own graceful shutdown), then flush the spans."""
    import uvicorn

    provider = rest.tracer_provider()
    app, pool = build_app(config, provider)
    sock = bind(config)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=int(config.grace_s) or None,
        )
    )
    # uvicorn re-raises the signal that stopped it once it has shut down (signal.raise_signal
    # with the handler it found): with the default one the process died there, before the
    # spans below were flushed, and the last calls' server spans were lost. A handler that
    # only notes the signal lets the flush run; one that arrives before uvicorn took over
    # (between the announcement and server.run) stops it as soon as it runs.
    previous = _note_signals(server)
    try:
        announce(sock.getsockname()[1])
        server.run(sockets=[sock])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        sock.close()
        provider.shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _note_signals(server: Any) -> dict[int, Any]:
    """SIGTERM and SIGINT ask ``server`` to exit (main thread only); the handlers replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def exit_soon(_signum: int, _frame: Any) -> None:
        server.should_exit = True

    return {sig: signal.signal(sig, exit_soon) for sig in (signal.SIGTERM, signal.SIGINT)}

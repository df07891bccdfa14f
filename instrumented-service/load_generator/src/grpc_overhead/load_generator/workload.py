"""What one call sends and how it is checked, per mode.

The payloads are generated once, before the run (``VARIANTS`` distinct ones,
cycled through), so the client's own work during the run is what a real client
does: serialize, send, receive, deserialize, decode the scores.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from grpc_overhead.prediction import codec as codecs
from grpc_overhead.prediction import payload as payloads
from grpc_overhead.prediction.protos import prediction_pb2 as pb

MODES = ("unary", "stream", "batch", "chunks", "upload")
METHODS = {
    "unary": "Predict",
    "stream": "PredictStream",
    "batch": "PredictBatch",
    "chunks": "PredictChunks",
    "upload": "PredictUpload",
}
VARIANTS = 8


class BadResponse(Exception):
    """The server answered OK but the response does not match the request."""


@dataclass(frozen=True)
class WorkloadSpec:
    mode: str = "unary"
    entities: int = 200
    features: int = 32
    encoding: str = "repeated"
    codec: str = "none"
    stream_messages: int = 10
    #: stream: each request waits for the previous response (no request waits in the
    #: server's buffer while the handler works, so per-message transfer is the wire's)
    stream_lockstep: bool = False
    batch_size: int = 8
    chunk_entities: int = 64
    seed: int = 0
    payload: str = "structured"  # or "image": image_bytes of JPEG-like bytes per request
    image_bytes: int = 230_000
    transport: str = "grpc"  # or "rest": HTTP/1.1 JSON (rest_client)
    rest_body: str = "json"  # rest images: json (base64 inside JSON) or binary

    @property
    def entities_per_request(self) -> int:
        return 1 if self.payload == "image" else self.entities


class Workload:
    """Pre-built payloads for one mode and a function performing one call."""

    def __init__(self, spec: WorkloadSpec) -> None:
        if spec.mode not in MODES:
            raise ValueError(f"unknown mode {spec.mode!r}; expected one of {', '.join(MODES)}")
        self.spec = spec
        rng = np.random.default_rng(spec.seed)
        self.method = METHODS[spec.mode]
        self._payloads: list[Any] = [self._build(rng, v) for v in range(VARIANTS)]
        if spec.transport == "rest":
            from grpc_overhead.load_generator.rest_client import rest_body

            if spec.mode != "unary":
                raise ValueError(f"REST runs mode unary only, not {spec.mode}")
            self._payloads = [rest_body(request, spec.rest_body) for request in self._payloads]
        self.predictions_per_call = spec.entities_per_request * {
            "stream": spec.stream_messages,
            "batch": spec.batch_size,
        }.get(spec.mode, 1)
        self._invoke: Callable[[Any, Any, float | None], tuple[int, str]] = getattr(
            self, "_rest" if spec.transport == "rest" else f"_{spec.mode}"
        )

    def _request(self, rng: np.random.Generator, name: str) -> pb.PredictRequest:
        spec = self.spec
        if spec.payload == "image":
            return payloads.make_image_request(rng, spec.image_bytes, name)
        chunk = spec.chunk_entities if spec.mode == "chunks" else 0
        return payloads.make_request(
            rng, spec.entities, spec.features, spec.encoding, spec.codec, name, chunk_entities=chunk
        )

    def _build(self, rng: np.random.Generator, variant: int) -> Any:
        spec = self.spec
        if spec.mode == "stream":
            return [self._request(rng, f"v{variant}-m{m}") for m in range(spec.stream_messages)]
        if spec.mode == "batch":
            return payloads.batch(
                [self._request(rng, f"v{variant}-b{b}") for b in range(spec.batch_size)]
            )
        if spec.mode == "upload":
            return payloads.split_request(self._request(rng, f"v{variant}"), spec.chunk_entities)
        return self._request(rng, f"v{variant}")

    # -- sizes ----------------------------------------------------------------------------
    def payload_info(self) -> dict[str, Any]:
        spec = self.spec
        first = self._payloads[0]
        messages = first if isinstance(first, list) else [first]
        if spec.transport == "rest":
            sizes = [first.wire_bytes()]
        else:
            sizes = [message.ByteSize() for message in messages]
        return {
            "entities": spec.entities,
            "features": spec.features,
            "encoding": spec.encoding,
            "codec": spec.codec,
            "raw_feature_bytes": spec.entities * spec.features * 4,
            "request_messages": len(messages),
            "request_message_bytes": max(sizes) if sizes else 0,
            "request_bytes": sum(sizes),
            "predictions_per_call": self.predictions_per_call,
            "payload": spec.payload,
            "image_bytes": spec.image_bytes if spec.payload == "image" else None,
            "transport": spec.transport,
            "rest_body": spec.rest_body if spec.transport == "rest" else None,
        }

    # -- calls ----------------------------------------------------------------------------
    def call(self, stub: Any, index: int, timeout: float | None) -> tuple[int, str]:
        """Make call number ``index``; return (predictions received, server instance id).

        Raises grpc.RpcError, or BadResponse when the answer does not fit the request.
        """
        return self._invoke(stub, self._payloads[index % VARIANTS], timeout)

    def _expect(self, scores: int, expected: int, what: str) -> None:
        if scores != expected:
            raise BadResponse(f"{what}: {scores} scores for {expected} entities")

    def _unary(self, stub, request, timeout) -> tuple[int, str]:
        response = stub.Predict(request, timeout=timeout)
        expected = self.spec.entities_per_request
        self._expect(len(codecs.decode_scores(response)), expected, "Predict")
        return expected, response.server_instance_id

    def _rest(self, stub, body, timeout) -> tuple[int, str]:
        response = stub.predict(body, timeout=timeout)
        expected = self.spec.entities_per_request
        self._expect(len(response.scores), expected, "POST /v1/predict")
        return expected, response.server_instance_id

    def _stream(self, stub, requests, timeout) -> tuple[int, str]:
        received = 0
        instance = ""
        answered = threading.Semaphore(0)
        done = threading.Event()

        def lockstep() -> Iterator[Any]:
            # grpcio consumes a request iterator on its own thread: blocking here paces it.
            for index, request in enumerate(requests):
                while index and not answered.acquire(timeout=0.05):
                    if done.is_set():
                        return
                yield request

        outgoing = lockstep() if self.spec.stream_lockstep else iter(requests)
        try:
            for response in stub.PredictStream(outgoing, timeout=timeout):
                self._expect(
                    len(codecs.decode_scores(response)), self.spec.entities, "PredictStream"
                )
                received += 1
                instance = response.server_instance_id
                answered.release()
        finally:
            done.set()
        if received != len(requests):
            raise BadResponse(f"PredictStream: {received} responses for {len(requests)} requests")
        return received * self.spec.entities, instance

    def _batch(self, stub, request, timeout) -> tuple[int, str]:
        response = stub.PredictBatch(request, timeout=timeout)
        if len(response.responses) != len(request.requests):
            raise BadResponse(
                f"PredictBatch: {len(response.responses)} responses for "
                f"{len(request.requests)} requests"
            )
        expected = self.spec.entities_per_request
        for item in response.responses:
            self._expect(len(codecs.decode_scores(item)), expected, "PredictBatch")
        return len(response.responses) * expected, response.server_instance_id

    def _chunks(self, stub, request, timeout) -> tuple[int, str]:
        total = 0
        instance = ""
        for response in stub.PredictChunks(request, timeout=timeout):
            total += len(codecs.decode_scores(response))
            instance = response.server_instance_id
        self._expect(total, self.spec.entities, "PredictChunks")
        return total, instance

    def _upload(self, stub, chunks, timeout) -> tuple[int, str]:
        response = stub.PredictUpload(iter(chunks), timeout=timeout)
        self._expect(len(codecs.decode_scores(response)), self.spec.entities, "PredictUpload")
        return self.spec.entities, response.server_instance_id

"""The prediction service: the Predictor servicer (sync and asyncio) and its server.

Every handler decodes the request's features (either encoding, any payload
codec), scores them with :class:`~grpc_overhead.prediction.model.Model`, encodes
the scores in the request's encoding, and annotates the server span with the
payload codec and the number of entities. A malformed request (feature count
mismatch, corrupted or wrongly sized packed payload, unknown codec, too many
features) ends the call with INVALID_ARGUMENT and a message saying what is
wrong; it never reaches the model and never crashes the server.

The unary-response handlers mark ``predictionsMade`` when the model has scored
(``mark_predictions_made``): what follows (annotating the span, encoding the
scores into the response) is the call's ``post_processing``.

Cost accounting: ``model_cost_ms`` is burned once per scored request, i.e. once
per Predict / PredictChunks / PredictUpload call, once per message of
PredictStream and once per request inside a PredictBatch.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import numpy as np

from grpc_overhead.instrumentation import (
    annotate_call,
    default_pipeline,
    instrumented_aio_server,
    instrumented_server,
    mark_predictions_made,
)
from grpc_overhead.prediction import codec as codecs
from grpc_overhead.prediction.model import Model
from grpc_overhead.prediction.protos import prediction_pb2 as pb
from grpc_overhead.prediction.protos import prediction_pb2_grpc as pb_grpc

DEFAULT_CHUNK_ENTITIES = 64
CODEC_ATTRIBUTE = "grpc_overhead.payload.codec"
ENCODING_ATTRIBUTE = "grpc_overhead.payload.encoding"
ENTITIES_ATTRIBUTE = "grpc_overhead.entities"
GRPC_COMPRESSION = {
    "none": grpc.Compression.NoCompression,
    "gzip": grpc.Compression.Gzip,
    "deflate": grpc.Compression.Deflate,
}

T = TypeVar("T")


class BadRequest(ValueError):
    """A request the service refuses: becomes INVALID_ARGUMENT."""


@dataclass
class Scored:
    """One decoded and scored request."""

    request_id: str
    scores: np.ndarray
    encoding: str
    codec: str


class Scorer:
    """The servicer-independent part: decode, validate, score, encode."""

    def __init__(self, model: Model, instance_id: str) -> None:
        self.model = model
        self.instance_id = instance_id

    def score(self, request: pb.PredictRequest, cost_fraction: float = 1.0) -> Scored:
        try:
            _ids, matrix, encoding, codec = codecs.decode_features(request)
            embedding = np.asarray(request.query.embedding, dtype=np.float32)
            scores = self.model.predict(matrix, embedding, cost_fraction)
        except ValueError as error:
            raise BadRequest(_with_id(request.request_id, str(error))) from None
        return Scored(request.request_id, scores, encoding, codec)

    def score_upload(self, chunks: Iterable[pb.PredictRequest]) -> Scored:
        """Collect the chunks of an upload (already read) and score them once."""
        request_id = ""
        query: pb.Query | None = None
        matrices: list[np.ndarray] = []
        encoding = codec = None
        width = None
        for index, chunk in enumerate(chunks):
            try:
                _ids, matrix, chunk_encoding, chunk_codec = codecs.decode_features(chunk)
            except ValueError as error:
                raise BadRequest(f"upload chunk {index}: {error}") from None
            if index == 0:
                request_id = chunk.request_id
                encoding, codec = chunk_encoding, chunk_codec
            if chunk.HasField("query"):
                if query is not None:
                    raise BadRequest(f"upload chunk {index}: the query may be sent only once")
                query = chunk.query
            if chunk_encoding != encoding or chunk_codec != codec:
                raise BadRequest(
                    f"upload chunk {index}: encoding {chunk_encoding}/{chunk_codec} differs "
                    f"from chunk 0's {encoding}/{codec}"
                )
            if matrix.shape[0]:
                if width is None:
                    width = matrix.shape[1]
                elif matrix.shape[1] != width:
                    raise BadRequest(
                        f"feature count mismatch: upload chunk {index} has {matrix.shape[1]} "
                        f"features per entity, earlier chunks {width}"
                    )
                matrices.append(matrix)
        if encoding is None:
            raise BadRequest("empty upload: no request message was sent")
        features = np.concatenate(matrices) if matrices else np.zeros((0, 0), np.float32)
        embedding = np.asarray(query.embedding if query else (), dtype=np.float32)
        try:
            scores = self.model.predict(features, embedding)
        except ValueError as error:
            raise BadRequest(_with_id(request_id, str(error))) from None
        return Scored(request_id, scores, encoding, codec)

    def response(
        self, scored: Scored, start: int = 0, stop: int | None = None
    ) -> pb.PredictResponse:
        response = pb.PredictResponse(
            request_id=scored.request_id,
            entity_offset=start,
            model_version=self.model.version,
            server_instance_id=self.instance_id,
        )
        return codecs.encode_scores(
            response, scored.scores[start:stop], scored.encoding, scored.codec
        )

    def batch_response(self, scored: list[Scored]) -> pb.BatchPredictResponse:
        return pb.BatchPredictResponse(
            responses=[self.response(item) for item in scored],
            model_version=self.model.version,
            server_instance_id=self.instance_id,
        )


def _with_id(request_id: str, message: str) -> str:
    return f"request {request_id!r}: {message}" if request_id else message


def _chunk_size(request: pb.PredictRequest) -> int:
    return request.chunk_entities or DEFAULT_CHUNK_ENTITIES


def _annotate(scored: Iterable[Scored]) -> None:
    items = list(scored)
    codecs_seen = {item.codec for item in items}
    encodings = {item.encoding for item in items}
    annotate_call(CODEC_ATTRIBUTE, codecs_seen.pop() if len(codecs_seen) == 1 else "mixed")
    annotate_call(ENCODING_ATTRIBUTE, encodings.pop() if len(encodings) == 1 else "mixed")
    annotate_call(ENTITIES_ATTRIBUTE, sum(int(item.scores.shape[0]) for item in items))


class PredictorServicer(pb_grpc.PredictorServicer):
    """Handlers for the sync ``grpc.server`` (run on its thread pool)."""

    def __init__(self, scorer: Scorer) -> None:
        self.scorer = scorer

    def _score(self, context: grpc.ServicerContext, compute: Callable[[], T]) -> T:
        try:
            return compute()
        except BadRequest as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            raise  # abort raises; this line is never reached

    def Predict(self, request, context):
        scored = self._score(context, lambda: self.scorer.score(request))
        mark_predictions_made()
        _annotate([scored])
        return self.scorer.response(scored)

    def PredictStream(self, request_iterator, context):
        entities = 0
        for request in request_iterator:
            scored = self._score(context, functools.partial(self.scorer.score, request))
            entities += int(scored.scores.shape[0])
            annotate_call(CODEC_ATTRIBUTE, scored.codec)
            annotate_call(ENCODING_ATTRIBUTE, scored.encoding)
            annotate_call(ENTITIES_ATTRIBUTE, entities)
            yield self.scorer.response(scored)

    def PredictBatch(self, request, context):
        scored = self._score(context, lambda: [self.scorer.score(r) for r in request.requests])
        mark_predictions_made()
        _annotate(scored)
        return self.scorer.batch_response(scored)

    def PredictChunks(self, request, context):
        scored = self._score(context, lambda: self.scorer.score(request))
        _annotate([scored])
        size = _chunk_size(request)
        total = int(scored.scores.shape[0])
        for start in range(0, max(total, 1), size):
            yield self.scorer.response(scored, start, start + size)

    def PredictUpload(self, request_iterator, context):
        scored = self._score(context, lambda: self.scorer.score_upload(request_iterator))
        mark_predictions_made()
        _annotate([scored])
        return self.scorer.response(scored)


class AioPredictorServicer(pb_grpc.PredictorServicer):
    """Async handlers for ``grpc.aio.server``; the model runs on a thread pool.

    Decoding and scoring are CPU work; running them on the event loop would
    serialize every call behind the slowest one, so they go to ``executor``
    (``--workers`` threads), as an async model server would do.
    """

    def __init__(self, scorer: Scorer, executor: futures.Executor) -> None:
        self.scorer = scorer
        self.executor = executor

    async def _run(self, context, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args)
        try:
            return await loop.run_in_executor(self.executor, call)
        except BadRequest as error:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
            raise

    async def Predict(self, request, context):
        scored = await self._run(context, self.scorer.score, request)
        mark_predictions_made()
        _annotate([scored])
        return self.scorer.response(scored)

    async def PredictStream(self, request_iterator, context):
        entities = 0
        async for request in request_iterator:
            scored = await self._run(context, self.scorer.score, request)
            entities += int(scored.scores.shape[0])
            annotate_call(CODEC_ATTRIBUTE, scored.codec)
            annotate_call(ENCODING_ATTRIBUTE, scored.encoding)
            annotate_call(ENTITIES_ATTRIBUTE, entities)
            yield self.scorer.response(scored)

    async def PredictBatch(self, request, context):
        scored = await self._run(context, lambda: [self.scorer.score(r) for r in request.requests])
        mark_predictions_made()
        _annotate(scored)
        return self.scorer.batch_response(scored)

    async def PredictChunks(self, request, context):
        scored = await self._run(context, self.scorer.score, request)
        _annotate([scored])
        size = _chunk_size(request)
        total = int(scored.scores.shape[0])
        for start in range(0, max(total, 1), size):
            yield self.scorer.response(scored, start, start + size)

    async def PredictUpload(self, request_iterator, context):
        chunks = [chunk async for chunk in request_iterator]
        scored = await self._run(context, self.scorer.score_upload, chunks)
        mark_predictions_made()
        _annotate([scored])
        return self.scorer.response(scored)


# --------------------------------------------------------------------------- server


@dataclass
class ServiceConfig:
    host: str = "127.0.0.1"
    port: int = 0
    workers: int = 8
    model_cost_ms: float = 0.0
    model_wait_ms: float = 0.0
    max_concurrent_rpcs: int | None = None
    max_connection_age_s: float | None = None
    max_connection_age_grace_s: float = 5.0
    tls: bool = False
    tls_dir: str | None = None
    aio: bool = False
    compression: str = "none"
    instance_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    max_message_mb: int = 64
    grace_s: float = 5.0
    seed: int | None = None

    def grpc_options(self) -> list[tuple[str, Any]]:
        size = self.max_message_mb * 1024 * 1024
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", size),
            ("grpc.max_send_message_length", size),
            # A fixed --port must fail loudly when taken, not be shared silently.
            ("grpc.so_reuseport", 0),
        ]
        if self.max_connection_age_s:
            options.append(("grpc.max_connection_age_ms", int(self.max_connection_age_s * 1000)))
            options.append(
                ("grpc.max_connection_age_grace_ms", int(self.max_connection_age_grace_s * 1000))
            )
        return options


@dataclass
class TlsFiles:
    directory: Path
    certificate: Path  # also the CA a client trusts (--tls-ca)
    key: Path
    temporary: bool

    def cleanup(self) -> None:
        if self.temporary:
            shutil.rmtree(self.directory, ignore_errors=True)


def prepare_tls(config: ServiceConfig) -> TlsFiles | None:
    if not config.tls:
        return None
    from grpc_overhead.prediction.tls import write_self_signed

    temporary = config.tls_dir is None
    directory = Path(config.tls_dir or tempfile.mkdtemp(prefix="grpc-overhead-tls-"))
    certificate, key = write_self_signed(directory, config.host)
    return TlsFiles(directory, certificate, key, temporary)


def format_address(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _bind(
    server: grpc.Server | grpc.aio.Server, config: ServiceConfig, tls: TlsFiles | None
) -> int:
    address = format_address(config.host, config.port)
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            credentials = grpc.ssl_server_credentials(
                [(tls.key.read_bytes(), tls.certificate.read_bytes())]
            )
            port = server.add_secure_port(address, credentials)
    except RuntimeError as error:
        raise OSError(f"cannot listen on {address}: {error}") from None
    if not port:
        raise OSError(f"cannot listen on {address}")
    return port


def make_scorer(config: ServiceConfig) -> Scorer:
    costs = {"model_cost_ms": config.model_cost_ms, "model_wait_ms": config.model_wait_ms}
    model = Model(**costs) if config.seed is None else Model(seed=config.seed, **costs)
    return Scorer(model, config.instance_id)


def build_server(
    config: ServiceConfig, pipeline=None, tls: TlsFiles | None = None
) -> tuple[grpc.Server, int]:
    """A started-ready (not started) instrumented sync server and its bound port."""
    pool = futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="predictor")
    server = instrumented_server(
        pool,
        pipeline=pipeline if pipeline is not None else default_pipeline(),
        maximum_concurrent_rpcs=config.max_concurrent_rpcs,
        options=config.grpc_options(),
        compression=GRPC_COMPRESSION[config.compression],
    )
    pb_grpc.add_PredictorServicer_to_server(PredictorServicer(make_scorer(config)), server)
    return server, _bind(server, config, tls)


def build_aio_server(
    config: ServiceConfig, pipeline=None, tls: TlsFiles | None = None
) -> tuple[grpc.aio.Server, int, futures.ThreadPoolExecutor]:
    """An instrumented grpc.aio server (call inside a running loop), its port and model pool."""
    pool = futures.ThreadPoolExecutor(max_workers=config.workers, thread_name_prefix="predictor")
    server = instrumented_aio_server(
        pipeline=pipeline if pipeline is not None else default_pipeline(),
        maximum_concurrent_rpcs=config.max_concurrent_rpcs,
        options=config.grpc_options(),
        compression=GRPC_COMPRESSION[config.compression],
    )
    pb_grpc.add_PredictorServicer_to_server(AioPredictorServicer(make_scorer(config), pool), server)
    return server, _bind(server, config, tls), pool


__all__ = [
    "AioPredictorServicer",
    "BadRequest",
    "PredictorServicer",
    "Scorer",
    "ServiceConfig",
    "TlsFiles",
    "build_aio_server",
    "build_server",
    "format_address",
    "prepare_tls",
]

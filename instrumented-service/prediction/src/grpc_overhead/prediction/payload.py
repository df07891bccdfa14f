"""Synthetic ranking payloads: realistic-looking queries and entity features.

Features are not uniform noise (which no codec can compress, unlike real
feature vectors): each column has a kind, fixed per column index, as in a
typical store-ranking feature set:

* 25 % binary flags (0.0 / 1.0: open now, has delivery, ...),
* 25 % small counts (integers 0..50: reviews today, items in stock, ...),
* 15 % mostly-missing values (0.0 in 80 % of rows, else a float),
* 35 % continuous values (distance, price level, CTR...) rounded to 1/1024.

So compression ratios land between "random" and "all zeros", and differ by
codec the way they do on real tabular features.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grpc_overhead.prediction import codec as codecs
from grpc_overhead.prediction.protos import prediction_pb2 as pb

EMBEDDING_DIM = 16
QUERIES = ("pizza", "sushi near me", "vegan burgers", "coffee", "tacos open now", "ramen")


def make_features(rng: np.random.Generator, entities: int, features: int) -> np.ndarray:
    """An (entities, features) float32 matrix of mixed-kind features."""
    kinds = np.arange(features) % 20  # fixed per column index, independent of rng
    out = np.empty((entities, features), dtype=np.float32)
    binary = kinds < 5
    counts = (kinds >= 5) & (kinds < 10)
    sparse = (kinds >= 10) & (kinds < 13)
    continuous = kinds >= 13
    out[:, binary] = rng.integers(0, 2, size=(entities, int(binary.sum())))
    out[:, counts] = rng.integers(0, 51, size=(entities, int(counts.sum())))
    sparse_values = rng.standard_normal((entities, int(sparse.sum())))
    sparse_values[rng.random(sparse_values.shape) < 0.8] = 0.0
    out[:, sparse] = sparse_values
    out[:, continuous] = np.round(rng.standard_normal((entities, int(continuous.sum()))) * 1024)
    out[:, continuous] /= 1024
    return out


def make_ids(start: int, entities: int) -> list[str]:
    return [f"store-{start + i:07d}" for i in range(entities)]


def make_request(
    rng: np.random.Generator,
    entities: int,
    features: int,
    encoding: str = "repeated",
    codec: str = "none",
    request_id: str = "",
    embedding_dim: int = EMBEDDING_DIM,
    chunk_entities: int = 0,
) -> pb.PredictRequest:
    """One ranking request with ``entities`` x ``features`` features."""
    request = pb.PredictRequest(request_id=request_id, chunk_entities=chunk_entities)
    request.query.text = QUERIES[int(rng.integers(len(QUERIES)))]
    request.query.embedding[:] = rng.standard_normal(embedding_dim).astype(np.float32).tolist()
    first = int(rng.integers(0, 1_000_000))
    codecs.encode_features(
        request, make_ids(first, entities), make_features(rng, entities, features), encoding, codec
    )
    return request


def make_image_request(
    rng: np.random.Generator, image_bytes: int, request_id: str = ""
) -> pb.PredictRequest:
    """One image-scoring request: ``image_bytes`` of JPEG-like bytes, no query embedding."""
    from grpc_overhead.prediction.image import make_image

    request = pb.PredictRequest(request_id=request_id)
    request.query.text = QUERIES[int(rng.integers(len(QUERIES)))]
    request.image.data = make_image(rng, image_bytes)
    request.image.format = "jpeg"
    return request


def split_request(request: pb.PredictRequest, chunk_entities: int) -> list[pb.PredictRequest]:
    """Split a request into upload chunks of at most ``chunk_entities`` entities each.

    The first chunk carries the request id and the query; every chunk keeps the
    request's encoding and codec (each packed chunk is compressed on its own).
    A request with no entities becomes one chunk.
    """
    if chunk_entities <= 0:
        raise ValueError(f"chunk_entities must be > 0, got {chunk_entities}")
    ids, matrix, encoding, codec = codecs.decode_features(request)
    chunks = []
    for start in range(0, max(len(ids), 1), chunk_entities):
        chunk = pb.PredictRequest()
        if start == 0:
            chunk.request_id = request.request_id
            chunk.query.CopyFrom(request.query)
        codecs.encode_features(
            chunk,
            ids[start : start + chunk_entities],
            matrix[start : start + chunk_entities],
            encoding,
            codec,
        )
        chunks.append(chunk)
    return chunks


def entity_count(request: pb.PredictRequest) -> int:
    which = request.WhichOneof("features")
    if which == "image":
        return 1
    if which == "packed":
        return len(request.packed.entity_ids)
    if which == "entities":
        return len(request.entities.entities)
    return 0


def batch(requests: Sequence[pb.PredictRequest]) -> pb.BatchPredictRequest:
    return pb.BatchPredictRequest(requests=list(requests))

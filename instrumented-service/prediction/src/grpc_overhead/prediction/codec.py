"""Feature and score encodings of the prediction service, and payload codecs.

Two encodings of an entities x features float matrix:

* ``repeated``: one ``Entity`` message per entity with ``repeated float features``
  (protobuf's packed varint-free float encoding; the framing per entity costs
  a few bytes and a Python object per entity on both sides);
* ``packed``: one ``PackedFeatures`` message whose ``data`` is the whole matrix
  as float32 little-endian, row-major, optionally compressed at application
  level with a *payload codec*.

Payload codecs (the ``PayloadCodec`` enum in prediction.proto):

=========  ===================================================================
none       raw float32 little-endian bytes
zstd       a zstandard frame (``zstandard``, level 3, content size written)
lz4        an LZ4 frame (``lz4.frame``, default level; frame header + checksum)
snappy     a snappy *raw* block (``cramjam.snappy.compress_raw``): the whole
           blob is one in-memory buffer, so the framing format's stream
           chunking and per-chunk CRC would only add bytes and time
=========  ===================================================================

Every decoder knows the exact expected size (entities x features x 4), checks
it, and raises ``ValueError`` with a message naming the codec and the sizes;
the server turns those into INVALID_ARGUMENT.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence

import numpy as np

from grpc_overhead.prediction.protos import prediction_pb2 as pb

ENCODINGS = ("repeated", "packed")
CODECS = ("none", "zstd", "lz4", "snappy")
FLOAT32_LE = np.dtype("<f4")
ZSTD_LEVEL = 3

_CODEC_TO_ENUM = {
    "none": pb.PAYLOAD_CODEC_NONE,
    "zstd": pb.PAYLOAD_CODEC_ZSTD,
    "lz4": pb.PAYLOAD_CODEC_LZ4,
    "snappy": pb.PAYLOAD_CODEC_SNAPPY,
}
_ENUM_TO_CODEC = {value: name for name, value in _CODEC_TO_ENUM.items()}

_local = threading.local()  # zstd (de)compressor objects are not thread-safe


def check_codec(codec: str) -> str:
    """Return ``codec`` if known, else raise ValueError listing the known ones."""
    if codec not in _CODEC_TO_ENUM:
        raise ValueError(f"unknown payload codec {codec!r}; expected one of {', '.join(CODECS)}")
    return codec


def check_encoding(encoding: str) -> str:
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")
    return encoding


def codec_to_enum(codec: str) -> int:
    return _CODEC_TO_ENUM[check_codec(codec)]


def codec_from_enum(value: int) -> str:
    try:
        return _ENUM_TO_CODEC[value]
    except KeyError:
        raise ValueError(
            f"unknown payload codec enum value {value}; expected one of "
            + ", ".join(f"{v} ({k})" for k, v in _CODEC_TO_ENUM.items())
        ) from None


# --------------------------------------------------------------------------- codecs


def _zstd_compressor():
    compressor = getattr(_local, "zstd_c", None)
    if compressor is None:
        import zstandard

        compressor = _local.zstd_c = zstandard.ZstdCompressor(
            level=ZSTD_LEVEL, write_content_size=True
        )
    return compressor


def _zstd_decompressor():
    decompressor = getattr(_local, "zstd_d", None)
    if decompressor is None:
        import zstandard

        decompressor = _local.zstd_d = zstandard.ZstdDecompressor()
    return decompressor


def compress(data: bytes, codec: str) -> bytes:
    """Compress ``data`` with a payload codec (``none`` returns it unchanged)."""
    check_codec(codec)
    if codec == "none":
        return bytes(data)
    if codec == "zstd":
        return _zstd_compressor().compress(data)
    if codec == "lz4":
        import lz4.frame

        return lz4.frame.compress(data)
    import cramjam

    return bytes(cramjam.snappy.compress_raw(data))


def decompress(data: bytes, codec: str, expected_size: int) -> bytes:
    """Decompress ``data``; raise ValueError if corrupted or not ``expected_size`` bytes."""
    check_codec(codec)
    if codec == "none":
        out = bytes(data)
    else:
        try:
            out = _decompress(data, codec, expected_size)
        except ValueError:
            raise
        except Exception as error:  # each library has its own error types
            raise ValueError(
                f"corrupted {codec} payload ({len(data)} bytes): {_describe(error)}"
            ) from None
    if len(out) != expected_size:
        what = "payload" if codec == "none" else f"{codec} payload decompressed to"
        raise ValueError(
            f"wrong length: {what} {len(out)} bytes, expected {expected_size} "
            "(entities x features x 4)"
        )
    return out


def _decompress(data: bytes, codec: str, expected_size: int) -> bytes:
    if codec == "zstd":
        import zstandard

        if not data:
            raise ValueError("corrupted zstd payload (0 bytes): empty input")
        # Bound the output so a hostile frame cannot allocate unbounded memory.
        try:
            size = zstandard.frame_content_size(data)
        except zstandard.ZstdError as error:
            raise ValueError(
                f"corrupted zstd payload ({len(data)} bytes): {_describe(error)}"
            ) from None
        if size >= 0 and size != expected_size:
            raise ValueError(
                f"wrong length: zstd frame declares {size} bytes, expected {expected_size} "
                "(entities x features x 4)"
            )
        return _zstd_decompressor().decompress(data, max_output_size=max(expected_size, 1))
    if codec == "lz4":
        import lz4.frame

        size = lz4.frame.get_frame_info(data).get("content_size", 0)
        if size and size != expected_size:  # 0 = not recorded in the frame header
            raise ValueError(
                f"wrong length: lz4 frame declares {size} bytes, expected {expected_size} "
                "(entities x features x 4)"
            )
        return lz4.frame.decompress(data)
    import cramjam

    if not data:
        raise ValueError("corrupted snappy payload (0 bytes): empty input")
    length = int(cramjam.snappy.decompress_raw_len(data))
    if length != expected_size:
        raise ValueError(
            f"wrong length: snappy block declares {length} bytes, expected {expected_size} "
            "(entities x features x 4)"
        )
    return bytes(cramjam.snappy.decompress_raw(data))


def _describe(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:200]


# --------------------------------------------------------------------------- matrices


def pack_matrix(matrix: np.ndarray, codec: str = "none") -> bytes:
    """float matrix -> float32 little-endian row-major bytes, compressed with ``codec``."""
    array = np.ascontiguousarray(matrix, dtype=FLOAT32_LE)
    return compress(array.tobytes(), codec)


def unpack_matrix(data: bytes, rows: int, columns: int, codec: str = "none") -> np.ndarray:
    """Inverse of :func:`pack_matrix`; returns a read-only float32 (rows, columns) array."""
    if rows < 0 or columns < 0:
        raise ValueError(f"negative shape {rows} x {columns}")
    expected = rows * columns * FLOAT32_LE.itemsize
    raw = decompress(data, codec, expected)
    return np.frombuffer(raw, dtype=FLOAT32_LE).reshape(rows, columns)


# --------------------------------------------------------------------------- messages


def encode_features(
    request: pb.PredictRequest,
    ids: Sequence[str],
    features: np.ndarray,
    encoding: str = "repeated",
    codec: str = "none",
) -> pb.PredictRequest:
    """Fill ``request``'s features (``ids`` x ``features`` matrix) in the chosen encoding.

    ``codec`` applies to the packed encoding only; asking for a codec other than
    ``none`` with the repeated encoding is an error (there is no blob to compress).
    """
    check_encoding(encoding)
    check_codec(codec)
    matrix = np.asarray(features, dtype=np.float32)
    if matrix.ndim != 2:
        if matrix.size == 0 and len(ids) == 0:
            matrix = matrix.reshape(0, 0)
        else:
            raise ValueError(f"features must be a 2-D matrix, got shape {matrix.shape}")
    if matrix.shape[0] != len(ids):
        raise ValueError(f"{len(ids)} entity ids but {matrix.shape[0]} feature rows")
    if encoding == "repeated":
        if codec != "none":
            raise ValueError(
                f"payload codec {codec!r} needs the packed encoding (repeated has no blob)"
            )
        entities = request.entities.entities
        del entities[:]
        request.entities.SetInParent()  # an empty list is still "repeated encoding"
        rows = matrix.tolist()
        entities.extend(pb.Entity(id=i, features=row) for i, row in zip(ids, rows, strict=True))
    else:
        packed = request.packed
        packed.entity_ids[:] = list(ids)
        packed.feature_count = matrix.shape[1]
        packed.payload_codec = codec_to_enum(codec)
        packed.data = pack_matrix(matrix, codec)
    return request


def decode_features(request: pb.PredictRequest) -> tuple[list[str], np.ndarray, str, str]:
    """Return (ids, float32 matrix, encoding, codec) of a request; ValueError if malformed.

    A request with no features at all decodes as zero entities, repeated encoding;
    an image decodes as one entity of ``image.IMAGE_FEATURES`` features, encoding "image".
    """
    which = request.WhichOneof("features")
    if which == "image":
        from grpc_overhead.prediction.image import image_features

        return ["image"], image_features(request.image.data), "image", "none"
    if which == "packed":
        packed = request.packed
        codec = codec_from_enum(packed.payload_codec)
        ids = list(packed.entity_ids)
        columns = packed.feature_count
        try:
            matrix = unpack_matrix(packed.data, len(ids), columns, codec)
        except ValueError as error:
            raise ValueError(
                f"packed features ({len(ids)} entities x {columns} features, {codec}): {error}"
            ) from None
        return ids, matrix, "packed", codec
    entities = request.entities.entities if which == "entities" else ()
    ids = [entity.id for entity in entities]
    if not ids:
        return ids, np.zeros((0, 0), dtype=np.float32), "repeated", "none"
    columns = len(entities[0].features)
    for index, entity in enumerate(entities):
        if len(entity.features) != columns:
            raise ValueError(
                f"feature count mismatch: entity {entity.id!r} (index {index}) has "
                f"{len(entity.features)} features, entity 0 has {columns}"
            )
    matrix = np.fromiter(
        itertools.chain.from_iterable(entity.features for entity in entities),
        dtype=np.float32,
        count=len(ids) * columns,
    )
    return ids, matrix.reshape(len(ids), columns), "repeated", "none"


def encode_scores(
    response: pb.PredictResponse, scores: np.ndarray, encoding: str, codec: str = "none"
) -> pb.PredictResponse:
    """Fill ``response``'s scores in the request's encoding (packed scores use ``codec``;
    an image request's score is sent repeated)."""
    encoding = "repeated" if encoding == "image" else check_encoding(encoding)
    values = np.asarray(scores, dtype=np.float32).reshape(-1)
    if encoding == "repeated":
        response.score_list.SetInParent()
        response.score_list.scores[:] = values.tolist()
    else:
        packed = response.packed_scores
        packed.count = values.shape[0]
        packed.payload_codec = codec_to_enum(codec)
        packed.data = pack_matrix(values.reshape(-1, 1), codec)
    return response


def decode_scores(response: pb.PredictResponse) -> np.ndarray:
    """Scores of a response as a float32 vector (either encoding); ValueError if malformed."""
    if response.WhichOneof("scores") == "packed_scores":
        packed = response.packed_scores
        codec = codec_from_enum(packed.payload_codec)
        try:
            return unpack_matrix(packed.data, packed.count, 1, codec).reshape(-1)
        except ValueError as error:
            raise ValueError(f"packed scores ({packed.count}, {codec}): {error}") from None
    return np.array(response.score_list.scores, dtype=np.float32)

from __future__ import annotations

import numpy as np
import pytest

from grpc_overhead.prediction import codec as codecs
from grpc_overhead.prediction import payload
from grpc_overhead.prediction.protos import prediction_pb2 as pb

pytestmark = pytest.mark.unit


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(7)


@pytest.mark.parametrize("codec", codecs.CODECS)
@pytest.mark.parametrize("shape", [(0, 32), (0, 0), (1, 1), (200, 32), (37, 5)])
def test_matrix_round_trip(codec: str, shape: tuple[int, int], rng) -> None:
    matrix = payload.make_features(rng, *shape)
    data = codecs.pack_matrix(matrix, codec)
    out = codecs.unpack_matrix(data, *shape, codec)
    assert out.dtype == np.dtype("<f4")
    assert out.shape == shape
    np.testing.assert_array_equal(out, matrix)


def test_packed_layout_is_float32_little_endian_row_major() -> None:
    matrix = np.array([[1.0, 2.0], [3.0, -0.5]], dtype=np.float32)
    assert codecs.pack_matrix(matrix) == np.array([1, 2, 3, -0.5], dtype="<f4").tobytes()


def test_synthetic_features_compress(rng) -> None:
    raw = codecs.pack_matrix(payload.make_features(rng, 200, 32))
    for codec in ("zstd", "lz4", "snappy"):
        assert len(codecs.compress(raw, codec)) < len(raw), codec


@pytest.mark.parametrize(
    "encoding,codec", [("repeated", "none")] + [("packed", codec) for codec in codecs.CODECS]
)
@pytest.mark.parametrize("entities", [0, 1, 150])
def test_request_round_trip(encoding: str, codec: str, entities: int, rng) -> None:
    features = payload.make_features(rng, entities, 24)
    ids = payload.make_ids(10, entities)
    request = codecs.encode_features(pb.PredictRequest(), ids, features, encoding, codec)
    wire = pb.PredictRequest.FromString(request.SerializeToString())
    got_ids, matrix, got_encoding, got_codec = codecs.decode_features(wire)
    assert got_ids == ids
    assert (got_encoding, got_codec) == (encoding, codec)
    if entities:
        np.testing.assert_array_equal(matrix, features)
    else:
        assert matrix.shape[0] == 0


@pytest.mark.parametrize(
    "encoding,codec",
    [("repeated", "none"), ("packed", "none"), ("packed", "zstd"), ("packed", "snappy")],
)
@pytest.mark.parametrize("count", [0, 3, 200])
def test_scores_round_trip(encoding: str, codec: str, count: int, rng) -> None:
    scores = rng.random(count).astype(np.float32)
    response = codecs.encode_scores(pb.PredictResponse(), scores, encoding, codec)
    wire = pb.PredictResponse.FromString(response.SerializeToString())
    np.testing.assert_array_equal(codecs.decode_scores(wire), scores)
    assert wire.WhichOneof("scores") == (
        "score_list" if encoding == "repeated" else "packed_scores"
    )


def test_empty_request_decodes_as_no_entities() -> None:
    ids, matrix, encoding, codec = codecs.decode_features(pb.PredictRequest())
    assert ids == [] and matrix.shape == (0, 0) and (encoding, codec) == ("repeated", "none")


def test_unknown_codec_names_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown payload codec 'brotli'; expected one of none, zstd, lz4, snappy"
    ):
        codecs.compress(b"x", "brotli")
    with pytest.raises(ValueError, match="unknown payload codec enum value 42"):
        codecs.codec_from_enum(42)


def test_unknown_codec_enum_in_request() -> None:
    request = codecs.encode_features(pb.PredictRequest(), ["a"], np.ones((1, 2)), "packed")
    request.packed.payload_codec = 9  # proto3 enums are open: any int arrives
    wire = pb.PredictRequest.FromString(request.SerializeToString())
    with pytest.raises(ValueError, match="unknown payload codec enum value 9"):
        codecs.decode_features(wire)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy"])
@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupted_payload(codec: str, damage: str, rng) -> None:
    data = codecs.pack_matrix(payload.make_features(rng, 20, 8), codec)
    broken = {"truncate": data[: len(data) // 2], "garbage": b"\x07not a frame" * 3, "empty": b""}[
        damage
    ]
    with pytest.raises(ValueError, match=rf"(corrupted {codec} payload|wrong length)") as error:
        codecs.unpack_matrix(broken, 20, 8, codec)
    assert "Traceback" not in str(error.value)


@pytest.mark.parametrize("codec", codecs.CODECS)
def test_wrong_length_is_reported_with_sizes(codec: str, rng) -> None:
    data = codecs.pack_matrix(payload.make_features(rng, 10, 4), codec)
    with pytest.raises(
        ValueError, match=r"wrong length: .*160 bytes, expected 200 \(entities x features x 4\)"
    ):
        codecs.unpack_matrix(data, 10, 5, codec)


def test_packed_request_errors_name_the_shape() -> None:
    request = codecs.encode_features(
        pb.PredictRequest(), ["a", "b"], np.ones((2, 3)), "packed", "lz4"
    )
    request.packed.feature_count = 4
    with pytest.raises(
        ValueError, match=r"packed features \(2 entities x 4 features, lz4\): wrong length"
    ):
        codecs.decode_features(request)


def test_feature_count_mismatch_names_the_entity() -> None:
    request = codecs.encode_features(pb.PredictRequest(), ["a", "b", "c"], np.ones((3, 4)))
    del request.entities.entities[2].features[0]
    with pytest.raises(
        ValueError,
        match=r"feature count mismatch: entity 'c' \(index 2\) has 3 features, entity 0 has 4",
    ):
        codecs.decode_features(request)


def test_repeated_encoding_refuses_a_codec() -> None:
    with pytest.raises(ValueError, match="needs the packed encoding"):
        codecs.encode_features(pb.PredictRequest(), ["a"], np.ones((1, 2)), "repeated", "zstd")


def test_bad_encoding_and_shapes() -> None:
    with pytest.raises(ValueError, match="unknown encoding 'csv'"):
        codecs.encode_features(pb.PredictRequest(), [], np.zeros((0, 0)), "csv")
    with pytest.raises(ValueError, match="2 entity ids but 3 feature rows"):
        codecs.encode_features(pb.PredictRequest(), ["a", "b"], np.ones((3, 2)))


def test_split_request_for_upload(rng) -> None:
    request = payload.make_request(rng, 150, 8, "packed", "zstd", "req-1")
    chunks = payload.split_request(request, 64)
    assert [payload.entity_count(chunk) for chunk in chunks] == [64, 64, 22]
    assert chunks[0].HasField("query") and not chunks[1].HasField("query")
    assert chunks[0].request_id == "req-1"
    joined = np.concatenate([codecs.decode_features(chunk)[1] for chunk in chunks])
    np.testing.assert_array_equal(joined, codecs.decode_features(request)[1])
    empty = payload.make_request(rng, 0, 8, "packed", "lz4")
    assert len(payload.split_request(empty, 64)) == 1

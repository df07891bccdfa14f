"""The servicer on a real in-process grpc server (sync and aio), spans kept in memory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from grpc_overhead.prediction import codec as codecs
from grpc_overhead.prediction import payload
from grpc_overhead.prediction.model import MAX_FEATURES, Model
from grpc_overhead.prediction.protos import prediction_pb2 as pb
from grpc_overhead.prediction.protos import prediction_pb2_grpc as pb_grpc
from grpc_overhead.prediction.server import ServiceConfig, build_aio_server, build_server

pytestmark = pytest.mark.unit

ENCODINGS = [("repeated", "none")] + [("packed", codec) for codec in codecs.CODECS]
ENTITIES, FEATURES = 90, 12


@pytest.fixture(scope="module")
def stub(pipeline) -> Iterator[pb_grpc.PredictorStub]:
    config = ServiceConfig(workers=4, instance_id="in-process")
    server, port = build_server(config, pipeline)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield pb_grpc.PredictorStub(channel)
    finally:
        channel.close()
        server.stop(None)


def _request(encoding: str, codec: str, entities: int = ENTITIES, seed: int = 0, **kw):
    rng = np.random.default_rng(seed)
    return payload.make_request(rng, entities, FEATURES, encoding, codec, "req-1", **kw)


def _expected(request: pb.PredictRequest) -> np.ndarray:
    _, matrix, _, _ = codecs.decode_features(request)
    return Model().predict(matrix, np.asarray(request.query.embedding, np.float32))


def _check(response: pb.PredictResponse, request: pb.PredictRequest, encoding: str) -> None:
    assert response.server_instance_id == "in-process"
    assert response.model_version == Model().version
    assert response.WhichOneof("scores") == (
        "score_list" if encoding == "repeated" else "packed_scores"
    )
    np.testing.assert_allclose(codecs.decode_scores(response), _expected(request), rtol=1e-6)


@pytest.mark.parametrize("encoding,codec", ENCODINGS)
def test_all_five_rpcs(stub, encoding: str, codec: str) -> None:
    request = _request(encoding, codec)
    _check(stub.Predict(request, timeout=10), request, encoding)

    streamed = list(
        stub.PredictStream(iter([request, _request(encoding, codec, seed=1)]), timeout=10)
    )
    assert len(streamed) == 2
    _check(streamed[0], request, encoding)

    batch = stub.PredictBatch(payload.batch([request, request, request]), timeout=10)
    assert len(batch.responses) == 3 and batch.server_instance_id == "in-process"
    for item in batch.responses:
        _check(item, request, encoding)

    request.chunk_entities = 25
    chunks = list(stub.PredictChunks(request, timeout=10))
    assert [c.entity_offset for c in chunks] == [0, 25, 50, 75]
    scores = np.concatenate([codecs.decode_scores(c) for c in chunks])
    np.testing.assert_allclose(scores, _expected(request), rtol=1e-6)

    uploaded = stub.PredictUpload(iter(payload.split_request(request, 40)), timeout=10)
    _check(uploaded, request, encoding)


@pytest.mark.parametrize("encoding,codec", [("repeated", "none"), ("packed", "zstd")])
def test_zero_entities(stub, encoding: str, codec: str) -> None:
    request = _request(encoding, codec, entities=0)
    assert len(codecs.decode_scores(stub.Predict(request, timeout=10))) == 0
    chunks = list(stub.PredictChunks(request, timeout=10))
    assert len(chunks) == 1 and len(codecs.decode_scores(chunks[0])) == 0
    uploaded = stub.PredictUpload(iter(payload.split_request(request, 10)), timeout=10)
    assert len(codecs.decode_scores(uploaded)) == 0


def _invalid(call, match: str) -> None:
    with pytest.raises(grpc.RpcError) as error:
        call()
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert match in error.value.details(), error.value.details()


def test_bad_requests_are_invalid_argument(stub) -> None:
    corrupted = _request("packed", "zstd")
    corrupted.packed.data = corrupted.packed.data[:-5]
    _invalid(lambda: stub.Predict(corrupted, timeout=10), "corrupted zstd payload")

    short = _request("packed", "none")
    short.packed.feature_count += 1
    _invalid(lambda: stub.Predict(short, timeout=10), "wrong length")

    mismatch = _request("repeated", "none")
    del mismatch.entities.entities[5].features[-1]
    _invalid(lambda: stub.Predict(mismatch, timeout=10), "feature count mismatch: entity")
    _invalid(
        lambda: list(stub.PredictStream(iter([mismatch]), timeout=10)), "feature count mismatch"
    )
    _invalid(
        lambda: stub.PredictBatch(
            payload.batch([_request("repeated", "none"), mismatch]), timeout=10
        ),
        "feature count mismatch",
    )
    _invalid(lambda: list(stub.PredictChunks(mismatch, timeout=10)), "feature count mismatch")

    unknown = _request("packed", "lz4")
    unknown.packed.payload_codec = 17
    _invalid(lambda: stub.Predict(unknown, timeout=10), "unknown payload codec enum value 17")

    wide = pb.PredictRequest()
    codecs.encode_features(wide, ["a"], np.ones((1, MAX_FEATURES + 1)), "packed")
    _invalid(lambda: stub.Predict(wide, timeout=10), "the model supports")

    chunks = payload.split_request(_request("packed", "snappy"), 40)
    chunks[1].packed.data = b"\xff" * 7
    _invalid(lambda: stub.PredictUpload(iter(chunks), timeout=10), "upload chunk 1")
    mixed = payload.split_request(_request("packed", "none"), 40)
    mixed[2] = payload.split_request(_request("repeated", "none"), 40)[2]
    _invalid(lambda: stub.PredictUpload(iter(mixed), timeout=10), "differs from chunk 0")
    _invalid(lambda: stub.PredictUpload(iter([]), timeout=10), "empty upload")

    # and the server is still fine
    request = _request("packed", "zstd")
    _check(stub.Predict(request, timeout=10), request, "packed")


def test_server_spans_carry_payload_annotations(stub, pipeline, exporter) -> None:
    exporter.clear()
    stub.Predict(_request("packed", "snappy", entities=33), timeout=10)
    stub.PredictBatch(payload.batch([_request("packed", "lz4", entities=10)] * 3), timeout=10)
    # A server finishes its record after the client has its answer: wait (bounded) for
    # both calls' spans, and leave out a failed call of an earlier test finishing late.
    deadline = time.monotonic() + 10
    while True:
        assert pipeline.force_flush()
        servers = [
            s
            for s in exporter.get_finished_spans()
            if s.kind.name == "SERVER" and s.attributes.get("rpc.grpc.status_code") == 0
        ]
        by_method = {s.attributes.get("rpc.method"): s.attributes for s in servers}
        if {"Predict", "PredictBatch"} <= set(by_method) or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert by_method["Predict"]["grpc_overhead.payload.codec"] == "snappy"
    assert by_method["Predict"]["grpc_overhead.entities"] == 33
    assert by_method["PredictBatch"]["grpc_overhead.payload.codec"] == "lz4"
    assert by_method["PredictBatch"]["grpc_overhead.entities"] == 30


def test_aio_server_answers_all_rpcs(pipeline, exporter) -> None:
    async def scenario() -> None:
        config = ServiceConfig(workers=2, instance_id="aio", aio=True)
        server, port, pool = build_aio_server(config, pipeline)
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                aio_stub = pb_grpc.PredictorStub(channel)
                request = _request("packed", "zstd")
                response = await aio_stub.Predict(request, timeout=10)
                assert response.server_instance_id == "aio"
                np.testing.assert_allclose(
                    codecs.decode_scores(response), _expected(request), rtol=1e-6
                )
                streamed = [
                    r async for r in aio_stub.PredictStream(iter([request] * 3), timeout=10)
                ]
                assert len(streamed) == 3
                batch = await aio_stub.PredictBatch(payload.batch([request] * 2), timeout=10)
                assert len(batch.responses) == 2
                request.chunk_entities = 50
                chunks = [r async for r in aio_stub.PredictChunks(request, timeout=10)]
                assert [c.entity_offset for c in chunks] == [0, 50]
                uploaded = await aio_stub.PredictUpload(
                    iter(payload.split_request(request, 30)), timeout=10
                )
                assert len(codecs.decode_scores(uploaded)) == ENTITIES
                bad = _request("packed", "lz4")
                bad.packed.data = b"nope"
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await aio_stub.Predict(bad, timeout=10)
                assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "corrupted lz4 payload" in error.value.details()
        finally:
            await server.stop(None)
            pool.shutdown(wait=False)

    exporter.clear()
    asyncio.run(scenario())
    assert pipeline.force_flush()
    servers = [s for s in exporter.get_finished_spans() if s.kind.name == "SERVER"]
    predict = [s for s in servers if s.attributes.get("rpc.method") == "Predict"]
    assert any(s.attributes.get("grpc_overhead.payload.codec") == "zstd" for s in predict)

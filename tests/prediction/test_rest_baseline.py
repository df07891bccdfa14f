"""The REST baseline's server half in process: bodies, refusals, recorded moments."""

from __future__ import annotations

import base64
import json

import pytest

from grpc_overhead.prediction.rest_server import RestHandler
from grpc_overhead.prediction.server import ServiceConfig, make_scorer

pytestmark = pytest.mark.unit

ORDER = [
    "serverCallStarted",
    "callScheduled",
    "inboundMessage",
    "inboundMessageRead",
    "predictionsMade",
    "outboundMessage",
    "outboundMessageSent",
]


@pytest.fixture(scope="module")
def handler() -> RestHandler:
    return RestHandler(make_scorer(ServiceConfig(instance_id="rest-test", seed=1)))


def _decode(result):
    status, payload, events = result
    return status, json.loads(payload), events


def test_structured_json_is_scored_with_every_moment_in_order(handler) -> None:
    body = {
        "request_id": "r1",
        "query": {"embedding": [0.5] * 16},
        "entities": [{"id": f"e{i}", "features": [float(i)] * 8} for i in range(5)],
    }
    status, document, events = _decode(handler.json_request(json.dumps(body).encode(), 1))
    assert status == 200 and document["request_id"] == "r1"
    assert len(document["scores"]) == 5 and document["server_instance_id"] == "rest-test"
    assert [name for name, _, _ in events] == ORDER
    moments = [moment for _, moment, _ in events]
    assert moments == sorted(moments)
    sizes = {name: extra for name, _, extra in events}
    assert sizes["inboundMessageRead"]["rpc.message.uncompressed_size"] == len(json.dumps(body))


def test_an_image_scores_once_as_binary_or_base64_alike(handler) -> None:
    image = bytes(range(256)) * 100
    status, binary, events = _decode(handler.image_request(image, "img", 1))
    assert status == 200 and len(binary["scores"]) == 1
    assert [name for name, _, _ in events] == ORDER
    body = json.dumps({"request_id": "img", "image_base64": base64.b64encode(image).decode()})
    status, encoded, _ = _decode(handler.json_request(body.encode(), 1))
    assert status == 200 and encoded["scores"] == binary["scores"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "body is not valid JSON/base64"),
        (b"[1, 2]", "the body must be a JSON object"),
        (b'{"image_base64": "%%%"}', "body is not valid JSON/base64"),
        (b'{"entities": 3}', "'entities' must be a list"),
        (b'{"entities": [{"features": [1]}, {"features": [1, 2]}]}', "one length"),
        (b'{"entities": [{"features": [1]}], "query": {"embedding": "x"}}', "query.embedding"),
        (
            b'{"entities": [{"features": '
            + b"[1]" * 1
            + b'}], "query": {"embedding": '
            + json.dumps([0.1] * 300).encode()
            + b"}}",
            "the model supports 256",
        ),
    ],
)
def test_bad_bodies_are_400_with_one_line(handler, body: bytes, message: str) -> None:
    status, document, _ = _decode(handler.json_request(body, 1))
    assert status == 400
    assert message in document["error"] and "\n" not in document["error"]


def test_an_empty_image_is_refused(handler) -> None:
    status, document, _ = _decode(handler.image_request(b"", "none", 1))
    assert status == 400 and "empty image" in document["error"]

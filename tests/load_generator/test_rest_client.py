"""The REST client's bodies: what each prediction request becomes on the wire."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from grpc_overhead.load_generator.rest_client import rest_body
from grpc_overhead.prediction import payload as payloads

pytestmark = pytest.mark.unit


def test_a_structured_request_becomes_json_lists() -> None:
    request = payloads.make_request(np.random.default_rng(0), 3, 4, request_id="r")
    body = rest_body(request, "json")
    encoded, content_type = body.encode()
    document = json.loads(encoded)
    assert content_type == "application/json" and body.path == "/v1/predict"
    assert document["request_id"] == "r" and len(document["entities"]) == 3
    assert document["entities"][0]["features"] == pytest.approx(
        list(request.entities.entities[0].features)
    )
    assert body.wire_bytes() == len(encoded)


def test_an_image_is_base64_in_json_or_the_raw_body() -> None:
    request = payloads.make_image_request(np.random.default_rng(1), 3000, "img")
    image = bytes(request.image.data)
    assert len(image) == 3000 and image.startswith(b"\xff\xd8")
    as_json = rest_body(request, "json")  # JSON carries an image as base64 text
    assert as_json.kind == "base64" and as_json.path == "/v1/predict"
    assert base64.b64decode(json.loads(as_json.encode()[0])["image_base64"]) == image
    binary = rest_body(request, "binary")
    assert binary.encode() == (image, "application/octet-stream")
    assert binary.path == "/v1/predict/image" and binary.method == "PredictImage"


def test_bodies_that_cannot_carry_the_request_are_refused() -> None:
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="carries images"):
        rest_body(payloads.make_request(rng, 2, 2), "binary")
    with pytest.raises(ValueError, match="JSON lists"):
        rest_body(payloads.make_request(rng, 2, 2, encoding="packed"), "json")
    with pytest.raises(ValueError, match="unknown REST body"):
        rest_body(payloads.make_request(rng, 2, 2), "xml")

"""Blocking unary-unary calls run through a per-thread multicallable whose serializers read
the call's record from a slot (client.py ``_ThreadSlot``): the cases a slot could get wrong."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue

from grpc_overhead.instrumentation import instrument_channel
from grpc_overhead.instrumentation.vocabulary import MESSAGE_UNCOMPRESSED_SIZE
from tests.instrumentation import echo_service

pytestmark = pytest.mark.e2e
ECHO = f"/{echo_service.SERVICE}/Echo"


@pytest.fixture
def channel(captured, sync_server: str) -> Iterator[grpc.Channel]:
    channel = instrument_channel(
        grpc.insecure_channel(sync_server), sync_server, pipeline=captured.pipeline
    )
    yield channel
    channel.close()


def _sizes(span, name: str) -> list[int]:
    return [e.attributes[MESSAGE_UNCOMPRESSED_SIZE] for e in span.events if e.name == name]


def test_a_call_made_inside_its_own_serializer_keeps_each_record_its_own(captured, channel):
    """The inner call (same thread, same multicallable, so the same slot) fills its own
    record; the outer call's serializer and deserializer still write to the outer one."""
    seen = []
    nested = []

    def serialize_with_a_call(message: BytesValue) -> bytes:
        if not nested:
            nested.append(True)
            seen.append(echo(BytesValue(value=b"inner")).value)
        return message.SerializeToString()

    echo = channel.unary_unary(
        ECHO,
        request_serializer=serialize_with_a_call,
        response_deserializer=BytesValue.FromString,
        _registered_method=True,
    )
    response, call = echo.with_call(BytesValue(value=b"outer" * 50))
    assert response.value == b"outer" * 50 and seen == [b"inner"]
    assert call.code() is grpc.StatusCode.OK
    pairs = captured.pairs(calls=2)
    assert len(pairs) == 2
    sizes = []
    for client in pairs:
        [sent] = _sizes(client, "outboundMessageSent")
        [received] = _sizes(client, "inboundMessageRead")
        assert sent == received  # an echo: each record saw its own request and response
        sizes.append(sent)
    assert sorted(sizes) == [7, 253]  # BytesValue(b"inner"), BytesValue(b"outer" * 50)


def test_a_failing_request_serializer_fails_the_call_and_its_span(captured, channel):
    def broken(message: BytesValue) -> bytes:
        raise ValueError("cannot serialize")

    method = channel.unary_unary(
        ECHO, request_serializer=broken, response_deserializer=BytesValue.FromString
    )
    with pytest.raises(grpc.RpcError) as raised:
        method(BytesValue(value=b"x"))
    assert raised.value.code() is grpc.StatusCode.INTERNAL
    [client] = [s for s in captured.spans(at_least=1) if s.kind.name == "CLIENT"]
    assert client.status.status_code.name == "ERROR"
    assert client.attributes["rpc.grpc.status_code"] == 13
    # The next call through the same thread's slot is unaffected.
    echo = echo_service.multicallables(channel)["Echo"]
    assert echo(BytesValue(value=b"ok")).value == b"ok"

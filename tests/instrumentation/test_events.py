"""Event order and completeness per call shape, sync and aio, client and server."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from google.protobuf.wrappers_pb2 import BytesValue

from grpc_overhead.instrumentation import instrument_aio_channel
from tests.instrumentation import echo_service

pytestmark = pytest.mark.e2e

MESSAGE = BytesValue(value=b"payload-0123456789")
SERIALIZED_SIZE = len(MESSAGE.SerializeToString())

# Expected event names per call shape (2 request messages for client-streaming calls).
CLIENT_EVENTS = {
    "Echo": [
        "requestCreated",
        "outboundMessage",
        "outboundMessageSent",
        "clientReceivedResponse",
        "inboundMessageRead",
    ],
    "Split": ["requestCreated", "outboundMessage", "outboundMessageSent"]
    + ["clientReceivedResponse", "inboundMessageRead"] * echo_service.SPLIT_PARTS,
    "Join": ["requestCreated"]
    + ["outboundMessage", "outboundMessageSent"] * 2
    + ["clientReceivedResponse", "inboundMessageRead"],
}
# The servicer's method is timed innermost (handlerStarted .. predictionsMade) inside the
# interceptor chain (serviceIntercepted, interceptorsEntered .. interceptorsReturned).
SYNC_SERVER_EVENTS = {
    "Echo": [
        "serverCallStarted",
        "serviceIntercepted",
        "callScheduled",
        "inboundMessage",
        "inboundMessageRead",
        "interceptorsEntered",
        "handlerStarted",
        "predictionsMade",
        "interceptorsReturned",
        "outboundMessage",
        "outboundMessageSent",
    ],
    "Split": [
        "serverCallStarted",
        "serviceIntercepted",
        "callScheduled",
        "inboundMessage",
        "inboundMessageRead",
        "interceptorsEntered",
        "handlerStarted",
    ]
    + ["outboundMessage", "outboundMessageSent"] * echo_service.SPLIT_PARTS
    + ["predictionsMade", "interceptorsReturned"],
    "Join": [
        "serverCallStarted",
        "serviceIntercepted",
        "callScheduled",
        "interceptorsEntered",
        "handlerStarted",
    ]
    + ["inboundMessage", "inboundMessageRead"] * 2
    + ["predictionsMade", "interceptorsReturned", "outboundMessage", "outboundMessageSent"],
}


def call(multicallables: dict, method: str):
    if method == "Echo":
        return [multicallables["Echo"](MESSAGE)]
    if method == "Split":
        return list(multicallables["Split"](MESSAGE))
    if method == "Join":
        return [multicallables["Join"](iter([MESSAGE, MESSAGE]))]
    return list(multicallables["Chat"](iter([MESSAGE, MESSAGE])))


def names(span) -> list[str]:
    return [event.name for event in span.events]


def assert_ordered(span) -> None:
    timestamps = [event.timestamp for event in span.events]
    assert timestamps == sorted(timestamps), names(span)
    assert span.start_time <= timestamps[0] and timestamps[-1] <= span.end_time


@pytest.mark.parametrize("method", ["Echo", "Split", "Join"])
def test_sync_events_per_call_shape(captured, sync_client, method):
    call(sync_client, method)
    [(client, server)] = captured.pairs().items()
    assert names(client) == CLIENT_EVENTS[method]
    assert names(server) == SYNC_SERVER_EVENTS[method]
    for span in (client, server):
        assert_ordered(span)
        assert span.attributes["rpc.system"] == "grpc"
        assert span.attributes["rpc.service"] == "test.Echo"
        assert span.attributes["rpc.method"] == method
        assert span.attributes["rpc.grpc.status_code"] == 0
        assert span.name == f"test.Echo/{method}"
    assert server.context.trace_id == client.context.trace_id
    assert server.parent.span_id == client.context.span_id and server.parent.is_remote
    # The server's window lies inside the client's: same host, same clock.
    assert client.start_time < server.start_time <= server.end_time < client.end_time


def test_bidi_stream_interleaves_messages_with_sequence_numbers(captured, sync_client):
    replies = call(sync_client, "Chat")
    assert [reply.value for reply in replies] == [MESSAGE.value.upper()] * 2
    [(client, server)] = captured.pairs().items()
    sent = [e for e in client.events if e.name == "outboundMessageSent"]
    received = [e for e in client.events if e.name == "inboundMessageRead"]
    assert [e.attributes["rpc.message.id"] for e in sent] == [1, 2]
    assert [e.attributes["rpc.message.id"] for e in received] == [1, 2]
    assert all(e.attributes["rpc.message.type"] == "SENT" for e in sent)
    assert all(e.attributes["rpc.message.type"] == "RECEIVED" for e in received)
    server_reads = [
        e.attributes["rpc.message.id"] for e in server.events if e.name == "inboundMessageRead"
    ]
    assert server_reads == [1, 2]
    assert names(server)[-2:] == ["predictionsMade", "interceptorsReturned"]


def test_message_sizes_match_the_serialized_bytes(captured, sync_client):
    call(sync_client, "Echo")
    [(client, server)] = captured.pairs().items()
    [client_sent] = [e for e in client.events if e.name == "outboundMessageSent"]
    [server_read] = [e for e in server.events if e.name == "inboundMessageRead"]
    assert client_sent.attributes["rpc.message.uncompressed_size"] == SERIALIZED_SIZE
    # No compression: what goes on the wire is the serialized message itself.
    assert client_sent.attributes["rpc.message.compressed_size"] == SERIALIZED_SIZE
    assert server_read.attributes["rpc.message.uncompressed_size"] == SERIALIZED_SIZE


def test_future_calls_are_timed_like_blocking_ones(captured, sync_client):
    future = sync_client["Echo"].future(MESSAGE)
    assert future.result(timeout=10).value == MESSAGE.value
    [(client, _server)] = captured.pairs().items()
    assert names(client) == CLIENT_EVENTS["Echo"]


async def _aio_calls(target: str, pipeline) -> None:
    channel = instrument_aio_channel(grpc.aio.insecure_channel(target), target, pipeline=pipeline)
    stubs = echo_service.multicallables(channel)
    assert (await stubs["Echo"](MESSAGE)).value == MESSAGE.value
    assert len([r async for r in stubs["Split"](MESSAGE)]) == echo_service.SPLIT_PARTS

    async def two():
        yield MESSAGE
        yield MESSAGE

    assert (await stubs["Join"](two())).value == MESSAGE.value * 2
    chat = stubs["Chat"](two())
    replies = []
    while (reply := await chat.read()) is not grpc.aio.EOF:
        replies.append(reply)
    assert len(replies) == 2
    await channel.close()


def test_aio_server_and_client_events(captured, aio_server):
    asyncio.run(_aio_calls(aio_server, captured.pipeline))
    pairs = captured.pairs(calls=4)
    by_method = {
        client.attributes["rpc.method"]: (client, server) for client, server in pairs.items()
    }
    assert set(by_method) == {"Echo", "Split", "Join", "Chat"}
    for method in ("Echo", "Split", "Join"):
        client, server = by_method[method]
        assert names(client) == CLIENT_EVENTS[method]
        assert_ordered(client)
        assert_ordered(server)
        server_names = names(server)
        # aio: the handler is scheduled after the unary request was read (no pool queue
        # before it); every event of the vocabulary is present exactly as often as needed.
        assert sorted(server_names) == sorted(SYNC_SERVER_EVENTS[method])
        assert server_names[0] == "serverCallStarted"
    client, server = by_method["Echo"]
    assert server.attributes["test.annotated"] == "yes"
    assert names(server).index("callScheduled") > names(server).index("inboundMessageRead")

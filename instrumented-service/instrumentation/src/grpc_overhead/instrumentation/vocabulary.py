"""Names shared with the analyzer: span events (gRPC StreamTracer vocabulary) and attributes.

These strings are a contract (see shared design, "Event vocabulary"): the
analyzer, dashboards and users' SQL match on them. Extend, never rename.
"""

from __future__ import annotations

# Client span events
REQUEST_CREATED = "requestCreated"
CLIENT_RECEIVED_RESPONSE = "clientReceivedResponse"
# Server span events
SERVER_CALL_STARTED = "serverCallStarted"
CALL_SCHEDULED = "callScheduled"
PREDICTIONS_MADE = "predictionsMade"
# The server's interceptor chain around the servicer's own method (server_interceptors,
# post_processing): the chain's intercept_service calls returned the handler; the chain's
# behaviour starts (outermost); the servicer's method is called (innermost); it returned
# after mark_predictions_made() (without a mark its return is predictionsMade); the
# chain's behaviour returned (outermost).
SERVICE_INTERCEPTED = "serviceIntercepted"
INTERCEPTORS_ENTERED = "interceptorsEntered"
HANDLER_STARTED = "handlerStarted"
HANDLER_RETURNED = "handlerReturned"
INTERCEPTORS_RETURNED = "interceptorsReturned"
# Both sides, one pair per message
OUTBOUND_MESSAGE = "outboundMessage"
OUTBOUND_MESSAGE_SENT = "outboundMessageSent"
INBOUND_MESSAGE = "inboundMessage"
INBOUND_MESSAGE_READ = "inboundMessageRead"
EXCEPTION = "exception"

# Message attributes, as grpc-java (A72) and Go otelgrpc name them
MESSAGE_TYPE = "rpc.message.type"
MESSAGE_ID = "rpc.message.id"
MESSAGE_UNCOMPRESSED_SIZE = "rpc.message.uncompressed_size"
MESSAGE_COMPRESSED_SIZE = "rpc.message.compressed_size"

# Span attributes (OpenTelemetry RPC semantic conventions + ours)
RPC_SYSTEM = "rpc.system"
RPC_SERVICE = "rpc.service"
RPC_METHOD = "rpc.method"
RPC_GRPC_STATUS_CODE = "rpc.grpc.status_code"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
PEER_ADDRESS = "network.peer.address"
PEER_PORT = "network.peer.port"
COMPRESSION = "grpc.compression"
CALL_TYPE = "grpc_overhead.call_type"
RUN_ID = "grpc_overhead.run_id"
SERVER_RESIDENCE_NS = "grpc_overhead.server_residence_ns"
CALL_SCHEDULED_DELAY_NS = "grpc_overhead.pool_wait_ns"
ABANDONED = "grpc_overhead.abandoned"
# Time left before the call's deadline: on the client when its first message was handed
# to gRPC, on the server when gRPC Python saw the call (serverCallStarted). The server's
# deadline is set by gRPC core when it parses the grpc-timeout header, outside the GIL,
# so the pair times the server's dispatch wait per call (analyzer: server_dispatch).
DEADLINE_BUDGET_NS = "grpc_overhead.deadline_budget_ns"
# Client: how long the call waited, after its request was handed to gRPC, for the channel
# to become READY (name resolution, TCP/TLS connect, wait_for_ready); 0 when the channel
# was READY at the call's start (analyzer: client_connect; see connect.py).
CLIENT_CONNECT_NS = "grpc_overhead.client_connect_ns"
# Client: the process's wake-up lag (GIL; the event loop's for aio) sampled when the
# response arrived: an estimate of the wait between the response reaching the process
# and the caller running again (analyzer: client_dispatch; see lag_probe.py).
CLIENT_DISPATCH_NS = "grpc_overhead.client_dispatch_ns"
# A sent message sampled for its compressibility (compressibility.py; at most one per
# method per interval and process side: a client span's sample is a request, a server
# span's a response). Its size, the bytes measured (a prefix of larger messages), and per
# algorithm gRPC offers (gzip, deflate) at gRPC core's zlib level: the compressed /
# measured ratio and the CPU ns per MB (1e6 bytes) to compress and to decompress, e.g.
# grpc_overhead.compressibility.gzip.ratio. Calls without a sample carry none of them.
COMPRESSIBILITY_PREFIX = "grpc_overhead.compressibility."
# Sampling (sampling.py, tail_sampling.py): how many calls this span stands for, the
# inverse of the probability it was kept with (1 for calls kept for sure: slow, failed;
# 100 for a 1 % base sample), and why it was kept (SAMPLING_REASONS). Only on spans of a
# sampling process (GRPC_OVERHEAD_SAMPLING=head|tail, or a trace-id ratio below 1);
# a span without it stands for itself (weight 1).
SAMPLING_WEIGHT = "grpc_overhead.sampling.weight"
SAMPLING_REASON = "grpc_overhead.sampling.reason"
# A client half kept alone (tail-aware sampling: slow as the client saw it) names the
# server instance that dropped its own half, from that server's INSTANCE_TRAILER: the
# call is counted on the instance that served it, not on the address the client dialled.
SAMPLING_SERVER_INSTANCE = "grpc_overhead.sampling.server_instance"
#: base: the trace id fell in the base probability (both halves agree on it); slow: over
#: the method's threshold on this side; failed: a non-OK status (or an abandoned call);
#: server: the server kept it as slow and said so in its trailer (client halves); parent:
#: the caller's traceparent asked (sampled flag) and no other reason applied; warmup: the
#: method's adaptive threshold is not known yet; head: head sampling at a ratio below 1.
SAMPLING_REASONS = ("base", "slow", "failed", "server", "parent", "warmup", "head")
COMPRESSIBILITY_DIRECTION = COMPRESSIBILITY_PREFIX + "direction"
COMPRESSIBILITY_MESSAGE_BYTES = COMPRESSIBILITY_PREFIX + "message_bytes"
COMPRESSIBILITY_MEASURED_BYTES = COMPRESSIBILITY_PREFIX + "measured_bytes"
COMPRESSIBILITY_MEASURES = ("ratio", "compress_ns_per_mb", "decompress_ns_per_mb")


def compressibility_key(algorithm: str, measure: str) -> str:
    """The attribute of one algorithm's measure (``COMPRESSIBILITY_MEASURES``)."""
    return f"{COMPRESSIBILITY_PREFIX}{algorithm}.{measure}"


# Metadata keys (lowercase; the grpc- prefix is reserved by gRPC itself)
TRACEPARENT_HEADER = "traceparent"
REQUEST_START_HEADER = "x-request-start"
RUN_ID_HEADER = "x-grpc-overhead-run-id"
RESIDENCE_TRAILER = "x-server-residence-ns"
# Tail-aware sampling (tail_sampling.py): the server kept this call (slow by its own
# measure) and tells the client, whose half is kept too; the value is its weight.
KEPT_TRAILER = "x-grpc-overhead-kept"
# ... or it dropped its half and names itself (its service.instance.id), for the client's.
INSTANCE_TRAILER = "x-grpc-overhead-instance"

RESOURCE_HOST_NAME = "host.name"
RESOURCE_INSTANCE_ID = "service.instance.id"

# Next to another gRPC instrumentation (coexistence.py): set on *their* span of a call we
# record (the analyzer skips it: the call counts once, from ours), and on our client span
# when the request carries their traceparent (the analyzer keys the call by it).
FOLDED_INTO = "grpc_overhead.folded_into"
CALL_SPAN_ID = "grpc_overhead.call_span_id"

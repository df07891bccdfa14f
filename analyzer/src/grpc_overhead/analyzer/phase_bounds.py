"""Which network phases a call's events can bound, and the rule that none is shown negative.

A network phase is a difference of two events on the two sides of the wire. It measures
the wire only when its start event certainly precedes the bytes leaving and its end
event certainly follows their arrival; otherwise event order may put the end before the
start and the difference is no time at all. Two cases:

* **Headers before the message.** grpc-go and grpc-java (gRFC A72, otelgrpc, the Java
  agent) send a call's headers when the call starts and serialize the request later, on
  ``SendMsg``/``sendMessage``; the server's span starts on the headers. So the server
  span's start may come before the client's "Outbound message" (by the client's whole
  serialization), and ``server start - client sent`` is no network time: with 2 ms of
  marshal it comes out near -2 ms. Only the time from the request being handed to the
  client's transport to the server having *read* it (``request_receive``: network plus
  the server's receive) is bounded. grpcio (ours) serializes the request before it sends
  headers and message in one batch: for our clients ``request_network`` is bounded and
  defined; for the others it is NULL, and ``network_round_trip`` takes the server's read,
  not its start, as the moment the request arrived.
* **Events taken after the fact.** Even a bounded pair's events are timestamps taken a
  little after what they mark (gRFC A72: "ordered, not exact"); on a busy machine a
  preempted thread can stamp its "sent" after the peer has already read. On a shared
  clock (both halves in one clock domain, ``same_domain``) such a call's network phase
  would come out negative: it is NULL for that call instead (its events do not bound
  it), never shown negative, never clamped to a made-up 0. Clock-free phases
  (``network_round_trip``, ``client_server_gap``, and the coarse one-side phases
  ``client_pre_send``, ``server_receive``, ``server_handler``, ``server_tail``) follow the
  same rule whatever the clocks. Across clock domains a corrected phase may be negative
  within the offset's uncertainty and is shown: the raw and corrected values say so side
  by side.

The app, ``report``, ``findings``, the ``grpc_call_phases`` view and Grafana all read the
same ``{phase}_defined`` expressions, so they all skip such a value the same way; the
explorer says why (``insights.sources``).
"""

from __future__ import annotations

from dataclasses import replace

from grpc_overhead.analyzer import span_sources as src
from grpc_overhead.analyzer.phase_terms import Phase

#: The client serialized its request before the call's headers left (grpcio, ours):
#: the server's start then follows the client's "sent" event.
SERIALIZED_BEFORE_HEADERS = "client_events = 1"
#: The first server moment certain to follow the client's "sent" event: the call's start
#: for our clients, the request's read (grpc-java: received) for the others.
SERVER_REQUEST_SEEN = f"if({SERIALIZED_BEFORE_HEADERS}, server_call_started_ns, {src.SERVER_READ})"
#: The network phases the never-negative rule covers (one-way: on a shared clock).
ONE_WAY = (
    "request_network",
    "request_network_raw",
    "response_network",
    "response_network_raw",
    "request_receive",
    "response_receive",
)
#: Phases that need no clock agreement: never negative on any clock. The network ones,
#: and the coarse phases between two events of one side, which A72 and semconv sources
#: stamp after the fact (otelgrpc's server span has been seen to end 50 us before its
#: own "sent" event: server_tail -50 us).
CLOCK_FREE = (
    "network_round_trip",
    "client_server_gap",
    "client_pre_send",
    "server_receive",
    "server_handler",
    "server_tail",
)


#: The phases from ``server start - client sent``: defined for our clients only.
REQUEST_GAP = ("request_network", "request_network_raw")


def bounded(phase: Phase) -> Phase:
    """``phase`` where its events bound it: ``REQUEST_GAP`` for our clients only, and NULL
    where it would be negative on a shared clock (``ONE_WAY``) or on any (``CLOCK_FREE``)."""
    if phase.name in REQUEST_GAP:
        phase = replace(phase, defined=f"({phase.defined}) AND {SERIALIZED_BEFORE_HEADERS}")
    if phase.name in ONE_WAY:
        shared = "same_domain"
    elif phase.name in CLOCK_FREE:
        shared = "1"
    else:
        return phase
    # The value by its alias (``per_call_sql`` selects it as ``{name}_value``): computed once.
    return replace(
        phase, defined=f"({phase.defined}) AND NOT ({shared} AND {phase.name}_value < 0)"
    )


def request_receive(offset: str, connect: str) -> Phase:
    """Request handed to the client's transport -> read by the server (grpc-java:
    received), clock-corrected, less the client's connection wait (``connect``: ours
    only): the network plus the server's receive, bounded for every source (ours:
    request_network + server_dispatch + server_queue + request_deserialize)."""
    return Phase(
        "request_receive",
        f"{src.SERVER_READ} - client_outbound_message_sent_ns - {connect} - {offset}",
        f"{src.SERVER_READ} != 0 AND client_outbound_message_sent_ns != 0",
    )


def network_round_trip() -> Phase:
    """(client receive - client send) - (server send - server's first sight of the
    request): the network both ways from two durations on one clock each."""
    return Phase(
        "network_round_trip",
        f"({src.CLIENT_RECEIVE} - client_outbound_message_sent_ns)"
        f" - (server_outbound_message_sent_ns - {SERVER_REQUEST_SEEN})",
        f"{src.CLIENT_RECEIVE} != 0 AND client_outbound_message_sent_ns != 0"
        f" AND server_outbound_message_sent_ns != 0 AND {SERVER_REQUEST_SEEN} != 0",
    )

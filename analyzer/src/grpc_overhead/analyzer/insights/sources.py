"""Which phases each instrumentation source yields, from which events, and why not the rest.

A call's phases depend on both halves: a grpc-go client (A72) calling our Python server
has our server's fine phases and A72's client ones. ``phase_sources`` says, for one
call's pair of sources, where each phase comes from or why it is NULL; ``source_mix``
counts the calls per pair of sources (and per SDK language) so a page can say which
phases its selection cannot have; ``unavailable_phases`` turns that into the note.
The catalogue here is the README's table per source ("Any language").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from grpc_overhead.analyzer import weighted
from grpc_overhead.analyzer.insights.rows import rows_for
from grpc_overhead.analyzer.options import CallFilters, CallsOptions
from grpc_overhead.analyzer.phase_bounds import CLOCK_FREE, ONE_WAY
from grpc_overhead.analyzer.span_sources import (
    A72,
    A72_JAVA,
    OURS,
    SEMCONV,
    SOURCE_KEYS,
    SOURCES,
    SPANS_ONLY,
)
from grpc_overhead.analyzer.store.base import Store

# What each source's events are, per side, in the user's words.
_SEND = {
    OURS: "outboundMessageSent",
    A72: '"Outbound message" (after serialization)',
    A72_JAVA: '"Outbound message" (after serialization)',
    SEMCONV: "message SENT (after serialization)",
}
#: grpc-java's inbound event comes before deserialization: the same moment as our
#: clientReceivedResponse / inboundMessage.
_JAVA_READ = '"Inbound message" (read, before deserialization)'
_READ = {
    OURS: "inboundMessageRead",
    A72: '"Inbound message" (after deserialization)',
    A72_JAVA: _JAVA_READ,
    SEMCONV: "message RECEIVED (after deserialization)",
}
_START = {
    OURS: "serverCallStarted",
    A72: "Recv. span start",
    A72_JAVA: "Recv. span start",
    SEMCONV: "server span start",
    SPANS_ONLY: "server span start",
}
_ATTEMPT = {
    OURS: "requestCreated",
    A72: "Attempt. span start",
    A72_JAVA: "Attempt. span start",
    SEMCONV: "client span start",
}
_ONE_EVENT = "one event per message, taken after (de)serialization: no event marks its start"
#: Why server start - client sent is no network time for grpc-go/grpc-java clients.
_HEADERS_FIRST = (
    "sends the headers before serializing the request, and the server span starts on the"
    " headers: its start may precede the client's send and bounds no wire time"
    " (request_receive does: network + the server's receive)"
)
#: A network phase whose events came out of order on a shared clock (phase_bounds).
OUT_OF_ORDER = (
    "this call's events came out of order (negative on a shared clock): they do not bound"
    " the phase, which is NULL rather than negative"
)
#: The phases NULL on a call where they would be negative (phase_bounds).
NEVER_NEGATIVE = (*ONE_WAY, *CLOCK_FREE)
_NO_EVENTS = "spans without message events: durations only"
_OURS_ONLY = "needs grpc-overhead's events ({})"

#: phase -> (client side, server side): per source the events used, or None when
#: that source cannot give them. A side that is not needed is {}.
_NEEDS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "total": ({s: "client span duration" for s in SOURCES}, {}),
    "server_duration": ({}, {s: "server span duration" for s in SOURCES}),
    "client_server_gap": (
        {s: "client span duration" for s in SOURCES},
        {s: "server span duration" for s in SOURCES},
    ),
    "client_pre_send": ({s: f"{_ATTEMPT[s]} -> {_SEND[s]}" for s in _SEND}, {}),
    "client_serialize": ({OURS: "outboundMessage -> outboundMessageSent"}, {}),
    "client_connect": ({OURS: "channel connectivity (READY)"}, {}),
    "request_network": ({OURS: "outboundMessageSent (before the headers)"}, _START),
    "server_dispatch": ({OURS: "deadline budget"}, {OURS: "deadline budget"}),
    "server_queue": (
        {},
        {
            OURS: "serverCallStarted -> inboundMessage",
            A72_JAVA: f"Recv. span start -> {_JAVA_READ}",
        },
    ),
    "request_deserialize": ({}, {OURS: "inboundMessage -> inboundMessageRead"}),
    "server_receive": ({}, {s: f"{_START[s]} -> {_READ[s]}" for s in _READ}),
    "server_interceptors": (
        {},
        {
            OURS: "serverCallStarted -> serviceIntercepted, interceptorsEntered -> "
            "handlerStarted, predictionsMade (or handlerReturned) -> interceptorsReturned"
        },
    ),
    "processing": ({}, {OURS: "inboundMessageRead -> predictionsMade"}),
    "post_processing": ({}, {OURS: "predictionsMade -> handlerReturned"}),
    "response_serialize": ({}, {OURS: "outboundMessage -> outboundMessageSent"}),
    "server_handler": ({}, {s: f"{_READ[s]} -> {_SEND[s]}" for s in _READ}),
    "server_tail": ({}, {s: f"{_SEND[s]} -> server span end" for s in _SEND}),
    "server_residence": ({}, {s: f"{_START[s]} -> {_SEND[s]}" for s in _SEND}),
    "request_receive": (_SEND, _READ),
    "response_network": ({OURS: "clientReceivedResponse", A72_JAVA: _JAVA_READ}, _SEND),
    "response_receive": (_READ, _SEND),
    "client_dispatch": ({OURS: "lag probe (GIL / event loop)"}, {}),
    "client_deserialize": ({OURS: "clientReceivedResponse -> inboundMessageRead"}, {}),
    "network_round_trip": (
        {s: f"{_SEND[s]}, {_READ[s]}" for s in _SEND},
        {s: f"{_START[s]} (client ours) or {_READ[s]}, {_SEND[s]}" for s in _SEND},
    ),
}
#: The phases the explorer and the README list per source, in call order.
CATALOGUE_PHASES: tuple[str, ...] = tuple(_NEEDS)


def _reason(phase: str, side: str, source: str, needs: dict[str, str]) -> str:
    if source == SPANS_ONLY:
        return f"{side}: {_NO_EVENTS}"
    if phase == "request_network" and side == "client":
        return f"client: {source} {_HEADERS_FIRST}"
    if OURS in needs and len(needs) <= 2:
        why = _ONE_EVENT if source in (A72, A72_JAVA, SEMCONV) else "not recorded"
        return f"{side}: {_OURS_ONLY.format(needs[OURS])}; {source} has {why}"
    return f"{side}: {source} has no such event"


def phase_source(phase: str, client_source: str, server_source: str) -> tuple[str, str]:
    """(events the phase comes from, '' ) or ('', why it is NULL) for a pair of sources."""
    client_needs, server_needs = _NEEDS[phase]
    used, missing = [], []
    for side, source, needs in (
        ("client", client_source, client_needs),
        ("server", server_source, server_needs),
    ):
        if not needs:
            continue
        if not source:
            missing.append(f"{side} span missing")
        elif source in needs:
            used.append(f"{side}: {needs[source]}")
        else:
            missing.append(_reason(phase, side, source, needs))
    if missing:
        return "", "; ".join(missing)
    return "; ".join(used), ""


def phase_sources(client_source: str, server_source: str) -> pd.DataFrame:
    """One row per catalogued phase: phase, from (events), unavailable (the reason)."""
    records = [
        (phase, *phase_source(phase, client_source, server_source)) for phase in CATALOGUE_PHASES
    ]
    return pd.DataFrame.from_records(records, columns=["phase", "from", "unavailable"])


def call_sources(call: Mapping[str, Any]) -> pd.DataFrame:
    """``phase_sources`` for one call (a row of ``phases.calls``), with the value of each
    phase (``value_us``) and why a network phase its sources define is NULL for this call
    (``OUT_OF_ORDER``: negative on a shared clock, ``phase_bounds``)."""
    frame = phase_sources(call["client_source"], call["server_source"])
    values = [call[f"{phase}_us"] for phase in frame["phase"]]
    frame.insert(1, "value_us", values)
    unary = call.get("call_type", "") in ("", "unary_unary")
    for index, (phase, value) in enumerate(zip(frame["phase"], values, strict=True)):
        if phase in NEVER_NEGATIVE and unary and frame.at[index, "from"] and pd.isna(value):
            frame.at[index, "unavailable"] = OUT_OF_ORDER
    return frame


def source_table() -> pd.DataFrame:
    """Per source (both sides the same source): the phases it yields (README's table)."""
    records = []
    for source in SOURCES:
        frame = phase_sources(source, source)
        yields = frame[frame["unavailable"] == ""]["phase"]
        records.append((source, ", ".join(yields)))
    return pd.DataFrame.from_records(records, columns=["source", "phases"])


def source_mix(
    store: Store, filters: CallFilters | None = None, *, options: CallsOptions | None = None
) -> pd.DataFrame:
    """Calls per (client source, server source, languages, scopes) among the filtered calls
    (settled minutes from their stored rows: ``rows.rows_for``)."""
    rows, bound = rows_for(store, filters, options, clock=False, phases=())
    keys = ", ".join(SOURCE_KEYS)
    sql = (  # weighted: the calls made, estimated under sampling
        f"SELECT {keys}, {weighted.count()} AS calls\nFROM ({rows})\nGROUP BY {keys}\n"
        "ORDER BY calls DESC"
    )
    return store.query(sql, bound, readonly=True)


def unavailable_phases(mix: pd.DataFrame) -> pd.DataFrame:
    """For each pair of sources in ``mix`` other than ours on both sides: its calls and
    the catalogued phases it cannot have (with the reason): the pages' note."""
    records = []
    pairs = mix.groupby(["client_source", "server_source"], as_index=False)["calls"].sum()
    for pair in pairs.itertuples(index=False):
        if pair.client_source == pair.server_source == OURS:
            continue
        frame = phase_sources(pair.client_source, pair.server_source)
        missing = frame[frame["unavailable"] != ""]
        if not missing.empty:
            records.append(
                (
                    pair.client_source or "(missing)",
                    pair.server_source or "(missing)",
                    int(pair.calls),
                    ", ".join(missing["phase"]),
                )
            )
    return pd.DataFrame.from_records(
        records, columns=["client_source", "server_source", "calls", "unavailable_phases"]
    )

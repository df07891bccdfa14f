"""What a page says instead of an empty chart: no calls yet (and how to send some), none
matching the filters, phases the calls' tracers cannot give, calls seen from one side.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from grpc_overhead.analyzer.insights import catalog, sources
from grpc_overhead.analyzer.options import CallFilters
from grpc_overhead.app.cached import load

SEND_DATA = (
    "Send spans to the intake: run `grpc-overhead demo`, or run your services under "
    "`opentelemetry-instrument` with grpc-overhead-instrumentation installed: with no endpoint "
    "configured they send to localhost:4317 (OTLP/gRPC) or localhost:4318 (OTLP/HTTP: the Java "
    "agent, Node, .NET), which a plain `grpc-overhead serve` takes itself when no collector "
    "holds them. Otherwise point an OpenTelemetry Collector's `otlp` exporter (or any SDK "
    "exporter) at the intake addresses `grpc-overhead serve` prints "
    '(see the README\'s "Instrument your own service").'
)


def note_unavailable_phases(filters: CallFilters, mix: pd.DataFrame | None = None) -> None:
    """Say which phases the selected calls cannot have because of who traced them: gRPC's
    own tracing (A72), semconv message events and plain spans record fewer moments than
    our instrumentation. Silent when every call is ours on both sides. ``mix``: the
    calls per source (``sources.source_mix``'s columns) where the page has it already."""
    if mix is None:
        mix = load(sources.source_mix, filters)
    missing = sources.unavailable_phases(mix)
    for row in missing.itertuples(index=False):
        st.info(
            f"{row.calls:,} calls here are traced by {row.client_source} (client) and "
            f"{row.server_source} (server): their events do not mark the moments of "
            f"{row.unavailable_phases}, so those phases are empty for them (the call "
            "explorer says why, phase by phase)."
        )


def require_calls(filters: CallFilters) -> None:
    """Stop the page with a helpful empty state when no call matches ``filters``."""
    found = load(catalog.presence, filters)
    if int(found["stored"].iloc[0]) == 0:
        st.info(f"No calls stored yet. {SEND_DATA}")
        st.stop()
    if int(found["matching"].iloc[0]) == 0:
        st.info(
            "No calls match the filters. Widen the time range or set service, method, "
            "run or OpenTelemetry service back to (all) in the sidebar."
        )
        st.stop()


def one_side_caption(sides: pd.Series) -> None:
    """Say which calls were seen from one side only (one side attached, or a server half
    dropped by tail-aware sampling), and what that leaves out, instead of showing their
    missing phases as if they were zero. ``sides``: a row with ``insights.rows.sides``'
    counts (``server_only_calls``, ``client_only_calls``, ``client_only_sampled_calls``)."""
    server_only, client_only = int(sides["server_only_calls"]), int(sides["client_only_calls"])
    client_only_sampled = int(sides.get("client_only_sampled_calls", 0))
    parts = []
    if server_only:
        parts.append(
            f"**Server side only: {server_only:,} calls** (their callers are not instrumented): "
            "server phases and the count are measured; total and the network phases need the "
            "client's half and are left out for them."
        )
    if client_only - client_only_sampled:
        parts.append(
            f"**Client side only: {client_only - client_only_sampled:,} calls** (their server "
            "is not instrumented): client phases and total are measured; the server's phases "
            "and the one-way network phases are left out for them."
        )
    if client_only_sampled:
        parts.append(
            f"**Client side only by sampling: {client_only_sampled:,} calls** (slow for the "
            "client alone, their server dropped its half under tail-aware sampling): client "
            "phases and total are measured, counted on the server's instance; the server's "
            "phases and the one-way network phases are left out for them."
        )
    if parts:
        st.caption(" ".join(parts))
